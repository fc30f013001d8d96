// Growth policies and pruning rules: they observe the trainer through hooks
// and return structural edits; they never reach into the trainer.
#pragma once
#include "growformer/export.hpp"

#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "growformer/attention.hpp"
#include "growformer/mlp.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// One line of events.jsonl: a check or an edit, with the quantities behind it.
struct Event {
  std::string type;  // "check", "grow", "prune", "calibrate", ...
  long block = -1;
  long head = -1;
  std::vector<std::pair<std::string, double>> numbers;
  std::vector<std::pair<std::string, std::string>> strings;
  std::vector<std::pair<std::string, std::vector<double>>> lists;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void emit(const Event& e) = 0;
};

/// A structural edit, applied by the trainer between steps: a head added to or removed from a
/// block's attention, units added to or removed from a block's MLP, or a whole block inserted
/// or removed.
struct Edit {
  enum class Kind {
    AddHead,
    RemoveHead,
    AddMlpUnits,
    RemoveMlpUnits,
    InsertBlock,
    RemoveBlock
  } kind = Kind::AddHead;
  /// The block edited; InsertBlock: the index the new block takes (0 .. the number of blocks),
  /// the blocks from there on move one index up; RemoveBlock: the blocks after it move down.
  size_t block = 0;
  int head_id = -1;  // RemoveHead
  HeadInit init;     // AddHead
  size_t units = 0;  // AddMlpUnits: how many (appended after the block's current units)
  MlpInit mlp_init;  // AddMlpUnits: their input weights (output weights are zero)
  /// RemoveMlpUnits: the units' indices in the block's MLP as it is when the edit is applied.
  std::vector<size_t> unit_indices;
  /// RemoveHead: whether policies that reserved directions for the head free them; unset =
  /// each policy's own default.
  std::optional<bool> release_direction;
  Event cause;  // logged with the edit
  /// Whether the edit adds or removes a head (else it edits an MLP's units).
  bool edits_heads() const { return kind == Kind::AddHead || kind == Kind::RemoveHead; }
  /// Whether the edit inserts or removes a block (the blocks after it change index).
  bool edits_blocks() const { return kind == Kind::InsertBlock || kind == Kind::RemoveBlock; }
};

/// Whether RULE made edit E: its cause names it as `rule` (a policy counting the edits it made
/// among all it hears of in edited()).
inline bool made_by(const Edit& e, const std::string& rule) {
  for (const auto& [key, value] : e.cause.strings)
    if (key == "rule") return value == rule;
  return false;
}

/// Where block INDEX is after the block edit E (InsertBlock, RemoveBlock): its new index, or
/// nothing when E removed it; INDEX itself for any other edit. A policy keeping state per block
/// index moves it with this in edited().
inline std::optional<size_t> block_after(const Edit& e, size_t index) {
  if (e.kind == Edit::Kind::InsertBlock && index >= e.block) return index + 1;
  if (e.kind == Edit::Kind::RemoveBlock && index == e.block) return std::nullopt;
  if (e.kind == Edit::Kind::RemoveBlock && index > e.block) return index - 1;
  return index;
}

/// MAP (state keyed by block index) moved as block_after says for the block edit E: a removed
/// block's entry dropped, a new block without one.
template <class T>
void move_blocks(std::map<size_t, T>& map, const Edit& e) {
  std::map<size_t, T> out;
  for (auto& [index, value] : map)
    if (std::optional<size_t> to = block_after(e, index)) out.emplace(*to, std::move(value));
  map.swap(out);
}

/// The blocks another policy inserted at the current check: the trainer took the check's probes
/// before, so they have none (BlockView::probe is null) until the next check. A policy that
/// reads probes notes every edit it hears of (edited) and skips a block without a probe only
/// when it is one of these.
struct InsertedBlocks {
  size_t step = static_cast<size_t>(-1);
  std::set<size_t> blocks;
  void note(const Edit& e, size_t at_step) {
    if (at_step != step) blocks.clear(), step = at_step;
    if (!e.edits_blocks()) return;
    std::set<size_t> moved;
    for (size_t b : blocks)
      if (std::optional<size_t> to = block_after(e, b)) moved.insert(*to);
    if (e.kind == Edit::Kind::InsertBlock) moved.insert(e.block);
    blocks.swap(moved);
  }
  bool contains(size_t block, size_t at_step) const {
    return at_step == step && blocks.count(block) > 0;
  }
};

/// One block's input (after its layer norm) on a training batch, (B, T, d), with its key mask
/// (B*T entries, 1 = a real token or the CLS slot; empty = every position is real).
struct Probe {
  Tensor input;
  std::vector<uint8_t> valid;
  const std::vector<uint8_t>* mask() const { return valid.empty() ? nullptr : &valid; }
};

