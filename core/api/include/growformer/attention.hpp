// Attention blocks and heads: the two model-side plugin kinds.
//
// A block maps token states (B, T, d) to (B, T, d). Blocks built on
// MultiHeadBlock own a set of heads, each with a stable id, that growth and
// pruning policies add and remove between steps. A head owns its projections
// (W_Q, W_K per level, W_V); the block owns the scoring rule (`attend`) and each
// head's output map W_O, so any head plugin works inside any block plugin.
#pragma once
#include "growformer/export.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "growformer/autograd.hpp"
#include "growformer/config.hpp"
#include "growformer/kernels.hpp"
#include "growformer/module.hpp"
#include "growformer/rng.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class Registry;
class QkvProjections;
struct QkvProjected;

/// Work of one training step (forward and backward) in the roofline's kinds (kernels::StepWork:
/// products, exps, in-cache passes, memory traffic; docs/results/speed.md, "The roofline of a
/// step"), or why it was not counted: what a block, a head or the model says of itself.
struct WorkCount {
  std::optional<kernels::StepWork> work;  // none: not counted
  std::string why_not;                    // when not counted: the reason, for the report
  static WorkCount of(const kernels::StepWork& w) { return {w, ""}; }
  static WorkCount none(std::string why) { return {std::nullopt, std::move(why)}; }
};

/// Per-forward information shared by every block.
struct ForwardContext {
  const std::vector<uint8_t>* key_valid = nullptr;  // (B*T), 1 = real token, null = all real
  bool training = false;
  Rng* rng = nullptr;  // dropout stream (training only)
};

/// Geometry a block gives each of its heads.
struct HeadShape {
  size_t d_model = 0;
  size_t d_k = 0;
  size_t d_v = 0;
  size_t levels = 1;  // number of score resolutions (HKT); 1 for plain attention
  bool share_qk = false;
};

/// The block's scoring rule: per-level queries and keys, values at level 0 ->
/// attention output (B, T, d_v).
using AttendFn =
    std::function<Var(const std::vector<Var>& q, const std::vector<Var>& k, const Var& v)>;

struct HeadInput {
  const std::vector<Var>& levels;  // levels[0] = block input (B, T, d); coarser levels after
  const AttendFn& attend;
  const ForwardContext& ctx;
  /// This head's projections of `levels` when the block computed every head's at once
  /// (QkvProjections::project_all); null: the head projects itself.
  const QkvProjected* projected = nullptr;
};

/// How a new head starts (growth edits carry one).
struct HeadInit {
  std::string mode = "random";     // "random" | "directed"
  std::vector<float> direction;    // d_model, for "directed": put into the first query column
  double value_variance = -1.0;    // Var(W_V); < 0 = the head's default
  bool preserve_function = false;  // W_O starts at zero: the model output is unchanged
};

class Head : public Module {
 public:
  /// Output before the block's W_O: (B, T, d_v).
  virtual Var forward(const HeadInput& in) = 0;
  /// Query/key weights of a level, (d_model, d_k); null where the head has none.
  virtual const Var* w_q(size_t level = 0) const {
    (void)level;
    return nullptr;
  }
  virtual const Var* w_k(size_t level = 0) const {
    (void)level;
    return nullptr;
  }
  virtual const Var* w_v() const { return nullptr; }
  /// The head's query/key/value projections when they are the core part (QkvProjections)
  /// applied to the block's levels, so that a block may compute every head's in one product.
  virtual const QkvProjections* projections() const { return nullptr; }
  /// Re-initialises the head's weights for a growth edit.
  virtual void initialize(const HeadInit& init, Rng& rng) {
    (void)init;
    (void)rng;
  }
  /// Named scalars for analysis (e.g. "beta" of a hybrid head).
  virtual std::map<std::string, double> diagnostics() const { return {}; }
  /// The head's work in one training step at BATCH x SEQ beyond its projections (which the
  /// block counts from projections()) and the block's scoring rule: e.g. hybrid_conv's
  /// convolution of V and its gate. Default: not counted.
  virtual WorkCount step_work(size_t batch, size_t seq) const {
    (void)batch;
    (void)seq;
    return WorkCount::none("the head does not count its work");
  }
  /// State that is not a parameter (e.g. a gate's trackers), saved with the block's
  /// structure in checkpoints; "" = none. load_state gets what save_state returned.
  virtual std::string save_state() const { return ""; }
  virtual void load_state(const std::string& text) { (void)text; }
  const HeadShape& shape() const { return shape_; }

 protected:
  explicit Head(HeadShape shape) : shape_(shape) {}
  HeadShape shape_;
};

struct HeadInfo {
  int id = 0;
  Head* head = nullptr;
  const Var* w_o = nullptr;  // (d_v, d_model)
  size_t born_step = 0;
};

/// A block's structure: what a checkpoint holds beyond the tensors to recreate the block's heads
/// (their ids and birth steps, the id the next head gets, the stream new heads are initialised
/// from, each head's own state). Its text (one per block in a checkpoint's `architecture`) is
/// written and read here alone; the checkpoint's reader checks it against the tensors.
struct BlockStructure {
  struct HeadRecord {
    int id = 0;
    size_t born = 0;    // the step the head was added at (0: a starting head)
    std::string state;  // Head::save_state(); "" = none
  };
  int next_id = 0;
  uint64_t rng_state = 0, rng_increment = 0;  // Rng::state(), Rng::increment()
  std::vector<HeadRecord> heads;

