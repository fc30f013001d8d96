// growformer sweep: a base config, axes of dotted-path overrides and seeds; one run directory
// per job; a summary (CSV and Markdown) of every job and of every group of seeds (mean +- sd).
//
// A sweep can be stopped at any point and run again with the same command: finished jobs are
// read back from their `sweep_job.json`, a job with a checkpoint resumes from it, and a job that
// stopped before its first checkpoint starts again. A job that fails is recorded as failed, the
// sweep goes on (exit status 1 at the end), and the next run of the sweep tries it again.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include <growformer/distributed.hpp>
#include <growformer/errors.hpp>
#include <growformer/json_text.hpp>
#include <growformer/run_dir.hpp>
#include <growformer/trainer.hpp>

#include "commands.hpp"
#include "job_pattern.hpp"
#include "sweep_file.hpp"

namespace po = boost::program_options;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace gfapp {
namespace {

constexpr int kInterrupted = 130;  // the trainer's exit status after Ctrl-C / SIGTERM
constexpr int kBusy = -1;          // a job another process runs now (never recorded)
const char* kJobFile = "sweep_job.json";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  try {
    return gf::json_bytes_tree(json::parse(in));  // as run_recorded wrote it (json_text.hpp)
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
  f.announce_stop = false;  // the sweep says how to continue: run it again
  gf::RunDir rd(dir.string());
  std::unique_ptr<gf::Experiment> ex;
  int rc;
  std::error_code ec;
  rd.recover_last_from_best();  // stopped between writing its best and its last checkpoint
  if (fs::exists(rd.last_checkpoint(), ec)) {
    *how = "resumed";
    ex = gf::experiment_from_checkpoint(rd.last_checkpoint(), paths);
    rc = ex->resume(dir.string(), f);
  } else {
    if (fs::exists(dir, ec)) {        // stopped before its first checkpoint: nothing worth keeping
      rd.lock();                      // refuses while another process runs this job
      rd.refuse_restart_over_best();  // unless a best checkpoint is there (last was lost)
      fs::remove_all(dir);
    }
    *how = "ran";
    ex = std::make_unique<gf::Experiment>(load_config(base, j.overrides), paths);
    rc = ex->train(f);
  }
  json row = {{"exit", rc},
              {"params", ex->model().num_parameters()},
              {"heads", ex->model().heads_per_block()}};
  // the summary keys the policies name for tables (incrt_geometric: K_obs, K_pred), in order;
  // a pruning key that a growth key already names is prefixed `pruning.`
  const gf::RunOutcome& out = ex->outcome();
  json columns = json::array();
  auto add = [&](const std::vector<std::string>& keys, const std::map<std::string, double>& sum,
                 const char* prefix) {
    for (const std::string& k : keys) {
      auto it = sum.find(k);
      if (it == sum.end()) continue;
      std::string name = row.contains(k) ? prefix + k : k;
      row[name] = it->second;
      columns.push_back(name);
    }
  };
  add(out.growth_columns, out.growth_summary, "growth.");
  add(out.pruning_columns, out.pruning_summary, "pruning.");
  row["summary_columns"] = columns;
  if (rc == 0 && out.tested) {
    row["test_accuracy"] = out.test.result.accuracy;
    row["test_loss"] = out.test.result.loss;
  }
  if (rc == 0) row["best_val_accuracy"] = out.best_val;
  return row;
}

// Job K of N's whole config built without its data (Experiment's data_need "check"); a
// ConfigError naming the job, its overrides and the key when it does not hold.
void check_job(const std::string& base, const Job& j, size_t k, size_t n,
               const std::vector<std::string>& paths) {
  try {
    gf::Experiment(load_config(base, j.overrides), paths, "", "check");
  } catch (const std::exception& e) {  // a factory's RuntimeError is the config's too
    std::string sets;
    for (std::string o : j.overrides) {  // a section's value is dumped YAML: one line here
      while (!o.empty() && std::isspace(static_cast<unsigned char>(o.back()))) o.pop_back();
      for (char& ch : o)
        if (ch == '\n') ch = ' ';
      sets += (sets.empty() ? "" : " ") + o;
    }
    throw gf::ConfigError("sweep job " + std::to_string(k + 1) + "/" + std::to_string(n) + " `" +
                          j.name + "` (overrides: " + gf::printable(sets.substr(0, 600)) +
                          "): " + e.what() + "\nnothing was run; fix the sweep file or --set");
  }
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
    for (auto& x : v) s += (s.empty() ? "" : " ") + gf::dump_json(x);
    return s;
  }
  return v.is_null() ? std::string() : gf::dump_json(v);
}

std::string csv_cell(
    const std::string& c) {  // RFC 4180: quote cells with separators, quotes or newlines
  if (c.find_first_of(",\"\n") == std::string::npos) return c;
  std::string e = "\"";
  for (char ch : c) e += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return e + "\"";
}

// Writes ROWS as a Markdown table (returned) and as CSV to CSV_PATH.
std::string write_table(const std::vector<std::string>& cols, const json& rows,
                        const fs::path& csv_path) {
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

// The policies' summary columns of every row, in order of first appearance (a record
// written before rows named them: INCRT's K_obs and K_pred where present).
std::vector<std::string> summary_columns(const json& rows) {
  std::vector<std::string> cols;
  for (auto& r : rows) {
    json named = r.contains("summary_columns") ? r["summary_columns"] : json::array();
    if (!r.contains("summary_columns"))
      for (auto k : {"K_obs", "K_pred"})
        if (r.contains(k)) named.push_back(k);
    for (auto& c : named)
      if (c.is_string() && std::find(cols.begin(), cols.end(), c.get<std::string>()) == cols.end())
        cols.push_back(c.get<std::string>());
  }
  return cols;
}

// One row per combination of axis values: its seeds' mean +- sd.
json group_rows(const std::vector<Axis>& ax, const json& rows,
                const std::vector<std::string>& extra) {
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
    for (const std::string& c : extra) row[c] = mean_sd(g, c.c_str(), "%.2f");
    row["time_s"] = mean_sd(g, "time_s", "%.1f");
    out.push_back(row);
  }
  return out;
}

// --shard I/N read: (I, N), whole numbers of at most 9 digits (no sign, no overflow) with
// 0 <= I < N <= the job count.
std::pair<size_t, size_t> parse_shard(const std::string& v, size_t job_count) {
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
                     std::to_string(job_count) +
                     " job(s): a shard past the last job would run "
                     "nothing; use N <= " +
                     std::to_string(job_count));
  return {i, n};
}

