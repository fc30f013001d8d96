// An experiment: everything a config builds (registry, data, model, optimizer, growth and
// pruning) and the training loop that drives the parts: the run directory (run_dir.hpp), the
// batch sampler (batch_sampler.hpp), the learning-rate schedule (schedule.hpp), the structure
// editor (structure_editor.hpp), the trainer state and checkpoint layout (trainer_state.hpp)
// and the reporter (reporter.hpp). The command-line program is a thin layer over this.
#pragma once
#include "growformer/export.hpp"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "growformer/checkpoint.hpp"
#include "growformer/config.hpp"
#include "growformer/dataset.hpp"
#include "growformer/distributed.hpp"
#include "growformer/fields.hpp"
#include "growformer/growth.hpp"
#include "growformer/interrupt.hpp"
#include "growformer/model.hpp"
#include "growformer/optimizer.hpp"
#include "growformer/precision.hpp"
#include "growformer/registry.hpp"
#include "growformer/reporter.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/schedule.hpp"
#include "growformer/trainer_state.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// `train:`, each option declared once in table().
struct TrainSettings {
  static const OptionTable<TrainSettings>& table();
  static OptionSpecs options();         // table().specs()
  static OptionSpecs switch_options();  // `train.switch:`
  explicit TrainSettings(const Options& o);
  TrainSettings() = default;
  long steps = 1000, batch_size = 32, warmup = 100, eval_every = 200, log_every = 20;
  /// `bucket: W` (> 0): length bucketing over windows of W batches (BatchSampler); 0 = off.
  long bucket = 0;
  long check_every = 50, checkpoint_every = 0, eval_batches = 0, test_batches = 0;
  double clip = 1.0, min_lr_ratio = 0.0;
  std::string schedule = "cosine", test_on = "best";
  /// `stop_patience: P` (> 0): the run ends early, with its final test, at the first
  /// validation P validations after the best one (the last task's, under a switch); 0 = off.
  long stop_patience = 0;
  /// `switch: {at: N, data: {...}}`: a task switch. Steps 1..N train on `data`, steps N+1..
  /// on switch_data (same vocabulary and class count); validation and the final test then use
  /// switch_data's splits. 0 = no switch.
  long switch_at = 0;
  ConfigNode switch_data;
  ConfigNode switch_node;  // the `switch` mapping as given (switch_at and switch_data come from it)
};

/// What RunFlags::on_step is shown after a step: the training loss and accuracy averaged over
/// the steps since its previous call (the whole batch of every process), the step's learning
/// rate, heads per block, and the latest validation (val_step -1 = none yet on this task).
struct StepReport {
  long step = 0, total_steps = 0;
  double loss = 0, accuracy = 0, lr = 0;
  size_t steps = 0;  // how many steps the loss and accuracy average
  std::vector<size_t> heads;
  long val_step = -1;
  double val_loss = 0, val_accuracy = 0;
};

struct RunFlags {
  std::string run_dir;  // "" = runs/<name>
  std::vector<std::string> plugin_paths;
  long stop_after = -1;  // stop (with a checkpoint) after this step: simulates an interruption
  /// Called after every `on_step_every`-th step (and the last) once it is logged and validated;
  /// returning false stops the run after that step with a checkpoint, as stop_after does (the
  /// processes of a data-parallel run stop together when any asks). Null = never called.
  std::function<bool(const StepReport&)> on_step;
  long on_step_every = 1;
  bool quiet = false;
  /// false: a stop (Ctrl-C, SIGTERM, stop_after) is not announced with `growformer resume DIR`;
  /// the caller says how the run continues (a sweep job: the sweep is run again).
  bool announce_stop = true;
  /// The processes training together (data-parallel); null = this process alone. Rank 0 alone
  /// writes the run directory; the run directory must be on a file system every rank reads.
  Communicator* comm = nullptr;
};

/// What a run reports when it ends: its final test and the policies' end-of-run summaries.
struct RunOutcome {
  bool tested = false;  // false when the data has neither a test nor a validation split
  TestReport test;
  double best_val = -1;  // best validation accuracy (-1 = never validated)
  std::map<std::string, double> growth_summary, pruning_summary;
  /// The keys of each summary its policy names for tables (GrowthPolicy::summary_columns).
  std::vector<std::string> growth_columns, pruning_columns;
};

/// The top-level keys of a config, each declared once in table(): the run's name, seed,
/// threads and products' precision, and each part's section.
struct ExperimentSettings {
  std::string name = "run";
  uint64_t seed = 1;
  size_t threads = 0;                 // 0 = all cores
  std::string precision = "float32";  // float32 | bf16 | bf16_if_available
  ConfigNode data, model, optimizer, train, growth, pruning;
  static const OptionTable<ExperimentSettings>& table();
};

