// The sweep file: its options, axes, seeds and the jobs they make, read and checked before
// anything runs (shared by `growformer sweep` and the fuzz_sweep harness).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <growformer/config.hpp>

namespace gfapp {

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

/// The most jobs one sweep file may make (combinations x seeds).
constexpr size_t kMaxJobs = 10000;

/// A sweep file read: its name, base config path (resolved against the file), axes and the
/// jobs; each job's overrides are the file's `set`, then CLI_SETS (which win), then its axes'.
/// ConfigError naming the key on a repeated axis value or seed, no seeds, or more than
/// kMaxJobs jobs (counted before any job is made).
struct SweepPlan {
  std::string name, base;
  std::vector<Axis> axes;
  std::vector<Job> jobs;
};
SweepPlan plan_sweep(const gf::ConfigNode& sweep_file, std::vector<std::string> cli_sets);

/// A label as a run directory name: letters, digits, '-', '_', '.' kept, others '_'.
std::string safe_name(std::string s);

}  // namespace gfapp
