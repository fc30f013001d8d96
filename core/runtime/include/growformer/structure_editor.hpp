// The structure editor: runs the growth and pruning policies' hooks, applies the edits they
// return to the blocks, logs each edit, tells every policy of it and makes the optimizer
// forget the parameters an edit removed. Usable alone (a test drives policies through it
// exactly as training does).
#pragma once
#include "growformer/export.hpp"

#include <functional>
#include <string>
#include <vector>

#include "growformer/growth.hpp"
#include "growformer/model.hpp"
#include "growformer/module.hpp"
#include "growformer/optimizer.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class StructureEditor {
 public:
  /// A policy with its own random stream; ROLE ("growth", "pruning") is logged with its edits,
  /// NAME (its plugin; may be empty) is named in errors.
  struct Policy {
    GrowthPolicy* policy = nullptr;
    Rng* rng = nullptr;
    std::string role;
    std::string name;
  };

  /// BLOCKS are edited in place; EVENTS receives one line per edit (may be null).
  StructureEditor(std::vector<AttentionBlock*> blocks, std::vector<Policy> policies,
                  EventSink* events, size_t total_steps);

  /// With both set, a check drops the optimizer state of every parameter of MODEL it removed.
  void set_optimizer(const Module* model, Optimizer* optimizer);
  /// MODEL's blocks' MLPs become editable (AddMlpUnits, RemoveMlpUnits) and visible to the
  /// policies (BlockView::mlp), and the optimizer state of the parameters an MLP edit reshapes
  /// is carried: kept for the surviving units, zero for new ones. MODEL's blocks become
  /// editable (InsertBlock, RemoveBlock; BLOCKS must then be MODEL's): the optimizer state of
  /// the blocks that move is carried to their new names, a new block's starts at zero. Also
  /// set_optimizer(MODEL, OPTIMIZER); OPTIMIZER may be null.
  void set_model(Model* model, Optimizer* optimizer);
  /// Probes (one per block; undefined tensors are skipped) the next views carry; null = none.
  /// A block edit moves them with the blocks (a new block has none).
  void set_probes(const std::vector<Probe>* probes) {
    probes_ = probes;
    moved_probes_.clear();
  }
  /// The blocks as they are now (after the block edits applied so far).
  const std::vector<AttentionBlock*>& blocks() const { return blocks_; }

  /// What the next views carry as TrainView::metrics; null = nothing measured.
  void set_metrics(const RunMetrics* metrics) { metrics_ = metrics; }

  bool needs_probe() const;
  /// The most validation examples any policy asks the check at STEP to evaluate.
  size_t validation_probe(size_t step) const;
  /// The head sets any policy asks the check at STEP to ablate on the probe (each once).
  /// RuntimeError naming the policy, block and head when a set names a head no block holds.
  std::vector<std::vector<HeadRef>> probe_ablations(size_t step) const;
  /// The heads any policy asks to leave out of training step STEP (each once, in order).
  /// RuntimeError naming the policy, block and head for a head no block holds.
  std::vector<HeadRef> muted_in_training(size_t step) const;
  /// The heads any policy asks to leave out of a share of STEP's examples (GrowthPolicy::
  /// muted_on_examples; each once, in order), with the largest share asked. RuntimeError as
  /// muted_in_training, and for a share outside [0, 1].
  GrowthPolicy::ExampleMute muted_on_examples(size_t step) const;
  /// The heads any policy wants the model's twin without after the check of STEP
  /// (GrowthPolicy::twin_without; each once, in order). RuntimeError as muted_in_training.
  std::vector<HeadRef> twin_without(size_t step) const;
  /// Whether any policy has the structure on trial after STEP (GrowthPolicy::on_trial).
  bool on_trial(size_t step) const;
  bool needs_head_mask_grads() const;
  void on_start();
  /// After the backward pass of STEP: the policies that asked for head-mask gradients.
  void after_backward(size_t step);
  /// A structure check at STEP: each policy in turn checks, and its edits are applied at once.
  /// The heads a policy asks to add to a block are admitted together before any is added: all
  /// of them, or none (one `growth_refused` event naming how many were asked for).
  /// Returns the edits applied, in order.
  std::vector<Edit> check(size_t step);
  /// Applies one edit of policy P at STEP: edits the block, logs it, tells every policy.
  /// Returns the new head's id for AddHead, -1 for RemoveHead, kRefused for a head, MLP units or
  /// a block the admission refused (then a `growth_refused` event is the only trace: no policy
  /// hears of it).
  int apply(const Edit& e, size_t p, size_t step);
  static constexpr int kRefused = -2;

  /// Asked before COUNT heads of a policy are added to block BLOCK: "" to add them, else why
  /// not (the trainer: the step would not fit in memory). Unset: every head is added.
  using HeadAdmission = std::function<std::string(size_t block, size_t count)>;
  void set_head_admission(HeadAdmission admit) { admit_head_ = std::move(admit); }
  /// Asked before an AddMlpUnits or InsertBlock edit is applied: "" to apply it, else why not
  /// (the trainer: the step would not fit in memory); a refused edit is one `growth_refused`
  /// event naming `what` and the reason, no policy hears of it, training goes on. Unset: every
  /// such edit is applied.
  using GrowthAdmission = std::function<std::string(const Edit& e)>;
  void set_growth_admission(GrowthAdmission admit) { admit_growth_ = std::move(admit); }

  /// What policy P sees at STEP.
  TrainView view(size_t step, size_t p) const;

 private:
  /// The union of the heads every policy's hook ASK (named HOOK) returns at STEP, each once and
  /// in order; RuntimeError naming the policy for a head no block holds or a whole block (WHAT:
  /// what the policy asked to do with it).
  std::vector<HeadRef> union_of_heads(size_t step, const char* hook, const char* what,
                                      std::vector<HeadRef> (GrowthPolicy::*ask)(size_t)
                                          const) const;
  /// Whether the admission refuses COUNT heads of policy P in BLOCK (then one
  /// `growth_refused` event is emitted).
  bool refuse_heads(size_t block, size_t count, size_t p);
  /// Whether the admission refuses the AddMlpUnits or InsertBlock edit E of policy P (then one
  /// `growth_refused` event is emitted).
  bool refuse_growth(const Edit& e, size_t p);
  /// Applies an edit already admitted.
  int edit(const Edit& e, size_t p, size_t step);
  /// Applies an MLP edit of policy P (checked first: RuntimeError naming the policy and the
  /// block); returns the first new unit's index (AddMlpUnits), else -1; kRefused for units
  /// past the block's most (then a `growth_refused` event is the only trace).
  int edit_mlp(const Edit& e, size_t p, Event* ev);
  /// Applies a block edit of policy P (checked first: RuntimeError naming the policy and the
  /// index), carries the optimizer's state and the probes with the blocks that move.
  void edit_blocks(const Edit& e, size_t p, Event* ev);

  std::vector<AttentionBlock*> blocks_;
  std::vector<Policy> policies_;
  EventSink* events_ = nullptr;
  size_t total_steps_ = 0;
  const std::vector<Probe>* probes_ = nullptr;
  const RunMetrics* metrics_ = nullptr;
  const Module* model_ = nullptr;
  Optimizer* optimizer_ = nullptr;
  std::vector<Mlp*> mlps_;           // one per block; empty = no MLP edits
  Model* edited_model_ = nullptr;    // null = no block edits
  std::vector<Probe> moved_probes_;  // the probes after a block edit moved them
  HeadAdmission admit_head_;
  GrowthAdmission admit_growth_;
};