/// What an experiment is built for. `training` (train, resume, restart, sweep): every part.
/// `inference` (eval, predict, analyze, growformer.load): the model and its data only; the
/// growth and pruning policies and the optimizer are never constructed (a checkpoint's embedded
/// config names them, and building a policy may run its code: a Python class, a native
/// plugin's factory), their config sections are only marked read, train.switch's data is not
/// read, and train, resume and restart throw.
enum class ExperimentUse { training, inference };

class Experiment {
 public:
  /// Top-level config keys and their meaning: the specs of ExperimentSettings::table().
  static OptionSpecs options();
  /// Builds everything from a config (overrides already applied). Throws ConfigError /
  /// RuntimeError with locations; builds nothing on disk. `data_record` is a checkpoint's
  /// "data" metadata (data_record()): the dataset then tokenises with the saved tokenizer, and
  /// data whose plugin, classes or vocabulary differ from the checkpoint's is refused.
  /// `data_need` (only with a data_record): "all" loads every split; "train", "val" or "test"
  /// lets the dataset read only that split (DatasetBuild::only); "none" reads no data at all:
  /// vocabulary size, classes and tokenizer come from the record (`predict` from a checkpoint
  /// alone, its training files gone), and data() holds no examples. "check" (without a
  /// data_record) checks the whole config and reads no data: every component is created from
  /// its options (the dataset's and train.switch's too, which may look for the files they
  /// name) and the model is built on a stand-in vocabulary of 16 tokens and 2 classes; the
  /// data's contents and the memory estimate are checked only when a run loads the data. This
  /// is what `sweep` runs on every job before the first one trains.
  Experiment(ConfigNode cfg, const std::vector<std::string>& plugin_paths,
             const std::string& data_record = "", const std::string& data_need = "all",
             ExperimentUse use = ExperimentUse::training);
  ~Experiment();

  /// Trains into a fresh run directory; returns the exit status.
  int train(const RunFlags& flags);
  /// Continues a run from RUN_DIR/checkpoints/last.safetensors (this experiment was built from
  /// it). RuntimeError when RUN_DIR/config.resolved.yaml changed since the run started.
  int resume(const std::string& run_dir, const RunFlags& flags);
  /// Starts the run in RUN_DIR again from step 0 (it stopped before its first checkpoint).
  int restart(const std::string& run_dir, const RunFlags& flags);
  /// Loss, accuracy, confusion matrix, per-class figures and macro-F1 on SPLIT (the first
  /// MAX_BATCHES batches; 0 = all). Under a communicator
  /// of several processes (set by train/resume), every process evaluates its shard of each batch
  /// and the sums are reduced: every process gets the whole split's figures.
  EvalResult evaluate(const std::vector<Example>& split, long max_batches = 0,
                      bool keep_examples = false);
  /// The data's class names by class index (the index as text where the data names none).
  std::vector<std::string> class_names() const;
  /// R as one JSON object (dump_json text), as `eval --json` and the Python module's evaluate
  /// give it: loss, accuracy, macro_f1, examples, classes ([{name, precision, recall, f1,
  /// support}] by class_names()) and confusion ([true][predicted] counts).
  std::string evaluation_json(const EvalResult& r) const;
  /// Restores model structure and parameters (and, with optimizer, its state) from a checkpoint.
  void load_weights(const std::string& checkpoint_path);
  void load_weights(const Checkpoint& checkpoint, const std::string& path);

  Registry& registry() { return *registry_; }
  Model& model() { return *model_; }
  const DataSplits& data() const { return data_; }
  /// The data plugin's dataset (tokenising with the checkpoint's tokenizer when built from one).
  Dataset& dataset() { return *dataset_; }
  /// The data's plugin, classes, vocabulary size and fingerprint, and the plugin's tokenizer
  /// state, as JSON (saved in checkpoints as metadata "data").
  std::string data_record() const;
  const TrainSettings& settings() const { return settings_; }
  /// The second task's splits (train.switch; empty without a switch or when built for eval).
  const DataSplits& switch_data() const { return switch_data_; }
  /// The outcome of the last train() or resume() that ran to the end.
  const RunOutcome& outcome() const { return outcome_; }
  const ConfigNode& config() const { return cfg_; }
  std::string name() const { return name_; }
  uint64_t seed() const { return seed_; }
  /// The products' precision of this experiment (precision:, after bf16_if_available's
  /// fallback). The setting is process-wide (growformer/precision.hpp): each experiment built
  /// sets it, and train, resume, restart and evaluate set this experiment's own for their
  /// duration (kernels::PrecisionScope), so that experiments of different precisions in one
  /// process (Python) each run in their own; a caller running the model directly does the same.
  kernels::Precision precision() const { return precision_; }
  /// A padded batch of examples [idx...] truncated to the model's positions.
  Batch make_batch(const std::vector<Example>& split, const std::vector<size_t>& idx) const;

  /// The learning-rate schedule of the run (peak from optimizer.lr, shape from train; peak 0
  /// when built for inference).
  const LrSchedule& schedule() const { return schedule_; }
  /// Defaults this experiment chose from other parts of the config, one line each (the head
  /// width of a growing block); `train` and `config check` print them.
  const std::vector<std::string>& notes() const { return notes_; }
  ExperimentUse use() const { return use_; }

