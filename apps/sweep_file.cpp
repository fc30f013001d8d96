// The sweep file read and checked (see sweep_file.hpp).
#include "sweep_file.hpp"

#include <cctype>
#include <set>

#include <growformer/errors.hpp>
#include <growformer/fields.hpp>

namespace gfapp {

std::string safe_name(std::string s) {
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.')
      ch = '_';
  return s;
}

namespace {

std::string value_text(gf::ConfigNode v) {
  std::string text = v.is_scalar() ? v.as_string() : v.dump();
  v.mark_consumed();
  return text;
}

// A list value's label: the value itself, or for a mapping (a whole component section such as
// `{plugin: magnitude, threshold: 0.05}`) its plugin name, made distinct within the axis.
std::string derived_label(const std::string& text, size_t i,
                          const std::vector<std::string>& taken) {
  gf::ConfigNode parsed;
  try {
    parsed = gf::ConfigNode::load_string(text, "axis value");
  } catch (const gf::ConfigError&) {
    return text;
  }
  if (!parsed.is_map()) return text;
  std::string label =
      parsed.has("plugin") ? parsed.child("plugin").as_string() : "v" + std::to_string(i);
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
          v.child(label).fail(
              "an axis label names run directories: use letters, digits, '-', '_', '.'");
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

/// The keys of a sweep file, each declared once.
struct SweepSettings {
  std::string name = "sweep", base;
  std::vector<int64_t> seeds;
  gf::ConfigNode axes;
  std::vector<std::string> set;
  static const gf::OptionTable<SweepSettings>& table() {
    using S = SweepSettings;
    static const auto t = [] {
      gf::OptionTable<S> t;
      t.add("name", &S::name, "sweep", "sweep name")
          .add("base", &S::base, "", "base config (relative to this file)")
          .add("seeds", &S::seeds, "[1]", "seeds; every combination runs once per seed")
          .add("axes", &S::axes, "{}",
               "dotted path -> list of values, or mapping label -> value; `set`: label -> list of "
               "KEY=VALUE overrides (one arm that sets several keys)")
          .add("set", &S::set, "[]", "KEY=VALUE overrides for every job");
      return t;
    }();
    return t;
  }
};

}  // namespace

SweepPlan plan_sweep(const gf::ConfigNode& sw, std::vector<std::string> sets) {
  const gf::Options so(sw, SweepSettings::table().specs(), "sweep");
  const SweepSettings file = SweepSettings::table().read(so);
  SweepPlan plan;
  plan.name = file.name;
  plan.base = so.resolve_path(file.base);
  for (const auto& s : file.set) {
    if (s.find('=') == std::string::npos || s.front() == '=')
      so.fail("set", "entry `" + gf::printable(s.substr(0, 200)) + "` is not KEY=VALUE");
    sets.insert(sets.begin(), s);
  }
  plan.axes = read_axes(file.axes);
  const std::vector<int64_t>& seeds = file.seeds;
  if (seeds.empty()) so.fail("seeds", "is empty: a sweep runs every combination once per seed");
  for (size_t i = 0; i < seeds.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (seeds[i] == seeds[j])
        so.fail("seeds",
                "seed " + std::to_string(seeds[i]) + " is listed twice; each seed runs once");
  count_jobs(plan.axes, seeds.size(), file.axes);
  plan.jobs = make_jobs(plan.axes, seeds, sets);
  // labels are joined by `__`: labels that hold it can give two jobs one run directory
  std::set<std::string> names;
  for (const Job& j : plan.jobs)
    if (!names.insert(j.name).second)
      so.fail("axes", "two jobs share the run directory name `" + j.name.substr(0, 200) +
                          "` (a job's name joins its labels with `__`): give the labels names "
                          "without `__`");
  return plan;
}

}  // namespace gfapp