/// Carries OPTIMIZER's state across an MLP edit of the block PREFIX ("layers.0."): each state
/// tensor of a parameter kMlpUnitParams names ("<kind>.<param>", as Optimizer::state_tensors
/// names them) is gathered as the parameter was (gather_units over SOURCE), through the
/// optimizer's own state_tensors / load_state, so its scalars (AdamW's step counts) are kept.
void carry_unit_state(Optimizer& optimizer, const Module& model, const std::string& prefix,
                      const std::vector<long>& source);

/// Carries OPTIMIZER's state across the block edit E of MODEL (already applied): the state of
/// each parameter `layers.I.<rest>` ("<kind>.layers.I.<rest>", as Optimizer::state_tensors
/// names it) moves to `layers.<block_after(E, I)>.<rest>`, a removed block's is dropped,
/// through the optimizer's own state_tensors / load_state (every value bit for bit; a new
/// block's parameters have none, so they start from zero).
void carry_block_state(Optimizer& optimizer, const Module& model, const Edit& e);

/// Drops the optimizer state of the names in BEFORE that MODEL no longer has.
void forget_removed(Optimizer& optimizer, const std::vector<std::string>& before,
                    const Module& model);

/// Mutes the heads of SET in MODEL and leaves its whole blocks (HeadRef::kWholeBlock) out of the
/// forward pass, as a policy asked to WHAT them ("ablate", "mute in training"); RuntimeError for
/// a block MODEL lacks. unmute_model undoes every mute.
void mute_in_model(Model& model, const std::vector<HeadRef>& set, const char* what);
void unmute_model(Model& model);
/// Mutes the heads of M on M.share of the examples of a batch of BATCH rows, this process's
/// part of the whole batch starting at its row FIRST (GrowthPolicy::muted_on_examples says which
/// rows); unmute_model undoes it.
void mute_examples_in_model(Model& model, const GrowthPolicy::ExampleMute& m, size_t step,
                            size_t first, size_t batch);

}  // namespace gf

GROWFORMER_API_END
