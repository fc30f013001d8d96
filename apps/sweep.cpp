// growformer sweep: a base config, axes of dotted-path overrides and seeds; one run directory
// per job; a summary (CSV and Markdown) of every job and of every group of seeds (mean +- sd).
//
// A sweep can be stopped at any point and run again with the same command: finished jobs are
// read back from their `sweep_job.json`, a job with a checkpoint resumes from it, and a job that
// stopped before its first checkpoint starts again. A job that fails is recorded as failed, the
// sweep goes on (exit status 1 at the end), and the next run of the sweep tries it again.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include <growformer/distributed.hpp>
#include <growformer/errors.hpp>
#include <growformer/run_dir.hpp>
#include <growformer/trainer.hpp>

#include "commands.hpp"

namespace po = boost::program_options;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace gfapp {
namespace {

constexpr int kInterrupted = 130;  // the trainer's exit status after Ctrl-C / SIGTERM
const char* kJobFile = "sweep_job.json";

// One axis: a dotted path and its values, each with a label that names run directories and
// table rows. Values are a list (labels derived) or a mapping label -> value. The axis `set`
// maps labels to lists of KEY=VALUE overrides (an arm that changes several keys at once).
struct Axis {
  std::string path;
  std::vector<std::string> values, labels;
  std::vector<std::vector<std::string>> overrides;  // axis `set`: each label's overrides
};

struct Job {
  std::string name;
  std::vector<std::string> overrides;
  int64_t seed = 0;
  std::vector<std::string> labels;
};

std::string safe_name(std::string s) {
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
  return s;
}

std::string value_text(gf::ConfigNode v) {
  std::string text = v.is_scalar() ? v.as_string() : v.dump();
  v.mark_consumed();
  return text;
}

// A list value's label: the value itself, or for a mapping (a whole component section such as
// `{plugin: magnitude, threshold: 0.05}`) its plugin name, made distinct within the axis.
std::string derived_label(const std::string& text, size_t i, const std::vector<std::string>& taken) {
  gf::ConfigNode parsed;
  try {
    parsed = gf::ConfigNode::load_string(text, "axis value");
  } catch (const gf::ConfigError&) {
    return text;
  }
  if (!parsed.is_map()) return text;
  std::string label = parsed.has("plugin") ? parsed.child("plugin").as_string() : "v" + std::to_string(i);
  for (auto& l : taken)
    if (l == label) return label + "-" + std::to_string(i);
  return label;
}

std::vector<Axis> read_axes(const gf::ConfigNode& axes) {
  std::vector<Axis> out;
  for (auto& k : axes.keys()) {
    gf::ConfigNode v = axes.child(k);
    Axis a;
    a.path = k;
    if (k == "set") {  // label -> [KEY=VALUE, ...]
      if (!v.is_map())
        v.fail("the axis `set` is a mapping from labels to lists of KEY=VALUE overrides");
      for (auto& label : v.keys()) {
        gf::ConfigNode list = v.child(label);
        if (safe_name(label) != label)
          list.fail("an axis label names run directories: use letters, digits, '-', '_', '.'");
        if (!list.is_sequence() || list.items().empty())
          list.fail("an arm of the axis `set` is a non-empty list of KEY=VALUE overrides");
        std::vector<std::string> kv;
        for (auto& it : list.items()) {
          const std::string text = value_text(it);
          if (!it.is_scalar() || text.find('=') == std::string::npos || text.front() == '=')
            it.fail("expected KEY=VALUE, got '" + text + "'");
          kv.push_back(text);
        }
        a.labels.push_back(label);
        a.values.push_back(label);
        a.overrides.push_back(kv);
      }
      if (a.values.empty()) v.fail("the axis `set` needs at least one arm");
      out.push_back(a);
      continue;
    }
    if (v.is_map()) {  // label -> value
      for (auto& label : v.keys()) {
        if (safe_name(label) != label)
          v.child(label).fail("an axis label names run directories: use letters, digits, '-', '_', '.'");
        a.labels.push_back(label);
        a.values.push_back(value_text(v.child(label)));
      }
    } else if (v.is_sequence()) {
      size_t i = 0;
      for (auto& it : v.items()) {
        a.values.push_back(value_text(it));
        a.labels.push_back(derived_label(a.values.back(), i++, a.labels));
      }
    }
    if (a.values.empty())
      v.fail("an axis is a non-empty list of values, or a mapping from labels to values");
    // each value is one group of jobs: a repeated value would be counted as more seeds of
    // one group, and two labels with one directory name would share a run directory
    for (size_t i = 0; i < a.values.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        if (v.is_sequence() && a.values[i] == a.values[j])
          v.fail("the value `" + gf::printable(a.values[i].substr(0, 200)) +
                 "` is listed twice (entries " + std::to_string(j + 1) + " and " +
                 std::to_string(i + 1) + "); each value of an axis is one group of jobs");
        if (safe_name(a.labels[i]) == safe_name(a.labels[j]))
          v.fail("the labels `" + gf::printable(a.labels[j].substr(0, 200)) + "` and `" +
                 gf::printable(a.labels[i].substr(0, 200)) + "` name the same run directory `" +
                 safe_name(a.labels[i]).substr(0, 200) + "`; give them distinct labels");
      }
    out.push_back(a);
  }
  return out;
}

constexpr size_t kMaxJobs = 10000;

// The number of jobs (combinations x seeds), counted before any is made: a refusal naming
// each axis's size when it exceeds kMaxJobs.
size_t count_jobs(const std::vector<Axis>& ax, size_t seeds, const gf::ConfigNode& axes) {
  size_t jobs = seeds;
  bool over = jobs > kMaxJobs;
  std::string sizes;
  for (auto& a : ax) {
    sizes += (sizes.empty() ? "" : " x ") + std::to_string(a.values.size()) + " (" + a.path + ")";
    if (!over && jobs > kMaxJobs / a.values.size()) over = true;
    if (!over) jobs *= a.values.size();
  }
  if (over || jobs > kMaxJobs)
    axes.fail("the sweep has more than " + std::to_string(kMaxJobs) + " jobs: " + sizes + " x " +
              std::to_string(seeds) + " seed(s); split it into several sweep files");
  return jobs;
}

std::vector<Job> make_jobs(const std::vector<Axis>& ax, const std::vector<int64_t>& seeds,
                           const std::vector<std::string>& sets) {
  std::vector<std::vector<size_t>> combos{{}};
  for (auto& a : ax) {
    std::vector<std::vector<size_t>> next;
    for (auto& c : combos)
      for (size_t i = 0; i < a.values.size(); ++i) {
        next.push_back(c);
        next.back().push_back(i);
      }
    combos = next;
  }
  std::vector<Job> jobs;
  for (auto& c : combos)
    for (int64_t seed : seeds) {
      Job j;
      j.seed = seed;
      j.overrides = sets;
      std::string name;
      for (size_t i = 0; i < ax.size(); ++i) {
        if (!ax[i].overrides.empty())
          for (const std::string& kv : ax[i].overrides[c[i]]) j.overrides.push_back(kv);
        else
          j.overrides.push_back(ax[i].path + "=" + ax[i].values[c[i]]);
        j.labels.push_back(ax[i].labels[c[i]]);
        name += (name.empty() ? "" : "__") + safe_name(ax[i].labels[c[i]]);
      }
      j.overrides.push_back("seed=" + std::to_string(seed));
      j.name = (name.empty() ? "job" : name) + "__seed" + std::to_string(seed);
      jobs.push_back(j);
    }
  return jobs;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw gf::RuntimeError(p.string() + ": unreadable sweep job record (" + e.what() +
                           "); delete the job's directory to run it again");
  }
}

// Runs (or continues) one job in DIR; the row of the summary tables.
json run_job(const std::string& base, const Job& j, const fs::path& dir,
             const std::vector<std::string>& paths, std::string* how) {
  gf::RunFlags f;
  f.run_dir = dir.string();
  f.plugin_paths = paths;
  f.quiet = true;
  gf::RunDir rd(dir.string());
  std::unique_ptr<gf::Experiment> ex;
  int rc;
  std::error_code ec;
  if (fs::exists(rd.last_checkpoint(), ec)) {
    *how = "resumed";
    ex = gf::experiment_from_checkpoint(rd.last_checkpoint(), paths);
    rc = ex->resume(dir.string(), f);
  } else {
    if (fs::exists(dir, ec)) {  // stopped before its first checkpoint: nothing worth keeping
      rd.lock();                // refuses while another process runs this job
      rd.refuse_restart_over_best();  // unless a best checkpoint is there (last was lost)
      fs::remove_all(dir);
    }
    *how = "ran";
    ex = std::make_unique<gf::Experiment>(load_config(base, j.overrides), paths);
    rc = ex->train(f);
  }
  json row = {{"exit", rc}, {"params", ex->model().num_parameters()},
              {"heads", ex->model().heads_per_block()}};
  const gf::RunOutcome& out = ex->outcome();
  for (auto k : {"K_obs", "K_pred"}) {  // INCRT's K_obs / K_pred from its summary
    auto it = out.growth_summary.find(k);
    if (it != out.growth_summary.end()) row[k] = it->second;
  }
  if (rc == 0 && out.tested) {
    row["test_accuracy"] = out.test.result.accuracy;
    row["test_loss"] = out.test.result.loss;
  }
  if (rc == 0) row["best_val_accuracy"] = out.best_val;
  return row;
}

std::string cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4f", v.get<double>());
    return b;
  }
  if (v.is_array()) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : " ") + x.dump();
    return s;
  }
  return v.is_null() ? std::string() : v.dump();
}

