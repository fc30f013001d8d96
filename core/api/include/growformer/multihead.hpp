// MultiHeadBlock: the shared machinery of head-based attention blocks (heads
// with stable ids, per-head W_O, add/remove, capture, head masks). A block
// plugin derives from it and supplies the scoring rule (`attend`) and,
// optionally, coarser input levels (`make_levels`). The base's constructor
// creates the starting heads, so a block plugin never does.
#pragma once
#include "growformer/export.hpp"

#include <memory>
#include <string>
#include <vector>

#include "growformer/attention.hpp"
#include "growformer/fields.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// The options every multi-head block understands, each declared once (`table()`): heads, d_k,
/// d_v, head, combine, max_heads. A block's settings hold them as a member and its table
/// includes this one (`OptionTable::include`) before the block's own options.
struct MultiHeadSettings {
  size_t heads = 4;
  size_t d_k = 0;   // 0 = d_model / heads
  size_t d_v = 0;   // 0 = d_k
  ConfigNode head;  // the head plugin and its options
  bool combine_mean = false;
  size_t max_heads = 256;
  static const OptionTable<MultiHeadSettings>& table();
};

class MultiHeadBlock : public AttentionBlock {
 public:
  /// The specs of MultiHeadSettings::table() (for a block that lists its options by hand).
  static OptionSpecs common_options();

  /// The block with the settings S read from OPTS (which names an option in errors) and its
  /// `heads` starting heads (ids 0..heads-1). They are created here, so no block exists without
  /// them: everything a head is built from (shape, head options, registry, the block's copy of
  /// the init stream) is the base's, and heads are child modules, listed after every parameter
  /// the derived constructor registers (`Module::named_parameters`).
  MultiHeadBlock(const Options& opts, const MultiHeadSettings& s, const AttentionBuild& build,
                 size_t levels, bool share_qk);
  /// Reads MultiHeadSettings from OPTS.
  MultiHeadBlock(const Options& opts, const AttentionBuild& build, size_t levels, bool share_qk);

  Var forward(const Var& x, const ForwardContext& ctx) override;

  std::vector<HeadInfo> heads() const override;
  bool can_edit_heads() const override { return true; }
  size_t max_heads() const override { return max_heads_; }
  int add_head(const HeadInit& init, Rng& rng, size_t step) override;
  void remove_head(int id) override;
  std::optional<BlockStructure> structure() const override;
  void restore_structure(const BlockStructure& s) override;
  std::string describe() const override;
  /// Counted when the heads combine by sum and all have the core projections of one shape
  /// (QkvProjections): every level's projections (level_lengths), the output maps as one
  /// product, each head's own work (Head::step_work) and the scoring rule's (attend_work);
  /// core/api/src/block_work.cpp says how.
  WorkCount step_work(size_t batch, size_t seq) const override;

  size_t score_levels() const override { return shape_.levels; }
  const HeadShape& head_shape() const { return shape_; }
  size_t d_model() const { return d_model_; }

 protected:
  /// levels[0] = x; override to add coarser levels (shared by all heads).
  virtual std::vector<Var> make_levels(const Var& x, const ForwardContext& ctx);
  /// The scoring rule for one head.
  virtual Var attend(const std::vector<Var>& q, const std::vector<Var>& k, const Var& v,
                     const ForwardContext& ctx) = 0;
  /// The rows of each level at SEQ tokens (SEQ first), as make_levels makes them: the rows
  /// step_work counts the projections of.
  virtual std::vector<size_t> level_lengths(size_t seq) const { return {seq}; }
  /// The work of make_levels and of attend for every head in one training step at BATCH x SEQ
  /// (step_work adds the projections, the output maps and the heads' own). Default: not counted.
  virtual WorkCount attend_work(size_t batch, size_t seq) const;
  /// Nothing left to do: the constructor creates the starting heads.
  [[deprecated("MultiHeadBlock's constructor creates the starting heads; remove the call")]] void
  create_initial_heads() {}
  virtual std::string block_name() const = 0;

 private:
  struct Slot;
  std::shared_ptr<Slot> make_slot(int id);
  void insert_slot(std::shared_ptr<Slot> s);

  size_t d_model_;
  HeadShape shape_;
  ConfigNode head_cfg_;
  Registry* registry_;
  Rng init_rng_;
  size_t max_heads_;
  bool combine_mean_;
  int next_id_ = 0;
  std::vector<std::shared_ptr<Slot>> slots_;
  Var b_o_;
};

}  // namespace gf

GROWFORMER_API_END