/// The probe of a block input CAPTURED (B, T, d) on a batch whose token mask is TOKEN_VALID
/// (B*SEQ); positions in front of the tokens (a CLS slot, T - SEQ of them) count as real.
Probe make_probe(const Tensor& captured, const std::vector<uint8_t>& token_valid, size_t seq);

struct BlockView {
  size_t index = 0;
  AttentionBlock* block = nullptr;
  /// The block's probe of the last training batch when a policy asked for probes, else null.
  const Probe* probe = nullptr;
  /// The block's MLP (its width, its weights); null where the trainer edits no MLP. Last, so
  /// that a view written {index, block, probe} still reads as it did.
  const Mlp* mlp = nullptr;
};

/// One head of one block, or (head kWholeBlock) the whole block.
struct HeadRef {
  /// The head id that names a whole block in an ablation (GrowthPolicy::probe_ablations): its
  /// attention and its MLP left out, so the residual stream passes it unchanged. Not in
  /// muted_in_training (a block left out of a training step would get no gradients).
  static constexpr int kWholeBlock = -1;
  size_t block = 0;
  int head = 0;
  bool operator==(const HeadRef& o) const { return block == o.block && head == o.head; }
};

/// The validation probe evaluated with HEADS muted (their outputs left out; a whole block,
/// HeadRef::kWholeBlock, left out of the forward pass).
struct Ablation {
  std::vector<HeadRef> heads;
  double loss = std::numeric_limits<double>::quiet_NaN();
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  /// The paired spread: the sample sd over the probe's examples of (an example's loss with the
  /// heads muted - its loss with them), so (loss - RunMetrics::probe_loss) / (diff_sd /
  /// sqrt(probe_examples)) is the paired t statistic of what muting costs. NaN under 2 examples.
  double diff_sd = std::numeric_limits<double>::quiet_NaN();
};

/// The validation probe evaluated on the model's twin (GrowthPolicy::twin_without): the copy of
/// the model that has trained, since step `since`, on the same batches without HEADS.
struct TwinProbe {
  std::vector<HeadRef> heads;
  size_t since = 0;  // the check the twin was forked at (the heads' growth, when asked then)
  double loss = std::numeric_limits<double>::quiet_NaN();
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  /// The paired spread: the sample sd over the probe's examples of (an example's loss on the
  /// twin - its loss on the model), as Ablation::diff_sd. NaN under 2 examples.
  double diff_sd = std::numeric_limits<double>::quiet_NaN();
};

/// What the run has measured, as a policy sees it at a check. NaN (and step -1) = not measured.
struct RunMetrics {
  /// Mean training loss and accuracy over the steps since the previous check (this check's
  /// step included), and how many steps that is.
  double train_loss = std::numeric_limits<double>::quiet_NaN();
  double train_accuracy = std::numeric_limits<double>::quiet_NaN();
  size_t train_steps = 0;
  /// The latest validation (train.eval_every) of the current task: its step, loss and accuracy.
  long val_step = -1;
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  double val_accuracy = std::numeric_limits<double>::quiet_NaN();
  /// The validation probe at this check, when a policy asked for one
  /// (GrowthPolicy::validation_probe): the first `probe_examples` validation examples of the
  /// current task, evaluated without gradients on the model as it is before this check's edits.
  size_t probe_examples = 0;
  double probe_loss = std::numeric_limits<double>::quiet_NaN();
  double probe_accuracy = std::numeric_limits<double>::quiet_NaN();
  /// The same probe with sets of heads muted, one entry per set any policy asked for
  /// (GrowthPolicy::probe_ablations), in no particular order: find yours by its heads.
  std::vector<Ablation> ablations;
  /// The entry for exactly HEADS (in any order), or null.
  const Ablation* ablation(std::vector<HeadRef> heads) const;
  /// The same probe on the model's twin, when the run keeps one (twin.heads empty otherwise).
  TwinProbe twin;
  /// The twin's probe when the twin lacks exactly HEADS (in any order), or null.
  const TwinProbe* twin_without(std::vector<HeadRef> heads) const;
};

struct TrainView {
  size_t step = 0;
  size_t total_steps = 0;
  std::vector<BlockView> blocks;
  RunMetrics metrics;
  Rng* rng = nullptr;  // the policy's own stream
  EventSink* events = nullptr;
};

