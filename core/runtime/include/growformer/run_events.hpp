// A run directory read back as typed records: the logs the reporter writes (events.jsonl,
// metrics.jsonl), the resolved configuration and the plugin lock, so that tools ask for a
// run's quantities by name instead of parsing its files themselves.
#pragma once
#include "growformer/export.hpp"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "growformer/growth.hpp"
#include "growformer/run_dir.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// One line of events.jsonl: the step it was stamped with and the event as the policy emitted
/// it (a non-finite number, logged as null, reads back as NaN).
struct RunEvent {
  long step = 0;
  Event event;
  /// The number KEY, if the event has one.
  std::optional<double> number(const std::string& key) const;
  /// The string KEY, or "" when the event has none.
  std::string text(const std::string& key) const;
  /// The list of numbers KEY (empty when the event has none).
  std::vector<double> list(const std::string& key) const;
};

/// Every event of PATH in order. RuntimeError "PATH:LINE: ..." on a line that is not an event
/// (not a JSON object, no step or type, a field that is no number, string or list of numbers)
/// or is longer than 1 MiB.
std::vector<RunEvent> read_run_events(const std::string& path);

/// One block's diagnostics on a train line: its own lists (HKT: fusion weights "lambda", one
/// per level) and its heads' scalars by head id (hybrid heads: "beta").
struct BlockDiagnostics {
  std::map<std::string, std::vector<double>> lists;
  std::map<long, std::map<std::string, double>> heads;
};

/// One line of metrics.jsonl: a train, val or test line (null numbers read back as NaN).
struct MetricsLine {
  long step = 0;
  std::string split;                                         // "train", "val" or "test"
  std::vector<std::pair<std::string, double>> numbers;       // loss, accuracy, lr, elapsed_s, ...
  std::vector<std::pair<std::string, std::string>> strings;  // test: model, evaluated_on
  std::vector<std::pair<std::string, std::vector<double>>> lists;  // heads per block
  std::vector<BlockDiagnostics> blocks;  // train lines of models with diagnostics, per block
  /// The number KEY, if the line has one.
  std::optional<double> number(const std::string& key) const;
  /// The string KEY, or OTHERWISE when the line has none.
  std::string text(const std::string& key, const std::string& otherwise = "") const;
  /// The list of numbers KEY (empty when the line has none).
  std::vector<double> list(const std::string& key) const;
};

/// Every line of the metrics log PATH in order. RuntimeError "PATH:LINE: corrupt line ..." on
/// a line that is not a JSON object with a numeric step and a split of train, val or test (a
/// torn last line included), or a field of another shape; "PATH:LINE: a line longer than 1 MiB".
std::vector<MetricsLine> read_metrics(const std::string& path);

/// One plugin library of plugins.lock.
struct PluginLock {
  std::string plugin, version, path, checksum;
};

/// DIR's plugins.lock (empty when the file is absent or empty); RuntimeError naming the file
/// when it is not a lock.
std::vector<PluginLock> read_plugin_lock(const RunDir& dir);

/// A run directory read back: metrics lines by split, events, configuration and plugin lock.
struct RunLog {
  std::vector<MetricsLine> train, val;
  std::optional<MetricsLine> test;  // the last test line; none while the run has not finished
  std::vector<RunEvent> events;     // empty without events.jsonl
  std::string config;               // config.resolved.yaml as written ("" without it)
  std::vector<PluginLock> plugins;  // empty without plugins.lock
};

/// Reads DIR's logs, configuration and plugin lock (metrics.jsonl must exist; the others may
/// be absent). Errors name the file (and line), as read_metrics and read_run_events do.
RunLog read_run_log(const RunDir& dir);

}  // namespace gf

GROWFORMER_API_END