 private:
  class Loop;
  class Twin;  // the model's twin (GrowthPolicy::twin_without), trainer_twin.hpp
  /// Train settings, optimizer, schedule, growth and pruning from the top-level options (for
  /// inference the train settings alone; the other sections are marked read, nothing built).
  void build_training_parts(const ExperimentSettings& top);
  /// ConfigError naming WHAT when this experiment was built for inference.
  void require_training(const char* what) const;
  /// The dataset, its splits (or, with data_need "none", the record's shape) and the checks of
  /// the data against a checkpoint's data record.
  void load_data(ConfigNode data_node, const std::string& data_record,
                 const std::string& data_need);
  /// train.switch's data, tokenised as the first data and checked against it.
  void load_switch_data();
  /// data_need "check": the datasets created from their options, a stand-in data shape.
  void check_without_data(ConfigNode data_node);
  int run_loop(const RunDir& dir, long start_step, const RunFlags& flags);
  /// A training checkpoint of every part at PATH, with EXTRA's tensors and metadata (the twin's).
  void save(const std::string& path, const Checkpoint* extra = nullptr);
  /// config.resolved.yaml with the record of the heads at STEP (checkpoints/last's) when they
  /// differ from those the configuration builds (start_heads_), without one when they do not.
  void record_structure(const RunDir& dir, long step);
  TrainingParts parts();

  ConfigNode cfg_;
  std::string name_, data_plugin_;
  uint64_t seed_ = 0;
  size_t threads_ = 0;
  kernels::Precision precision_ = kernels::Precision::float32;
  std::unique_ptr<Registry> registry_;
  std::shared_ptr<Dataset> dataset_;
  DataSplits data_, switch_data_;
  std::shared_ptr<Dataset> switch_dataset_;
  std::shared_ptr<Model> model_;
  std::shared_ptr<Optimizer> optimizer_;
  std::shared_ptr<GrowthPolicy> growth_, pruning_;
  TrainSettings settings_;
  LrSchedule schedule_;
  TrainerState state_;
  std::string
      resolved_config_crc_;      // of config.resolved.yaml's configuration, written at the start
  std::string resolved_config_;  // that configuration (the file without its structure record)
  std::vector<std::vector<int>> start_heads_;  // each block's head ids as the config builds them
  Communicator* comm_ = &serial_communicator();
  ExperimentUse use_ = ExperimentUse::training;
  void use_communicator(const RunFlags& flags);
  RunOutcome outcome_;
  std::vector<std::string> notes_;
};

/// `precision:` (WANT: float32 | bf16 | bf16_if_available) applied to the products,
/// process-wide: returns the precision set and puts in NOTE the banner's line for anything but
/// float32. bf16 where it cannot run is refused by TOP.fail, naming the key and why;
/// bf16_if_available falls back to float32 and NOTE says why.
kernels::Precision apply_precision(const std::string& want, const Options& top, std::string* note);

/// The widest default head of a block a growth policy grows (model.attention.d_k unset): its
/// heads are d_model / 4 wide, at most this.
inline constexpr size_t kGrowingHeadWidthMax = 64;

/// `growformer resume RUN_DIR`: from the last checkpoint, or from step 0 with the run's
/// config.resolved.yaml when it stopped before writing one. The run directory is locked.
/// Plugins are searched in flags.plugin_paths, then in the folders of the libraries the run's
/// plugins.lock names, then the usual path; a component that is not found names the lock's
/// libraries that are missing now.
int resume_run(const std::string& run_dir, const RunFlags& flags);

/// Loads a checkpoint's embedded config and rebuilds the experiment around it, to train on
/// (resume, sweep): its growth and pruning policies are built. Commands that only read the
/// model use inference_from_checkpoint.
std::unique_ptr<Experiment> experiment_from_checkpoint(
    const std::string& path, const std::vector<std::string>& plugin_paths);
/// The same from a checkpoint already read (then `load_weights(checkpoint, path)` reads nothing).
std::unique_ptr<Experiment> experiment_from_checkpoint(
    const Checkpoint& checkpoint, const std::string& path,
    const std::vector<std::string>& plugin_paths);
/// The same for inference (ExperimentUse::inference; DATA_NEED as Experiment's): no growth or
/// pruning policy and no optimizer is built; the weights are not loaded yet. The data files
/// only the embedded config names must be regular files, and an error reading one does not
/// quote it (embedded_data_files, withhold_file_contents in trainer_state.hpp).
/// PRECISION: float32, bf16 or bf16_if_available instead of the model's own (its config's
/// `precision:`); "" keeps the model's.
std::unique_ptr<Experiment> inference_from_checkpoint(const Checkpoint& checkpoint,
                                                      const std::string& path,
                                                      const std::vector<std::string>& plugin_paths,
                                                      const std::string& data_need = "all",
                                                      const std::string& precision = "");

}  // namespace gf

GROWFORMER_API_END
