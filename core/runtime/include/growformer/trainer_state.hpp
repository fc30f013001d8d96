// What a training run carries from step to step (and across a resume), and the layout of a
// training checkpoint: which tensors and metadata entries it holds and how they are read back.
#pragma once
#include "growformer/export.hpp"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "growformer/checkpoint.hpp"
#include "growformer/config.hpp"
#include "growformer/growth.hpp"
#include "growformer/model.hpp"
#include "growformer/optimizer.hpp"
#include "growformer/rng.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class Registry;
struct TrainSettings;

/// Training loss and accuracy summed since the last log line.
struct TrainWindow {
  double loss = 0, correct = 0, count = 0, tokens = 0;
  /// Adds a step: its logits (B, C), the batch and the batch's mean loss.
  void add(const Var& logits, const Batch& batch, float mean_loss);
  double mean_loss() const;
  double accuracy() const;
  void clear() { *this = TrainWindow{}; }
  /// Adds another window's sums (the shards of one step, reduced across processes).
  void merge(const TrainWindow& o) {
    loss += o.loss;
    correct += o.correct;
    count += o.count;
    tokens += o.tokens;
  }
};

struct TrainerState {
  TrainerState() = default;
  /// Fresh streams of SEED.
  explicit TrainerState(uint64_t seed);
  long step = 0;
  double best_val = -1;  // best validation accuracy so far (-1 = none yet)
  long best_step = -1;
  TrainWindow window;
  /// Training loss and accuracy summed since the last structure check (what policies see).
  TrainWindow since_check;
  /// The latest validation of the current task (step -1 = none yet).
  long val_step = -1;
  double val_loss = 0, val_accuracy = 0;
  /// The run ended at `step` by train.stop_patience (a resume goes straight to the final test).
  bool stopped_early = false;
  Rng dropout_rng, growth_rng, pruning_rng;

  /// The state as the checkpoint's "trainer" entry (JSON text), and back. Fields are listed
  /// once (trainer_state.cpp) for both directions.
  std::string to_json() const;
  /// RuntimeError naming WHERE when the text is not a complete trainer state.
  void from_json(const std::string& text, const std::string& where);
};

/// The parts of a run a training checkpoint holds.
struct TrainingParts {
  const ConfigNode* config = nullptr;
  Model* model = nullptr;
  Optimizer* optimizer = nullptr;
  GrowthPolicy* growth = nullptr;
  GrowthPolicy* pruning = nullptr;
  TrainerState* state = nullptr;
  /// The plugins the run loaded: those from folders other than the built-in ones are recorded
  /// (metadata "plugin_libraries"), so eval and predict find them again. Null: none recorded.
  const Registry* registry = nullptr;
  /// The run's `train:` settings (read through TrainSettings::table()): a checkpoint's step
  /// must not pass their `steps`. Null: not checked.
  const TrainSettings* settings = nullptr;
};

/// The `format` entry of the training checkpoints this build writes and reads.
inline constexpr const char* kCheckpointFormat = "growformer-checkpoint-1";
/// The most heads per block a checkpoint may claim (the `max_heads` option's own bound).
inline constexpr uint64_t kMaxCheckpointHeads = 65536;
/// RuntimeError naming PATH unless the checkpoint's `format` is kCheckpointFormat.
void check_checkpoint_format(const Checkpoint& ck, const std::string& path);

/// A checkpoint of every part at STATE.step ("model.<param>", "optim.<state>" tensors; config,
/// architecture, heads, optimizer scalars, trainer state and policy states as metadata).
Checkpoint make_training_checkpoint(const TrainingParts& parts);
/// Each block's structure as the checkpoint records it (its `architecture` entry: one
/// BlockStructure text per block; none for a block without heads), checked in this one place
/// against everything else that speaks of the block's heads: the `heads` record (a count per
/// block, absent in older checkpoints), the head ids the tensors hold and, given MODEL's blocks,
/// their number, whether each has heads, and max_heads (else kMaxCheckpointHeads). RuntimeError
/// "PATH: invalid checkpoint: block layers.I.attn: ..." naming what disagrees.
std::vector<std::optional<BlockStructure>> checked_structures(
    const Checkpoint& ck, const std::string& path,
    const std::vector<AttentionBlock*>* model = nullptr);
/// Each block's MLP width as the checkpoint records it: the units its tensors
/// `model.layers.I.mlp.fc1.w` (d, H), `fc1.b` (H) and `fc2.w` (H, d) hold, the blocks counted
/// from 0 while their fc1.w is there. RuntimeError "PATH: invalid checkpoint: block
/// layers.I.mlp: ..." when the three disagree, a width is 0 or over MAX_WIDTH (given MODEL:
/// its max_mlp_width(), and its number of blocks must match).
std::vector<size_t> checked_mlp_widths(const Checkpoint& ck, const std::string& path,
                                       const Model* model = nullptr);