  std::vector<int> ids() const;
  /// "next_id N rng S I heads K ID BORN ... [states M ID HEX ...]" (a head state as hex, so
  /// that any bytes survive the space-separated text).
  std::string text() const;
  /// Reads TEXT; RuntimeError starting with WHAT on malformed text, no heads, more than
  /// MAX_HEADS heads (checked, as the text's own length, before anything is allocated: a crafted
  /// text may claim any count), a repeated id, an id not below next_id or a state for no head.
  static BlockStructure parse(const std::string& text, const std::string& what, size_t max_heads);
};

class AttentionBlock : public Module {
 public:
  /// x (B, T, d) -> (B, T, d).
  virtual Var forward(const Var& x, const ForwardContext& ctx) = 0;
  /// True when position t sees only positions <= t (decoder-style masking).
  virtual bool causal() const { return false; }
  /// Resolutions the block scores at: 1 for plain attention, HKT's levels.
  virtual size_t score_levels() const { return 1; }
  /// Analytic work of the block's scores relative to full T x T attention with the same heads
  /// (1 for plain attention; HKT: sum over levels of s^-2l).
  virtual double score_cost_ratio() const { return 1.0; }
  /// The block's work in one training step (forward and backward) at BATCH sequences of SEQ
  /// tokens, as its kernels run it (`growformer bench` reads it against the roofline); its
  /// parameters' traffic (AdamW) is counted by the model. Default: not counted, with why.
  virtual WorkCount step_work(size_t batch, size_t seq) const;

  // ---- heads (blocks without heads keep the defaults) ----
  virtual std::vector<HeadInfo> heads() const { return {}; }
  size_t num_heads() const { return heads().size(); }
  virtual bool can_edit_heads() const { return false; }
  /// The most heads add_head accepts (growth policies stop there).
  virtual size_t max_heads() const { return static_cast<size_t>(-1); }
  /// Adds a head; returns its id.
  virtual int add_head(const HeadInit& init, Rng& rng, size_t step);
  virtual void remove_head(int id);
  /// The block's heads as a checkpoint records them; none for a block without heads.
  virtual std::optional<BlockStructure> structure() const { return std::nullopt; }
  /// Recreates exactly the heads of S before the checkpoint's parameters are loaded (its
  /// reader has checked S against the tensors and max_heads()).
  virtual void restore_structure(const BlockStructure& s);

  // ---- observation hooks for growth and pruning ----
  /// Keep a copy of the block's input (after its layer norm) on the next forward.
  void set_capture(bool on) { capture_ = on; }
  const Tensor& captured_input() const { return captured_; }
  /// Multiply each head's output by a scalar mask of one whose gradient is kept.
  void set_head_masks(bool on) { head_masks_on_ = on; }
  /// d loss / d mask_h of the last backward pass (0 when masks are off).
  double head_mask_grad(int id) const;
  /// The head masks of the last forward pass, by head id (empty unless set_head_masks(true)):
  /// their gradients are summed across the processes of a data-parallel run.
  std::vector<Var> head_mask_vars() const {
    std::vector<Var> out;
    for (const auto& [id, m] : head_masks_) out.push_back(m);
    return out;
  }

  /// Heads whose output the following forward passes leave out (an ablation of the validation
  /// probe, RunMetrics::ablations); empty = every head counts. Ids that are not heads of the
  /// block are ignored.
  void set_muted(std::vector<int> ids) { muted_ = std::move(ids); }
  const std::vector<int>& muted() const { return muted_; }
  bool is_muted(int id) const {
    return std::find(muted_.begin(), muted_.end(), id) != muted_.end();
  }
  /// Heads whose output the following forward passes leave out on some examples only: those
  /// marked 1 in EXAMPLES (one flag per example of the batch; a training step's sit-out on part
  /// of the batch, GrowthPolicy::muted_on_examples). Empty IDS: none.
  void set_muted_examples(std::vector<int> ids, std::vector<uint8_t> examples) {
    part_muted_ = std::move(ids);
    part_examples_ = std::move(examples);
  }
  const std::vector<int>& part_muted() const { return part_muted_; }
  const std::vector<uint8_t>& part_examples() const { return part_examples_; }

  /// Named scalars for analysis (e.g. fusion weights).
  virtual std::map<std::string, std::vector<double>> diagnostics() const { return {}; }
  /// Short human-readable summary.
  virtual std::string describe() const = 0;
  /// Analysis for `growformer analyze` as a JSON object text; `probe` is a batch of
  /// block inputs (B, T, d) with its key mask, or null. Default: "{}".
  virtual std::string analyze_json(const Tensor* probe, const std::vector<uint8_t>* valid) const {
    (void)probe;
    (void)valid;
    return "{}";
  }

 protected:
  bool capture_ = false;
  Tensor captured_;
  bool head_masks_on_ = false;
  std::map<int, Var> head_masks_;
  std::vector<int> muted_;
  std::vector<int> part_muted_;
  std::vector<uint8_t> part_examples_;
  /// O with the rows of the examples part_examples_ marks set to zero (O is (B, T, d)). KEEP
  /// holds the 0/1 mask of O's shape, made at the first call of a forward pass and reused by
  /// every part-muted head of it.
  Var mute_examples(const Var& o, Var& keep) const;
};

/// What a block factory receives.
struct AttentionBuild {
  size_t d_model = 0;
  size_t block_index = 0;
  Registry* registry = nullptr;
  Rng* rng = nullptr;  // initialisation stream of this block
};

/// What a head factory receives.
struct HeadBuild {
  HeadShape shape;
  Registry* registry = nullptr;
  Rng* rng = nullptr;
};

}  // namespace gf

GROWFORMER_API_END