// Every job's config is checked whole before any job runs (overrides, every component's
// options, plugins' included, the model built on a stand-in vocabulary; no data read), so a
// typo in one axis value stops the sweep up front naming the job and the key. Unless only the
// configs are checked (CONFIGS_ONLY), a job directory left by an earlier run of this sweep must
// have been started with the same overrides.
void check_jobs(const SweepPlan& plan, const fs::path& out_dir,
                const std::vector<std::string>& paths, bool configs_only) {
  for (size_t k = 0; k < plan.jobs.size(); ++k) {
    const Job& j = plan.jobs[k];
    check_job(plan.base, j, k, plan.jobs.size(), paths);
    if (configs_only) continue;
    fs::path rec = out_dir / j.name / kJobFile;
    if (fs::exists(rec) && read_json(rec)["overrides"] != json(j.overrides))
      throw gf::ConfigError(rec.string() +
                            ": this job ran with other overrides (the sweep file or "
                            "--set changed); use another --out, or delete the job's directory");
  }
}

// What the jobs of one sweep share: the plan, the plugin folders, the sweep directory and which
// jobs this process runs (I, I + N, ... of shard I/N; under mpirun or srun rank I of N).
struct SweepContext {
  const SweepPlan& plan;
  const std::vector<std::string>& paths;
  fs::path out_dir;
  gf::Communicator& comm;
  size_t shard = 0, shards = 1;
  std::vector<bool> selected;  // by --only (every job when it is not given)
  bool distributed() const { return comm.size() > 1; }
  bool mine(size_t k) const { return k % shards == shard && selected[k]; }
};

