// The training loop's settings (`train:`) and the experiment's top-level options.
#include "growformer/trainer.hpp"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "growformer/fields.hpp"

namespace gf {

namespace {
/// A string option read as written, from CHOICES.
std::vector<std::pair<std::string, std::string>> names(std::initializer_list<const char*> choices) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* c : choices) out.emplace_back(c, c);
  return out;
}

/// `train.switch`: the step of the switch and the second task's data.
struct SwitchSettings {
  long at = 0;
  ConfigNode data;
  static const OptionTable<SwitchSettings>& table() {
    using S = SwitchSettings;
    static const auto t = [] {
      OptionTable<S> t;
      t.add("at", &S::at, "", "the last step on the first data (0 < at < train.steps)", 1, 1e12)
          .add("data", &S::data, "", "the second task's dataset plugin and its options");
      return t;
    }();
    return t;
  }
};
}  // namespace

const OptionTable<TrainSettings>& TrainSettings::table() {
  using S = TrainSettings;
  static const auto t = [] {
    OptionTable<S> t;
    t.add("steps", &S::steps, "1000", "optimizer steps in the run", 1, 1e12)
        .add("batch_size", &S::batch_size, "32", "examples per step", 1, 1 << 20)
        .add("bucket", &S::bucket, "0",
             "length bucketing: sort each window of this many batches of the shuffled epoch by "
             "length and shuffle its batches, so a batch pads less (0 = off)",
             0, 1 << 20)
        .add("warmup", &S::warmup, "100", "linear warm-up steps of the learning rate", 0, 1e12)
        .choice("schedule", &S::schedule, "cosine", "learning-rate schedule after warm-up",
                names({"cosine", "linear", "constant"}))
        .add("min_lr_ratio", &S::min_lr_ratio, "0", "final learning rate as a fraction of the peak",
             0, 1)
        .add("clip", &S::clip, "1.0", "global gradient-norm clipping (0 = off)", 0, 1e9)
        .add("eval_every", &S::eval_every, "200", "validate every N steps (0 = only at the end)", 0,
             1e12)
        .add("eval_batches", &S::eval_batches, "0", "batches per validation (0 = the whole split)",
             0, 1e12)
        .add("log_every", &S::log_every, "20", "log training metrics every N steps", 1, 1e12)
        .add("test_batches", &S::test_batches, "0",
             "batches of the final test (0 = the whole split)", 0, 1e12)
        .add("check_every", &S::check_every, "50", "call growth and pruning every N steps", 1, 1e12)
        .add("checkpoint_every", &S::checkpoint_every, "0",
             "write checkpoints/last every N steps (0 = at each validation)", 0, 1e12)
        .choice(
            "test_on", &S::test_on, "best",
            "model the final test uses (best: the best validation accuracy at a validation where "
            "no policy had the structure on trial)",
            names({"best", "last"}))
        .add(
            "stop_patience", &S::stop_patience, "0",
            "end the run (with its final test) at the first validation this many validations after "
            "the best validation accuracy, not while a policy has the structure on trial; under a "
            "switch, "
            "on the second task only (0 = run all steps)",
            0, 1e12)
        .add("switch", &S::switch_node, "~",
             "task switch {at: N, data: {plugin: ...}}: steps after N train, validate and test on "
             "this data (same vocabulary and class count)");
    return t;
  }();
  return t;
}

OptionSpecs TrainSettings::options() { return table().specs(); }
OptionSpecs TrainSettings::switch_options() { return SwitchSettings::table().specs(); }

TrainSettings::TrainSettings(const Options& o) {
  *this = table().read(o);
  if (stop_patience > 0 && eval_every == 0)
    o.fail("stop_patience", "early stopping counts validations: it needs train.eval_every > 0");
  if (!o.has_value("switch")) return;
  Options so(switch_node, SwitchSettings::table().specs(), "train.switch");
  SwitchSettings sw = SwitchSettings::table().read(so);
  switch_at = sw.at;
  if (switch_at >= steps)
    so.fail("at", "the switch at step " + std::to_string(switch_at) +
                      " must come before the last "
                      "step (train.steps = " +
                      std::to_string(steps) + ")");
  switch_data = sw.data;
}

const OptionTable<ExperimentSettings>& ExperimentSettings::table() {
  using S = ExperimentSettings;
  static const auto t = [] {
    OptionTable<S> t;
    t.add("name", &S::name, "run", "run name (the run directory is runs/<name>)")
        .add("seed", &S::seed, "1", "seed of every random stream", 0, 9.2e18)
        .add("threads", &S::threads, "0", "worker threads (0 = all cores)", 0, 4096)
        .choice("precision", &S::precision, "float32",
                "the products' inputs (linear layers, attention scores and outputs, MLP, their "
                "gradients): float32, or bf16 rounded with float32 sums (AVX512_BF16; "
                "docs/NUMERICS.md); bf16 where the CPU lacks it is refused, bf16_if_available "
                "falls back to float32 and says so; eval and predict use the model's",
                names({"float32", "bf16", "bf16_if_available"}))
        .add("data", &S::data, "", "the dataset plugin and its options")
        .add("model", &S::model, "", "the model: width, depth, attention plugin")
        .add("optimizer", &S::optimizer, "{plugin: adamw}", "the optimizer plugin")
        .add("train", &S::train, "{}", "training loop settings")
        .add("growth", &S::growth, "{plugin: none}", "growth policy plugin")
        .add("pruning", &S::pruning, "{plugin: none}", "pruning rule plugin");
    return t;
  }();
  return t;
}

OptionSpecs Experiment::options() { return ExperimentSettings::table().specs(); }

}  // namespace gf
