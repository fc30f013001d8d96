// The reporter: everything a run tells the world. metrics.jsonl (train, val and test lines),
// events.jsonl (one line per policy event, stamped with the step), and the console (a progress
// bar redrawn at most ten times a second on a terminal, plain log lines otherwise).
#pragma once
#include "growformer/export.hpp"

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "growformer/classification.hpp"
#include "growformer/growth.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/trainer_state.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// An evaluation (Experiment::evaluate): what `growformer eval`, the Python module's evaluate,
/// validation and the final test report.
struct EvalResult {
  double loss = 0, accuracy = 0;
  size_t examples = 0;
  /// The confusion matrix ([true][predicted]), the per-class precision, recall and F1, and
  /// macro-F1 (classification.hpp); its accuracy is `accuracy`.
  ClassificationReport classes;
  /// Each of this process's examples' cross-entropy, in split order (only when asked for:
  /// Experiment::evaluate's KEEP_EXAMPLES); the paired test of an ablation reads them.
  std::vector<double> example_losses;
};

/// The final test's line: which model was tested on which split, against the majority class.
struct TestReport {
  EvalResult result;
  std::string model;         // "last" or "best (step N)"
  std::string evaluated_on;  // "test" or "val"
  double majority_class_accuracy = 0;
};

class Reporter {
 public:
  /// Appends to DIR's logs. QUIET: nothing on the console but the stop notice.
  Reporter(const RunDir& dir, long total_steps, bool quiet);
  /// A reporter that writes and prints nothing (the processes of a data-parallel run other
  /// than rank 0, which alone reports).
  static std::unique_ptr<Reporter> muted(long total_steps);
  ~Reporter();

  /// The sink policies write to; lines carry the step of the last `begin_step`.
  EventSink& events();
  /// Prints the opening lines unless quiet and starts the clocks.
  void start(const std::string& banner);
  void begin_step(long step);
  /// After STEP's update: redraws the progress bar when it is due.
  void end_step(long step, const TrainWindow& window, const std::vector<size_t>& heads);
  /// A training line from WINDOW (the caller clears the window afterwards). BLOCKS, when not
  /// empty, is a JSON array of the blocks' diagnostics (e.g. HKT's fusion weights `lambda` and
  /// per-head `beta`), logged as the line's "blocks".
  void train(long step, const TrainWindow& window, double lr, const std::vector<size_t>& heads,
             const std::string& blocks = "");
  void validation(long step, const EvalResult& r, const std::vector<size_t>& heads);
  void test(long step, const TestReport& t, const std::vector<size_t>& heads);
  /// The end-of-run "summary" event of the policies' summaries (none when both are empty).
  void summary(long step, const std::map<std::string, double>& growth,
               const std::map<std::string, double>& pruning);
  /// Console text (suppressed when quiet); ALWAYS prints even when quiet.
  void say(const std::string& text, bool always = false);
  /// Ends the progress bar's line on a terminal.
  void end_bar();

 private:
  class Sink;
  explicit Reporter(long total_steps);
  bool writes_ = true;
  double elapsed() const;
  bool quiet_, tty_;
  long total_steps_;
  std::string metrics_path_;
  std::ofstream metrics_;
  std::unique_ptr<Sink> sink_;
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0_, window_t0_, last_draw_, now_;
  long steps_this_run_ = 0;
};

}  // namespace gf

GROWFORMER_API_END
