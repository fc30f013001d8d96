// growformer sweep: a base config, axes of dotted-path overrides and seeds; one
// run directory per job; a summary table (CSV and Markdown) of final metrics.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include <growformer/trainer.hpp>

#include "commands.hpp"

namespace po = boost::program_options;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace gfapp {

int cmd_sweep(const std::vector<std::string>& args) {
  po::options_description o("sweep options");
  std::string file, out_dir;
  std::vector<std::string> sets, paths;
  o.add_options()("sweep", po::value(&file)->required(), "sweep YAML (base, axes, seeds)")(
      "out", po::value(&out_dir), "sweep directory (default runs/sweep-<name>)")(
      "set", po::value(&sets)->composing(), "override applied to every job")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder")("quiet,q", "less output");
  po::positional_options_description p;
  p.add("sweep", 1);
  bool help;
  auto vm = parse("growformer sweep SWEEP.yaml [--out DIR] [--set KEY=VALUE]...", o, p, args, &help);
  if (help) return 0;
  gf::ConfigNode sw = gf::ConfigNode::load_file(file);
  gf::Options so(sw,
                 {{"name", gf::OptType::String, "sweep", "sweep name"},
                  {"base", gf::OptType::String, "", "base config (relative to this file)", 0, 0, {}, true},
                  {"seeds", gf::OptType::IntList, "[1]", "seeds; every combination runs once per seed"},
                  {"axes", gf::OptType::Component, "{}", "dotted path -> list of values"},
                  {"set", gf::OptType::StringList, "[]", "KEY=VALUE overrides for every job"}},
                 "sweep");
  std::string base = so.resolve_path(so.get_string("base"));
  std::vector<int64_t> seeds = so.get_int_list("seeds");
  for (auto& s : so.get_string_list("set")) sets.insert(sets.begin(), s);
  gf::ConfigNode axes = so.get_node("axes");
  // an axis value is a scalar or a mapping (a whole component section such as
  // `{plugin: magnitude, threshold: 0.05}`); a mapping is labelled by its plugin name
  struct Axis {
    std::string path;
    std::vector<std::string> values, labels;
  };
  std::vector<Axis> ax;
  for (auto& k : axes.keys()) {
    gf::ConfigNode v = axes.child(k);
    if (!v.is_sequence() || v.items().empty()) v.fail("an axis is a non-empty list of values");
    Axis a;
    a.path = k;
    size_t i = 0;
    for (auto& it : v.items()) {
      std::string text = it.is_scalar() ? it.as_string() : it.dump();
      it.mark_consumed();
      std::string label = text;
      gf::ConfigNode parsed;
      try {
        parsed = gf::ConfigNode::load_string(text, "axis value");
      } catch (const gf::ConfigError&) {
      }
      if (parsed.is_map()) {
        label = parsed.has("plugin") ? parsed.child("plugin").as_string() : "v" + std::to_string(i);
        // the same plugin twice on one axis: keep labels distinct
        for (auto& l : a.labels)
          if (l == label) label += "-" + std::to_string(i);
      }
      a.values.push_back(text);
      a.labels.push_back(label);
      ++i;
    }
    ax.push_back(a);
  }
  if (out_dir.empty()) out_dir = "runs/sweep-" + so.get_string("name");
  if (fs::exists(out_dir) && !fs::is_empty(out_dir))
    throw gf::ConfigError(out_dir + ": sweep directory exists and is not empty (use --out)");
  // every combination first, so that a bad override fails before any job runs
  std::vector<std::vector<size_t>> combos{{}};
  for (auto& a : ax) {
    std::vector<std::vector<size_t>> next;
    for (auto& c : combos)
      for (size_t i = 0; i < a.values.size(); ++i) {
        auto c2 = c;
        c2.push_back(i);
        next.push_back(c2);
      }
    combos = next;
  }
  struct Job {
    std::string name;
    std::vector<std::string> overrides;
    int64_t seed;
    std::vector<std::string> labels;
  };
  std::vector<Job> jobs;
  for (auto& c : combos)
    for (int64_t seed : seeds) {
      Job j;
      j.seed = seed;
      j.overrides = sets;
      std::string name;
      for (size_t i = 0; i < ax.size(); ++i) {
        j.overrides.push_back(ax[i].path + "=" + ax[i].values[c[i]]);
        j.labels.push_back(ax[i].labels[c[i]]);
        std::string safe = ax[i].labels[c[i]];
        for (auto& ch : safe)
          if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.')
            ch = '_';
        name += (name.empty() ? "" : "__") + safe;
      }
      j.overrides.push_back("seed=" + std::to_string(seed));
      j.name = (name.empty() ? "job" : name) + "__seed" + std::to_string(seed);
      jobs.push_back(j);
    }
  // every override must apply (a malformed value or a path through a scalar fails here, before
  // any job runs); unknown keys are caught when each job builds its experiment
  for (auto& j : jobs) load_config(base, j.overrides);
  fs::create_directories(out_dir);
  json rows = json::array();
  std::cout << "sweep " << so.get_string("name") << ": " << jobs.size() << " jobs -> " << out_dir << "\n";
  for (size_t k = 0; k < jobs.size(); ++k) {
    auto& j = jobs[k];
    std::cout << "[" << k + 1 << "/" << jobs.size() << "] " << j.name << "\n" << std::flush;
    auto t0 = std::chrono::steady_clock::now();
    gf::Experiment ex(load_config(base, j.overrides), paths);
    gf::RunFlags f;
    f.run_dir = (fs::path(out_dir) / j.name).string();
    f.plugin_paths = paths;
    f.quiet = true;
    int rc = ex.train(f);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json row = {{"job", j.name}, {"seed", j.seed}, {"exit", rc}, {"time_s", secs},
                {"params", ex.model().num_parameters()}, {"heads", ex.model().heads_per_block()}};
    for (size_t i = 0; i < ax.size(); ++i) row[ax[i].path] = j.labels[i];
    // the run's outcome as the experiment reports it (INCRT's K_obs / K_pred from its summary)
    const gf::RunOutcome& out = ex.outcome();
    for (auto k : {"K_obs", "K_pred"}) {
      auto it = out.growth_summary.find(k);
      if (it != out.growth_summary.end()) row[k] = it->second;
    }
    if (out.tested) {
      row["test_accuracy"] = out.test.result.accuracy;
      row["test_loss"] = out.test.result.loss;
    }
    row["best_val_accuracy"] = out.best_val;
    rows.push_back(row);
  }
  // tables
  std::vector<std::string> cols{"job"};
  for (auto& a : ax) cols.push_back(a.path);
  for (auto c : {"seed", "test_accuracy", "best_val_accuracy", "params", "heads", "K_obs",
                 "K_pred", "time_s", "exit"})
    cols.push_back(c);
  auto cell = [](const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) {
      char b[32];
      std::snprintf(b, sizeof b, "%.4f", v.get<double>());
      return std::string(b);
    }
    if (v.is_array()) {
      std::string s;
      for (auto& x : v) s += (s.empty() ? "" : " ") + x.dump();
      return s;
    }
    return v.is_null() ? std::string("") : v.dump();
  };
  std::ofstream csv(fs::path(out_dir) / "summary.csv"), md(fs::path(out_dir) / "summary.md");
  std::string mdtable = "|";
  for (size_t i = 0; i < cols.size(); ++i) {
    csv << (i ? "," : "") << cols[i];
    mdtable += " " + cols[i] + " |";
  }
  csv << "\n";
  mdtable += "\n|";
  for (size_t i = 0; i < cols.size(); ++i) mdtable += "---|";
  mdtable += "\n";
  for (auto& r : rows) {
    mdtable += "|";
    for (size_t i = 0; i < cols.size(); ++i) {
      std::string c = r.contains(cols[i]) ? cell(r[cols[i]]) : "";
      std::string q = c;  // RFC 4180: quote cells with separators, quotes or newlines
      if (q.find_first_of(",\"\n") != std::string::npos) {
        std::string e = "\"";
        for (char ch : q) e += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        q = e + "\"";
      }
      csv << (i ? "," : "") << q;
      mdtable += " " + c + " |";
    }
    csv << "\n";
    mdtable += "\n";
  }
  md << "# sweep " << so.get_string("name") << "\n\nbase: `" << base << "`\n\n" << mdtable;
  std::cout << "\n" << mdtable << "\nsummary: " << (fs::path(out_dir) / "summary.md").string()
            << ", " << (fs::path(out_dir) / "summary.csv").string() << "\n";
  return 0;
}

}  // namespace gfapp
