// The run directory: the one owner of its layout. Every path under runs/<name> (config,
// plugin lock, logs, checkpoints) is computed here and nowhere else.
#pragma once

#include <string>

namespace gf {

class RunDir {
 public:
  /// An existing (or to-be-created) run directory at ROOT.
  explicit RunDir(std::string root);
  /// Picks and creates a fresh run directory with its `checkpoints/` folder: REQUESTED when
  /// given (it must be absent or empty; ConfigError otherwise), else runs/NAME, runs/NAME-2, ...
  static RunDir create(const std::string& requested, const std::string& name);
  /// The run directory that holds CHECKPOINT_PATH (RUN/checkpoints/X.safetensors -> RUN).
  static RunDir of_checkpoint(const std::string& checkpoint_path);

  const std::string& root() const { return root_; }
  std::string resolved_config() const;  // config.resolved.yaml
  std::string plugins_lock() const;     // plugins.lock
  std::string metrics() const;          // metrics.jsonl
  std::string events() const;           // events.jsonl
  std::string checkpoints() const;      // checkpoints/
  std::string last_checkpoint() const;  // checkpoints/last.safetensors
  std::string best_checkpoint() const;  // checkpoints/best.safetensors

  /// Empties both logs (a fresh run).
  void reset_logs() const;
  /// Keeps only the log lines of steps <= STEP and drops test lines and torn lines: a resume
  /// from a checkpoint of STEP continues the logs exactly where that checkpoint was written.
  void rewind_logs(long step) const;

 private:
  std::string file(const char* name) const;
  std::string root_;
};

}  // namespace gf
