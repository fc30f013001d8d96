// The run directory: the one owner of its layout. Every path under runs/<name> (config,
// plugin lock, logs, checkpoints) is computed here and nowhere else.
#pragma once
#include "growformer/export.hpp"

#include <memory>
#include <string>

#include "growformer/errors.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// RunDir::lock's error: another process holds the run directory (a run writing it now).
class RunDirInUse : public RuntimeError {
 public:
  RunDirInUse(const std::string& msg, std::string pid);
  ~RunDirInUse() override;
  const std::string& pid() const { return pid_; }

 private:
  std::string pid_;
};

class RunDir {
 public:
  /// An existing (or to-be-created) run directory at ROOT.
  explicit RunDir(std::string root);
  /// Picks and creates a fresh run directory with its `checkpoints/` folder: REQUESTED when
  /// given (it must be absent or empty; ConfigError otherwise), else runs/NAME, runs/NAME-2, ...
  /// NAME must be a plain file name (not `.`, `..`, nothing with `/` or control characters).
  static RunDir create(const std::string& requested, const std::string& name);
  /// The run directory that holds CHECKPOINT_PATH (RUN/checkpoints/X.safetensors -> RUN).
  static RunDir of_checkpoint(const std::string& checkpoint_path);

  const std::string& root() const { return root_; }
  std::string resolved_config() const;  // config.resolved.yaml
  std::string plugins_lock() const;     // plugins.lock
  std::string metrics() const;          // metrics.jsonl
  std::string events() const;           // events.jsonl
  std::string decision_cost() const;    // decision_cost.json: wall times, so not an event
  std::string checkpoints() const;      // checkpoints/
  std::string last_checkpoint() const;  // checkpoints/last.safetensors
  std::string best_checkpoint() const;  // checkpoints/best.safetensors

  /// Before a run starts again from step 0 in this directory (no last checkpoint): a
  /// RuntimeError, naming both files and the fix, when a best checkpoint is there, which the
  /// new run would overwrite.
  void refuse_restart_over_best() const;

  /// A run stopped between writing its best and its last checkpoint (the trainer writes them in
  /// that order at the end of one step, as the same checkpoint), or before its first last
  /// checkpoint, has a best and no last: this copies best to last (durably, after checking it)
  /// so that a resume continues from the best's step, and returns true. False, doing nothing,
  /// when there is a last or no best. Takes the directory's lock meanwhile (call it without).
  bool recover_last_from_best() const;

  /// Empties both logs (a fresh run).
  void reset_logs() const;
  /// Keeps only the log lines of steps <= STEP and drops test lines and torn lines: a resume
  /// from a checkpoint of STEP continues the logs exactly where that checkpoint was written.
  /// A log that is not a regular file, or holds a line over 1 MiB, is an error (never read
  /// whole into memory); the new log replaces the old one atomically.
  void rewind_logs(long step) const;

  /// Takes the run directory's lock (an flock on RUN/.lock, released when the process ends,
  /// also by kill -9): RunDirInUse naming the holder's pid when another process has it.
  /// Then removes temporaries (`*.tmp-XXXXXX`) that a killed writer left.
  void lock();
  /// The pid of the process that holds the lock now ("?" when it has not written it yet), or
  /// "" when none does.
  std::string lock_holder() const;
  /// Writes TEXT to FILE in the run directory durably (temporary, fsync, rename).
  void write(const std::string& path, const std::string& text) const;

 private:
  std::string file(const char* name) const;
  std::string root_;
  std::shared_ptr<int> lock_fd_;
};

}  // namespace gf

GROWFORMER_API_END