/// The number of blocks the checkpoint records (its `architecture` entry: one per block, as
/// block edits left them); RuntimeError naming PATH when it is no list or not 1..kMaxBlocks.
size_t checked_block_count(const Checkpoint& ck, const std::string& path);
/// Recreates MODEL's structure from the checkpoint (its number of blocks: checked_block_count,
/// then checked_structures, checked_mlp_widths) and copies every parameter; RuntimeError naming
/// PATH on another format, a structure that disagrees with the tensors, and a missing, extra or
/// misshapen parameter.
void restore_model(const Checkpoint& ck, const std::string& path, Model& model);
/// What a training checkpoint says of its model without building it (for `inspect`).
struct CheckpointModel {
  struct Param {
    std::string name;  // as the model names it ("layers.0.attn.heads.3.w_q")
    ParamPlace place;
    size_t size = 0;
  };
  long step = 0;
  std::vector<Param> parameters;
  std::vector<size_t> heads_per_block;
  std::vector<size_t> mlp_width_per_block;  // checked_mlp_widths
  std::vector<std::string> architecture;    // each block's saved structure
};
/// RuntimeError naming PATH when a metadata entry it reads is malformed.
CheckpointModel read_checkpoint_model(const Checkpoint& ck, const std::string& path);

/// The checkpoint PATH names: PATH itself, or for a run directory its
/// checkpoints/best.safetensors, else checkpoints/last.safetensors (RuntimeError naming both
/// when it has neither).
std::string checkpoint_in(const std::string& path);

/// The plugin folders to search for a checkpoint's components: GIVEN (--plugin-path), then,
/// only when the user opts in (TRUST: --trust-checkpoint-plugins, trust_plugins=True), the
/// folders of the libraries the checkpoint records (metadata "plugin_libraries": those that
/// came from outside the built-in folders) that still hold them. A checkpoint is data: without
/// the opt-in none of its recorded folders is searched, listed or probed (a library's static
/// constructors run when it is probed), and the recorded libraries are kept in `untrusted`, one
/// line each, for the error when a component is not found. A recorded folder or path that is
/// relative, or a path that does not lie in its folder or is not a `libgf_*.so`, is refused
/// (RuntimeError with TRUST; an `untrusted` line saying so without): it is never resolved
/// against the working directory. `missing` lists the recorded libraries that are gone (with
/// TRUST), one line each (plugin, version, the library's path).
struct CheckpointPlugins {
  std::vector<std::string> paths;
  std::vector<std::string> missing;
  std::vector<std::string> untrusted;
};
CheckpointPlugins checkpoint_plugin_paths(const Checkpoint& ck, const std::string& path,
                                          const std::vector<std::string>& given, bool trust);
/// E (a component not found, say) with the recorded libraries that are missing now named, and
/// FLAG (`--plugin-path DIR`, `plugin_paths=[DIR]`) as the way to give their folder; with the
/// recorded libraries that were not used (no opt-in) named, and TRUST_FLAG
/// (`--trust-checkpoint-plugins`, `trust_plugins=True`) or FLAG as the way to use them; E itself
/// when there is neither.
[[noreturn]] void rethrow_with_missing_plugins(const ConfigError& e, const std::string& path,
                                               const CheckpointPlugins& plugins,
                                               const std::string& flag,
                                               const std::string& trust_flag);

/// The files the data section DATA of a checkpoint's embedded config names: each string value
/// (in lists too) that names an existing path once resolved against the config's folder, except
/// under the top keys in USER_KEYS (given by the user: `--set data.KEY=...`). A checkpoint is
/// data: these are files the user did not point at. RuntimeError naming CHECKPOINT when one is
/// neither a regular file nor a folder (a device, a FIFO, a socket: refused).
std::vector<std::string> embedded_data_files(const ConfigNode& data,
                                             const std::set<std::string>& user_keys,
                                             const std::string& checkpoint);
/// MSG (an error reading data) with what it says after the name (and line) of one of FILES
/// withheld, so that it cannot quote their contents; "cannot open" errors stay whole. HINT says
/// how to see the whole message (give the file yourself).
std::string withhold_file_contents(const std::string& msg, const std::vector<std::string>& files,
                                   const std::string& hint);
/// Inside a catch block: the exception being handled again, a ConfigError or RuntimeError with
/// its message passed through withhold_file_contents, any other as it is.
[[noreturn]] void rethrow_withholding(const std::vector<std::string>& files,
                                      const std::string& hint);

/// Restores every part (the model too) from a training checkpoint; returns its step.
long restore_training(const Checkpoint& ck, const std::string& path, const TrainingParts& parts);

}  // namespace gf

GROWFORMER_API_END