std::string csv_cell(const std::string& c) {  // RFC 4180: quote cells with separators, quotes or newlines
  if (c.find_first_of(",\"\n") == std::string::npos) return c;
  std::string e = "\"";
  for (char ch : c) e += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return e + "\"";
}

// Writes ROWS as a Markdown table (returned) and as CSV to CSV_PATH.
std::string write_table(const std::vector<std::string>& cols, const json& rows, const fs::path& csv_path) {
  std::ofstream csv(csv_path);
  std::string md = "|";
  for (size_t i = 0; i < cols.size(); ++i) {
    csv << (i ? "," : "") << csv_cell(cols[i]);
    md += " " + cols[i] + " |";
  }
  csv << "\n";
  md += "\n|";
  for (size_t i = 0; i < cols.size(); ++i) md += "---|";
  md += "\n";
  for (auto& r : rows) {
    md += "|";
    for (size_t i = 0; i < cols.size(); ++i) {
      std::string c = r.contains(cols[i]) ? cell(r[cols[i]]) : "";
      csv << (i ? "," : "") << csv_cell(c);
      md += " " + c + " |";
    }
    csv << "\n";
    md += "\n";
  }
  return md;
}

// mean +- sd (sample standard deviation, n - 1) of KEY over the rows that have it.
std::string mean_sd(const std::vector<const json*>& rows, const char* key, const char* fmt) {
  std::vector<double> v;
  for (auto* r : rows)
    if (r->contains(key) && (*r)[key].is_number()) v.push_back((*r)[key].get<double>());
  if (v.empty()) return "";
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  char b[96];
  if (v.size() < 2) {
    std::snprintf(b, sizeof b, fmt, m);
    return b;
  }
  char sd[48];
  std::snprintf(b, sizeof b, fmt, m);
  std::snprintf(sd, sizeof sd, fmt, std::sqrt(s / (v.size() - 1)));
  return std::string(b) + " +- " + sd;
}