class GrowthPolicy {
 public:
  virtual ~GrowthPolicy() = default;
  /// Ask the trainer to capture block inputs before each check.
  virtual bool needs_probe() const { return false; }
  /// How many validation examples the check at STEP should evaluate for this policy
  /// (TrainView::metrics.probe_*); 0 = none. Asked before every check; the trainer evaluates
  /// the largest number any policy asked for.
  virtual size_t validation_probe(size_t step) const {
    (void)step;
    return 0;
  }
  /// Sets of heads whose ablation the check at VIEW.step should measure on the validation
  /// probe (RunMetrics::ablations; only at checks where some policy asked for a probe). Each set
  /// is one more evaluation of the probe; a HeadRef with head HeadRef::kWholeBlock leaves its
  /// whole block out. VIEW holds the blocks, not yet the metrics.
  virtual std::vector<std::vector<HeadRef>> probe_ablations(const TrainView& view) const {
    (void)view;
    return {};
  }
  /// Heads to leave out of training step STEP's forward and backward pass (muted as in an
  /// ablation: their output is not added, their parameters get no gradient that step), e.g.
  /// new heads dropped on some steps so that the older heads keep working without them and an
  /// ablation measures what the new heads add rather than what the others came to lean on.
  /// Asked before every training step; the union over the policies is muted.
  virtual std::vector<HeadRef> muted_in_training(size_t step) const {
    (void)step;
    return {};
  }
  /// Heads to leave out of training step STEP on a SHARE of its examples: the rows whose index
  /// r in the whole batch has floor((r + STEP + 1) SHARE) > floor((r + STEP) SHARE), i.e. that
  /// share of any run of consecutive rows, moving with the step (at 0.5 the odd rows on even
  /// steps, the even rows on odd steps). The heads train on every step, from the other rows,
  /// while the rest of the model learns, on these, to work without them: an ablation then
  /// measures what they add, without the heads losing the steps a whole-step sit-out takes.
  /// Whole blocks cannot be named. Asked before every training step; the union of the
  /// policies' heads sits out on the largest share any asks for.
  struct ExampleMute {
    std::vector<HeadRef> heads;
    double share = 0.0;
  };
  virtual ExampleMute muted_on_examples(size_t step) const {
    (void)step;
    return {};
  }
  /// Heads the run should keep a twin without: a copy of the model, forked at this check after
  /// its edits, in which these heads are muted (left out of every forward and backward pass),
  /// trained on the same batches at the same learning rate (with its own dropout stream) and
  /// evaluated on every validation probe (RunMetrics::twin). It is the model the run would have
  /// had without them: heads grown at this check with W_O at zero change nothing at the fork, so
  /// the twin is the model that never grew them. Comparing the two measures what the heads add
  /// without muting heads the rest of the model has learnt to lean on, at the price of training
  /// a second model. Asked after every check; the union over the policies. The twin lives while
  /// the set stays the same and no edit changes the model otherwise; a check whose edits remove
  /// exactly the twin's heads continues from the twin (its weights and optimizer state are
  /// copied into the model), so taking them back costs no training. A whole block cannot be named.
  virtual std::vector<HeadRef> twin_without(size_t step) const {
    (void)step;
    return {};
  }
  /// Whether the structure is on trial after training step STEP: this policy has heads it may
  /// still take back (a growth round waiting for its test). While any policy says so, the
  /// trainer takes no best-validation checkpoint and makes no early stop, so the model a run is
  /// tested on has a structure its policies settled on. Asked at each validation.
  virtual bool on_trial(size_t step) const {
    (void)step;
    return false;
  }
  /// Ask for head-mask gradients on every step (after_backward is then called).
  virtual bool needs_head_mask_grads() const { return false; }
  virtual void on_start(const TrainView& view) { (void)view; }
  virtual void after_backward(const TrainView& view) { (void)view; }
  /// Called every `check_every` steps.
  virtual std::vector<Edit> check(const TrainView& view) = 0;
  /// Told after an edit was applied: NEW_HEAD_ID is the new head's id for AddHead, the index
  /// of the first new unit for AddMlpUnits, -1 otherwise. After InsertBlock or RemoveBlock the
  /// blocks after the edited one have other indices (block_after, move_blocks).
  virtual void edited(const Edit& e, int new_head_id, const TrainView& view) {
    (void)e;
    (void)new_head_id;
    (void)view;
  }
  /// End-of-run quantities for reports and `analyze`; VIEW is the model as the run ends (a
  /// policy reads head counts and widths from it rather than keeping copies of its own).
  virtual std::map<std::string, double> summary(const TrainView& view) const {
    (void)view;
    return {};
  }
  /// Keys of summary() that `growformer sweep` shows as columns of its tables, in this order
  /// (per job, and mean +- sd per group). None by default.
  virtual std::vector<std::string> summary_columns() const { return {}; }
  /// Opaque state for checkpoints (resume continues the same decisions).
  virtual std::string save_state() const { return ""; }
  virtual void load_state(const std::string& s) { (void)s; }
};

/// Pruning rules share the growth interface: they return RemoveHead (or RemoveMlpUnits,
/// RemoveBlock) edits.
using PruningRule = GrowthPolicy;

}  // namespace gf

GROWFORMER_API_END
