// The training loop's settings (`train:`) and the experiment's top-level options.
#include "growformer/trainer.hpp"


namespace gf {

OptionSpecs TrainSettings::options() {
  return {
      {"steps", OptType::Int, "1000", "optimizer steps in the run", 1, 1e12},
      {"batch_size", OptType::Int, "32", "examples per step", 1, 1 << 20},
      {"bucket", OptType::Int, "0",
       "length bucketing: sort each window of this many batches of the shuffled epoch by "
       "length and shuffle its batches, so a batch pads less (0 = off)",
       0, 1 << 20},
      {"warmup", OptType::Int, "100", "linear warm-up steps of the learning rate", 0, 1e12},
      {"schedule", OptType::String, "cosine", "learning-rate schedule after warm-up", -INFINITY,
       INFINITY, {"cosine", "linear", "constant"}},
      {"min_lr_ratio", OptType::Float, "0", "final learning rate as a fraction of the peak", 0, 1},
      {"clip", OptType::Float, "1.0", "global gradient-norm clipping (0 = off)", 0, 1e9},
      {"eval_every", OptType::Int, "200", "validate every N steps (0 = only at the end)", 0, 1e12},
      {"eval_batches", OptType::Int, "0", "batches per validation (0 = the whole split)", 0,
       1e12},
      {"log_every", OptType::Int, "20", "log training metrics every N steps", 1, 1e12},
      {"test_batches", OptType::Int, "0", "batches of the final test (0 = the whole split)", 0,
       1e12},
      {"check_every", OptType::Int, "50", "call growth and pruning every N steps", 1, 1e12},
      {"checkpoint_every", OptType::Int, "0",
       "write checkpoints/last every N steps (0 = at each validation)", 0, 1e12},
      {"test_on", OptType::String, "best", "model the final test uses (best: the best validation accuracy at a validation where "
       "no policy had the structure on trial)", -INFINITY, INFINITY,
       {"best", "last"}},
      {"stop_patience", OptType::Int, "0",
       "end the run (with its final test) at the first validation this many validations after "
       "the best validation accuracy, not while a policy has the structure on trial; under a switch, "
       "on the second task only (0 = run all steps)",
       0, 1e12},
      {"switch", OptType::Component, "~",
       "task switch {at: N, data: {plugin: ...}}: steps after N train, validate and test on "
       "this data (same vocabulary and class count)"},
  };
}

namespace {
OptionSpecs switch_options() {
  return {
      {"at", OptType::Int, "", "the last step on the first data (0 < at < train.steps)", 1, 1e12,
       {}, true},
      {"data", OptType::Component, "", "the second task's dataset plugin and its options", 0, 0,
       {}, true},
  };
}
}  // namespace

TrainSettings::TrainSettings(const Options& o)
    : steps(o.get_int("steps")),
      batch_size(o.get_int("batch_size")),
      warmup(o.get_int("warmup")),
      eval_every(o.get_int("eval_every")),
      log_every(o.get_int("log_every")),
      bucket(o.get_int("bucket")),
      check_every(o.get_int("check_every")),
      checkpoint_every(o.get_int("checkpoint_every")),
      eval_batches(o.get_int("eval_batches")),
      test_batches(o.get_int("test_batches")),
      clip(o.get_float("clip")),
      min_lr_ratio(o.get_float("min_lr_ratio")),
      schedule(o.get_string("schedule")),
      test_on(o.get_string("test_on")),
      stop_patience(o.get_int("stop_patience")) {
  if (stop_patience > 0 && eval_every == 0)
    o.fail("stop_patience", "early stopping counts validations: it needs train.eval_every > 0");
  if (!o.has_value("switch")) return;
  Options so(o.get_node("switch"), switch_options(), "train.switch");
  switch_at = so.get_int("at");
  if (switch_at >= steps)
    so.fail("at", "the switch at step " + std::to_string(switch_at) + " must come before the last "
            "step (train.steps = " + std::to_string(steps) + ")");
  switch_data = so.get_node("data");
}

OptionSpecs Experiment::options() {
  return {
      {"name", OptType::String, "run", "run name (the run directory is runs/<name>)"},
      {"seed", OptType::Int, "1", "seed of every random stream", 0, 9.2e18},
      {"threads", OptType::Int, "0", "worker threads (0 = all cores)", 0, 4096},
      {"data", OptType::Component, "", "the dataset plugin and its options", 0, 0, {}, true},
      {"model", OptType::Component, "", "the model: width, depth, attention plugin", 0, 0, {},
       true},
      {"optimizer", OptType::Component, "{plugin: adamw}", "the optimizer plugin"},
      {"train", OptType::Component, "{}", "training loop settings"},
      {"growth", OptType::Component, "{plugin: none}", "growth policy plugin"},
      {"pruning", OptType::Component, "{plugin: none}", "pruning rule plugin"},
  };
}

}  // namespace gf