// One row per combination of axis values: its seeds' mean +- sd.
json group_rows(const std::vector<Axis>& ax, const json& rows) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const json*>> groups;
  for (auto& r : rows) {
    std::string key;
    for (auto& a : ax) key += r[a.path].get<std::string>() + "\x1f";
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&r);
  }
  json out = json::array();
  for (auto& key : order) {
    auto& g = groups[key];
    json row;
    for (auto& a : ax) row[a.path] = (*g.front())[a.path];
    size_t done = 0;
    for (auto* r : g) done += (*r)["exit"] == 0;
    row["seeds"] = std::to_string(done) + "/" + std::to_string(g.size());
    row["test_accuracy"] = mean_sd(g, "test_accuracy", "%.4f");
    row["best_val_accuracy"] = mean_sd(g, "best_val_accuracy", "%.4f");
    row["params"] = mean_sd(g, "params", "%.0f");
    row["K_obs"] = mean_sd(g, "K_obs", "%.2f");
    row["K_pred"] = mean_sd(g, "K_pred", "%.2f");
    row["time_s"] = mean_sd(g, "time_s", "%.1f");
    out.push_back(row);
  }
  return out;
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args) {
  po::options_description o("sweep options");
  std::string file, out_dir;
  std::vector<std::string> sets, paths;
  o.add_options()("sweep", po::value(&file)->required(), "sweep YAML (base, axes, seeds)")(
      "out", po::value(&out_dir), "sweep directory (default runs/sweep-<name>); rerun to continue")(
      "set", po::value(&sets)->composing(), "override applied to every job")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder")(
      "shard", po::value<std::string>(), "I/N: run only jobs I, I+N, I+2N, ... (0-based; several "
      "processes share one --out); the others' finished jobs join the table")("quiet,q", "less output");
  po::positional_options_description p;
  p.add("sweep", 1);
  bool help;
  auto vm = parse("growformer sweep SWEEP.yaml [--out DIR] [--set KEY=VALUE]...", o, p, args, &help);
  if (help) return 0;
  // under mpirun/srun the processes share the jobs: rank I of N runs jobs I, I+N, ... (each job
  // in its one process), and rank 0 writes the table of all of them
  gf::Communicator& comm = gf::world();
  const bool distributed = comm.size() > 1;
  gf::ConfigNode sw = gf::ConfigNode::load_file(file);
  gf::Options so(sw,
                 {{"name", gf::OptType::String, "sweep", "sweep name"},
                  {"base", gf::OptType::String, "", "base config (relative to this file)", 0, 0, {}, true},
                  {"seeds", gf::OptType::IntList, "[1]", "seeds; every combination runs once per seed"},
                  {"axes", gf::OptType::Component, "{}",
                   "dotted path -> list of values, or mapping label -> value; `set`: label -> list of "
                   "KEY=VALUE overrides (one arm that sets several keys)"},
                  {"set", gf::OptType::StringList, "[]", "KEY=VALUE overrides for every job"}},
                 "sweep");
  std::string base = so.resolve_path(so.get_string("base"));
  for (auto& s : so.get_string_list("set")) sets.insert(sets.begin(), s);
  std::vector<Axis> ax = read_axes(so.get_node("axes"));
  std::vector<int64_t> seeds = so.get_int_list("seeds");
  if (seeds.empty()) so.fail("seeds", "is empty: a sweep runs every combination once per seed");
  for (size_t i = 0; i < seeds.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (seeds[i] == seeds[j])
        so.fail("seeds", "seed " + std::to_string(seeds[i]) + " is listed twice; each seed runs once");
  size_t job_count = count_jobs(ax, seeds.size(), so.get_node("axes"));
  std::vector<Job> jobs = make_jobs(ax, seeds, sets);
  if (out_dir.empty()) out_dir = "runs/sweep-" + so.get_string("name");
  size_t shard = 0, shards = 1;
  if (vm.count("shard")) {
    std::string v = vm["shard"].as<std::string>();
    // whole numbers of at most 9 digits (no sign, no overflow), 0 <= I < N <= the job count
    auto number = [&](const std::string& t, size_t* out) {
      if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
        return false;
      *out = std::stoul(t);
      return true;
    };
    size_t slash = v.find('/'), i = 0, n = 0;
    if (slash == std::string::npos || !number(v.substr(0, slash), &i) ||
        !number(v.substr(slash + 1), &n) || n == 0 || i >= n)
      throw UsageError("--shard " + gf::printable(v.substr(0, 100)) +
                       ": expected I/N, whole numbers with 0 <= I < N (e.g. 0/2)");
    if (n > job_count)
      throw UsageError("--shard " + v + ": " + std::to_string(n) + " shards for " +
                       std::to_string(job_count) + " job(s): a shard past the last job would run "
                       "nothing; use N <= " + std::to_string(job_count));
    shard = i;
    shards = n;
  }
  if (distributed) {
    if (vm.count("shard"))
      throw UsageError("--shard: under mpirun or srun each process takes its own shard (rank I of N "
                       "runs jobs I, I+N, ...); leave --shard out");
    shard = static_cast<size_t>(comm.rank());
    shards = static_cast<size_t>(comm.size());
  }
  // every override must apply (a malformed value or a path through a scalar fails here, before
  // any job runs); unknown keys are caught when each job builds its experiment. A job directory
  // left by an earlier run of this sweep must have been started with the same overrides.
  for (auto& j : jobs) {
    load_config(base, j.overrides);
    fs::path rec = fs::path(out_dir) / j.name / kJobFile;
    if (fs::exists(rec) && read_json(rec)["overrides"] != json(j.overrides))
      throw gf::ConfigError(rec.string() + ": this job ran with other overrides (the sweep file or "
                            "--set changed); use another --out, or delete the job's directory");
  }
  fs::create_directories(out_dir);
  json rows = json::array();
  int status = 0;
  if (comm.root())
    std::cout << "sweep " << so.get_string("name") << ": " << jobs.size() << " jobs -> " << out_dir
              << (distributed ? " (" + std::to_string(comm.size()) + " processes)" : "") << "\n";
  // a job's row of the table: its result with the job's name, seed and axis labels
  auto label = [&](json row, const Job& j) {
    row["job"] = j.name;
    row["seed"] = j.seed;
    for (size_t i = 0; i < ax.size(); ++i) row[ax[i].path] = j.labels[i];
    return row;
  };
  for (size_t k = 0; k < jobs.size(); ++k) {
    auto& j = jobs[k];
    fs::path dir = fs::path(out_dir) / j.name, rec = dir / kJobFile;
    // several processes print whole lines, each its own jobs
    std::string head = "[" + std::to_string(k + 1) + "/" + std::to_string(jobs.size()) + "] " + j.name;
    if (distributed && k % shards != shard) continue;
    if (distributed) {
      head = "rank " + std::to_string(comm.rank()) + " " + head;
    } else {
      std::cout << head << std::flush;
      head.clear();
    }
    json row;
    std::string how = "finished earlier";
    json earlier = fs::exists(rec) ? read_json(rec) : json();
    if (earlier.contains("result") && earlier["result"]["exit"] == 0) {
      row = earlier["result"];
    } else if (k % shards != shard) {
      std::cout << ": another shard's, not finished yet\n";
      continue;
    } else {
      auto t0 = std::chrono::steady_clock::now();
      try {
        row = run_job(base, j, dir, paths, &how);
      } catch (const std::exception& e) {  // recorded; the sweep goes on
        row = {{"exit", 1}, {"error", e.what()}};
      }
      row["time_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (how == "resumed") row["resumed"] = true;
      if (row["exit"] == kInterrupted) {
        std::cout << head << ": interrupted; run the same command again to continue\n" << std::flush;
        // the other processes may be in their jobs or waiting for this one: end them all
        if (distributed) comm.abort(kInterrupted);
        return kInterrupted;
      }
      fs::create_directories(dir);
      gf::RunDir(dir.string()).write((dir / kJobFile).string(), json{{"overrides", j.overrides}, {"result", row}}.dump(1) + "\n");
    }
    row = label(row, j);
    if (row["exit"] != 0) status = 1;
    std::cout << head << ": " << how << (row["exit"] == 0 ? "" : " and FAILED") << ", test accuracy "
              << (row.contains("test_accuracy") ? cell(row["test_accuracy"]) : "-") << ", "
              << cell(row["time_s"]) << " s"
              << (row.contains("error") ? "\n    " + row["error"].get<std::string>() : "") << "\n"
              << std::flush;
    rows.push_back(row);
  }
  if (distributed) {
    // every process done (the sum waits for all): rank 0 reads every job's record
    double failed = status;
    comm.allreduce_sum(&failed, 1);
    status = failed > 0 ? 1 : 0;
    if (!comm.root()) return status;
    rows = json::array();
    for (auto& j : jobs) {
      fs::path rec = fs::path(out_dir) / j.name / kJobFile;
      json r = fs::exists(rec) ? read_json(rec) : json();
      rows.push_back(label(r.contains("result") ? r["result"]
                                                : json{{"exit", 1}, {"error", "no record of this job"}},
                           j));
      if (rows.back()["exit"] != 0) status = 1;
    }
  }
  std::vector<std::string> cols{"job"}, gcols;
  for (auto& a : ax) {
    cols.push_back(a.path);
    gcols.push_back(a.path);
  }
  for (auto c : {"seed", "test_accuracy", "best_val_accuracy", "params", "heads", "K_obs", "K_pred",
                 "time_s", "exit"})
    cols.push_back(c);
  for (auto c : {"seeds", "test_accuracy", "best_val_accuracy", "params", "K_obs", "K_pred", "time_s"})
    gcols.push_back(c);
  json groups = group_rows(ax, rows);
  std::string jobs_md = write_table(cols, rows, fs::path(out_dir) / "summary.csv");
  std::string groups_md = write_table(gcols, groups, fs::path(out_dir) / "groups.csv");
  std::ofstream md(fs::path(out_dir) / "summary.md");
  md << "# sweep " << so.get_string("name") << "\n\nbase: `" << base << "`\n\n"
     << "## mean +- sd over seeds (sample sd)\n\n" << groups_md << "\n## jobs\n\n" << jobs_md;
  std::cout << "\n" << groups_md << "\n" << jobs_md << "\nsummary: "
            << (fs::path(out_dir) / "summary.md").string() << ", "
            << (fs::path(out_dir) / "summary.csv").string() << ", "
            << (fs::path(out_dir) / "groups.csv").string() << "\n";
  return status;
}

}  // namespace gfapp