// --only PATTERN: the jobs whose names contain a match of PATTERN (a regular expression in
// ECMAScript syntax, e.g. "paired|k2", matched without backtracking: job_pattern.hpp); at least
// one must match.
std::vector<bool> select_jobs(const SweepPlan& plan, const std::string* pattern) {
  std::vector<bool> out(plan.jobs.size(), true);
  if (!pattern) return out;
  std::optional<JobPattern> re;
  try {
    re.emplace(*pattern);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--only " + gf::printable(pattern->substr(0, 100)) + ": " + e.what());
  }
  size_t n = 0;
  for (size_t k = 0; k < out.size(); ++k) n += (out[k] = re->search(plan.jobs[k].name));
  if (n == 0)
    throw UsageError("--only " + gf::printable(pattern->substr(0, 100)) + ": matches none of the " +
                     std::to_string(out.size()) + " job names (e.g. " + plan.jobs[0].name + ")");
  return out;
}

// A job's row of the table: its result with the job's name, seed and axis labels.
json label(json row, const Job& j, const std::vector<Axis>& ax) {
  row["job"] = j.name;
  row["seed"] = j.seed;
  for (size_t i = 0; i < ax.size(); ++i) row[ax[i].path] = j.labels[i];
  return row;
}

// Runs (or continues) job J in DIR, timed; its row, recorded in the job's sweep_job.json unless
// the run was interrupted. A job that throws is recorded as failed with the error.
json run_recorded(const SweepContext& cx, const Job& j, const fs::path& dir, std::string* how) {
  auto t0 = std::chrono::steady_clock::now();
  json row;
  try {
    row = run_job(cx.plan.base, j, dir, cx.paths, how);
  } catch (const gf::Interrupted&) {  // before the job's loop began: nothing to record
    row = {{"exit", kInterrupted}};
  } catch (const gf::RunDirInUse& e) {  // another process runs this job now: its record, not ours
    return {{"exit", kBusy}, {"pid", e.pid()}};
  } catch (const std::exception& e) {  // recorded; the sweep goes on
    row = {{"exit", 1}, {"error", e.what()}};
  }
  row["time_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (*how == "resumed") row["resumed"] = true;
  if (row["exit"] == kInterrupted) return row;
  fs::create_directories(dir);
  gf::RunDir(dir.string())
      .write((dir / kJobFile).string(),
             gf::dump_json(json{{"overrides", j.overrides}, {"result", row}}, 1) + "\n");
  return row;
}

enum class JobEnd { row, skipped, interrupted, busy };

// Job K in this process, with its progress line: the row of a record that finished earlier, or
// the job run now (this shard's); another shard's job that has not finished is skipped (under
// mpirun or srun silently: its own process reports it).
JobEnd sweep_job(const SweepContext& cx, size_t k, json* out) {
  const Job& j = cx.plan.jobs[k];
  const bool mine = cx.mine(k);
  if (cx.distributed() && !mine) return JobEnd::skipped;
  fs::path dir = cx.out_dir / j.name, rec = dir / kJobFile;
  // several processes print whole lines, each its own jobs
  std::string head =
      "[" + std::to_string(k + 1) + "/" + std::to_string(cx.plan.jobs.size()) + "] " + j.name;
  if (cx.distributed()) {
    head = "rank " + std::to_string(cx.comm.rank()) + " " + head;
  } else {
    std::cout << head << std::flush;
    head.clear();
  }
  json row;
  std::string how = "finished earlier";
  json earlier = fs::exists(rec) ? read_json(rec) : json();
  if (earlier.contains("result") && earlier["result"]["exit"] == 0) {
    row = earlier["result"];
  } else if (!mine) {
    std::cout << (cx.selected[k] ? ": another shard's, not finished yet\n"
                                 : ": not selected by --only\n");
    return JobEnd::skipped;
  } else {
    const std::string pid = gf::RunDir(dir.string()).lock_holder();
    row = pid.empty() ? run_recorded(cx, j, dir, &how) : json{{"exit", kBusy}, {"pid", pid}};
    if (row["exit"] == kBusy) {
      std::cout << head << ": running in another process now (pid " << row["pid"].get<std::string>()
                << "); run the sweep again when it is done to include its row\n"
                << std::flush;
      return JobEnd::busy;
    }
    if (row["exit"] == kInterrupted) {
      std::cout << head
                << ": interrupted (its last checkpoint is kept); run the same command again "
                   "to continue\n"
                << std::flush;
      return JobEnd::interrupted;
    }
  }
  row = label(row, j, cx.plan.axes);
  std::cout << head << ": " << how << (row["exit"] == 0 ? "" : " and FAILED") << ", test accuracy "
            << (row.contains("test_accuracy") ? cell(row["test_accuracy"]) : "-") << ", "
            << cell(row["time_s"]) << " s"
            << (row.contains("error") ? "\n    " + row["error"].get<std::string>() : "") << "\n"
            << std::flush;
  *out = row;
  return JobEnd::row;
}

// A sweep that Ctrl-C or SIGTERM stopped between jobs (BEFORE: the next job's name, or "");
// in a job, the job stops with a checkpoint and says so.
int stopped_between_jobs(const SweepContext& cx, const std::string& before) {
  std::cout << "sweep interrupted" << (before.empty() ? "" : " before job " + before)
            << "; run the same command again to continue\n"
            << std::flush;
  if (cx.distributed()) cx.comm.abort(kInterrupted);
  return kInterrupted;
}

// This process's jobs in order, their rows appended to ROWS; 0, 1 when a job failed or another
// process was running it, or kInterrupted (every process of a distributed sweep is ended then).
int run_jobs(const SweepContext& cx, json* rows) {
  int status = 0;
  for (size_t k = 0; k < cx.plan.jobs.size(); ++k) {
    if (gf::interrupted()) return stopped_between_jobs(cx, cx.plan.jobs[k].name);
    json row;
    const JobEnd end = sweep_job(cx, k, &row);
    if (end == JobEnd::interrupted) {
      // the other processes may be in their jobs or waiting for this one: end them all
      if (cx.distributed()) cx.comm.abort(kInterrupted);
      return kInterrupted;
    }
    if (end == JobEnd::skipped) continue;
    if (end == JobEnd::busy) {  // not finished here: the table would lack its row
      status = 1;
      continue;
    }
    if (row["exit"] != 0) status = 1;
    rows->push_back(row);
  }
  if (gf::interrupted()) return stopped_between_jobs(cx, "");
  return status;
}

// Every job's row as its record holds it (rank 0 of a distributed sweep, once every process is
// done); a job without a record failed. STATUS becomes 1 when any job failed.
json recorded_rows(const SweepContext& cx, int* status) {
  json rows = json::array();
  for (auto& j : cx.plan.jobs) {
    fs::path rec = cx.out_dir / j.name / kJobFile;
    json r = fs::exists(rec) ? read_json(rec) : json();
    rows.push_back(label(
        r.contains("result") ? r["result"] : json{{"exit", 1}, {"error", "no record of this job"}},
        j, cx.plan.axes));
    if (rows.back()["exit"] != 0) *status = 1;
  }
  return rows;
}

// The tables of every job and of every group of seeds: summary.md, summary.csv and groups.csv
// in OUT_DIR, and on the console.
void write_summary(const SweepPlan& plan, const json& rows, const fs::path& out_dir) {
  std::vector<std::string> cols{"job"}, gcols;
  for (auto& a : plan.axes) {
    cols.push_back(a.path);
    gcols.push_back(a.path);
  }
  const std::vector<std::string> extra = summary_columns(rows);  // the policies' own
  for (auto c : {"seed", "test_accuracy", "best_val_accuracy", "params", "heads"})
    cols.push_back(c);
  for (auto& c : extra) cols.push_back(c);
  for (auto c : {"time_s", "exit"}) cols.push_back(c);
  for (auto c : {"seeds", "test_accuracy", "best_val_accuracy", "params"}) gcols.push_back(c);
  for (auto& c : extra) gcols.push_back(c);
  gcols.push_back("time_s");
  json groups = group_rows(plan.axes, rows, extra);
  std::string jobs_md = write_table(cols, rows, out_dir / "summary.csv");
  std::string groups_md = write_table(gcols, groups, out_dir / "groups.csv");
  std::ofstream md(out_dir / "summary.md");
  md << "# sweep " << plan.name << "\n\nbase: `" << plan.base << "`\n\n"
     << "## mean +- sd over seeds (sample sd)\n\n"
     << groups_md << "\n## jobs\n\n"
     << jobs_md;
  std::cout << "\n"
            << groups_md << "\n"
            << jobs_md << "\nsummary: " << (out_dir / "summary.md").string() << ", "
            << (out_dir / "summary.csv").string() << ", " << (out_dir / "groups.csv").string()
            << "\n";
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
      "shard", po::value<std::string>(),
      "I/N: run only jobs I, I+N, I+2N, ... (0-based; several "
      "processes share one --out); the others' finished jobs join the table")(
      "only", po::value<std::string>(),
      "PATTERN: run only the jobs whose names match this regular "
      "expression (e.g. 'paired|k2'); the others' finished jobs join the table")(
      "check", "check every job's config (no data read) and stop, running nothing")("quiet,q",
                                                                                    "less output");
  po::positional_options_description p;
  p.add("sweep", 1);
  bool help;
  auto vm = parse(
      "growformer sweep SWEEP.yaml [--out DIR] [--set KEY=VALUE]... [--shard I/N] [--only PATTERN] "
      "[--check]",
      o, p, args, &help);
  if (help) return 0;
  // under mpirun/srun the processes share the jobs: rank I of N runs jobs I, I+N, ... (each job
  // in its one process), and rank 0 writes the table of all of them
  gf::Communicator& comm = gf::world();
  // Ctrl-C and SIGTERM reach the running job (it shares this process): it writes its
  // checkpoint and stops, and the sweep ends with status 130; a rerun continues
  gf::install_interrupt_handler();
  const SweepPlan plan = plan_sweep(gf::ConfigNode::load_file(file), sets);
  if (out_dir.empty()) out_dir = "runs/sweep-" + plan.name;
  SweepContext cx{plan, paths, out_dir, comm};
  const std::string only = vm.count("only") ? vm["only"].as<std::string>() : std::string();
  cx.selected = select_jobs(plan, vm.count("only") ? &only : nullptr);
  if (vm.count("shard"))
    std::tie(cx.shard, cx.shards) = parse_shard(vm["shard"].as<std::string>(), plan.jobs.size());
  if (cx.distributed()) {
    if (vm.count("shard"))
      throw UsageError(
          "--shard: under mpirun or srun each process takes its own shard (rank I of N "
          "runs jobs I, I+N, ...); leave --shard out");
    cx.shard = static_cast<size_t>(comm.rank());
    cx.shards = static_cast<size_t>(comm.size());
  }
  check_jobs(plan, cx.out_dir, paths, vm.count("check") > 0);
  if (vm.count("check")) {
    if (comm.root())
      std::cout << "sweep " << plan.name << ": the configs of all " << plan.jobs.size()
                << " jobs are valid (no data read, nothing run)\n";
    return 0;
  }
  fs::create_directories(cx.out_dir);
  if (comm.root())
    std::cout << "sweep " << plan.name << ": " << plan.jobs.size() << " jobs -> " << out_dir
              << (cx.distributed() ? " (" + std::to_string(comm.size()) + " processes)" : "")
              << "\n";
  json rows = json::array();
  int status = run_jobs(cx, &rows);
  if (status == kInterrupted) return status;
  if (cx.distributed()) {
    // every process done (the sum waits for all): rank 0 reads every job's record
    double failed = status;
    comm.allreduce_sum(&failed, 1);
    status = failed > 0 ? 1 : 0;
    if (!comm.root()) return status;
    rows = recorded_rows(cx, &status);
  }
  write_summary(plan, rows, cx.out_dir);
  return status;
}

}  // namespace gfapp
