// The classifier built from the `model:` tree: token embedding + learned
// positions, N pre-LayerNorm residual blocks (attention plugin + GELU MLP),
// pooling (mean or CLS) and a linear classifier.
#pragma once
#include "growformer/export.hpp"

#include <memory>
#include <string>
#include <vector>

#include "growformer/attention.hpp"
#include "growformer/config.hpp"
#include "growformer/fields.hpp"
#include "growformer/mlp.hpp"
#include "growformer/module.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class Registry;

/// A padded batch: ids and validity (1 = real token) are (B*T) row-major.
struct Batch {
  size_t batch = 0, seq = 0;
  std::vector<int32_t> ids;
  std::vector<uint8_t> valid;
  std::vector<int32_t> labels;
  /// A shard of a larger batch (data-parallel training): this batch holds rows
  /// [row_offset, row_offset + batch) of a batch of GLOBAL_ROWS rows (0 = it is the whole
  /// batch). Dropout draws the whole batch's mask and keeps this shard's rows, so the shards
  /// of N processes see exactly the mask of one process training on the whole batch.
  size_t row_offset = 0, global_rows = 0;
};

/// Where a parameter sits in the model, from its dotted name: the block ("layers.0", or the
/// top-level part: "embed", "pos", "cls", "ln_f", "classifier") and, for a head's parameter,
/// the head ("layers.0.attn.heads.3"; empty otherwise).
struct ParamPlace {
  std::string block;
  std::string head;
};

/// The options of the `model:` tree, each declared once (`table()`).
struct ModelSettings {
  size_t d_model = 64;
  size_t layers = 2;
  double mlp_ratio = 4;
  size_t max_len = 512;
  bool cls = false;  // pool: cls (else mean)
  double dropout = 0;
  bool final_norm = true;
  ConfigNode attention;  // the attention block plugin and its options
  static const OptionTable<ModelSettings>& table();
};

class Model : public Module {
 public:
  /// The specs of ModelSettings::table().
  static OptionSpecs options();
  /// The place of parameter NAME (as `named_parameters()` spells it) in this naming.
  static ParamPlace place_of(const std::string& name);
  /// The model of the `model:` tree NODE (its options read here).
  Model(const ConfigNode& node, size_t vocab_size, size_t num_classes, Registry& registry,
        uint64_t seed);
  /// The model of settings S, read from the `model:` options OPTS (which name an option in
  /// errors), so that a caller that needs the settings first reads them once.
  Model(const Options& opts, const ModelSettings& s, size_t vocab_size, size_t num_classes,
        Registry& registry, uint64_t seed);

  /// Logits (B, num_classes).
  Var forward(const Batch& batch, bool training, Rng* dropout_rng);
  std::vector<AttentionBlock*> blocks() const;
  /// Leaves the blocks of INDICES out of forward() (each passes the residual stream unchanged:
  /// an ablation of whole blocks, for evaluation; a left-out block gets no gradients); {}
  /// puts every block back. RuntimeError for an index past the last block. Block edits move a
  /// left-out block with its index.
  void set_left_out(const std::vector<size_t>& indices);
  /// The indices of the blocks left out of forward(), ascending.
  std::vector<size_t> left_out() const;
  /// Each block's MLP (the structure editor's MLP edits reshape it in place).
  std::vector<Mlp*> mlps() const;
  /// Each block's MLP width in hidden units.
  std::vector<size_t> mlp_widths() const;
  /// The width every block's MLP starts at (`mlp_ratio` x d_model).
  size_t initial_mlp_width() const { return mlp_start_; }
  /// The most units a block's MLP may hold: `mlp_ratio`'s upper bound (64) x d_model.
  size_t max_mlp_width() const { return 64 * d_; }
  /// The most blocks a model may hold (the `layers` option's upper bound).
  static constexpr size_t kMaxBlocks = 1024;
  /// Why a block cannot be inserted at INDEX ("" when it can): an index past the last block, a
  /// model at kMaxBlocks, an attention block without heads (no output maps to start at zero).
  std::string why_not_insert_block(size_t index) const;
  /// Why block INDEX cannot be removed ("" when it can): no such block, or the last one.
  std::string why_not_remove_block(size_t index) const;
  /// Inserts a block at INDEX (0 .. blocks().size()) of the model's block kind and starting
  /// structure (the `model.attention` options, an MLP of mlp_ratio x d_model units), drawn
  /// from RNG, with every head's output map W_O and the MLP's output weights zero: it adds zero
  /// to the residual stream, so the model's function is unchanged. The blocks from INDEX on
  /// move one index up (their parameters are named `layers.<new index>...`). RuntimeError with
  /// why_not_insert_block() when it cannot.
  void insert_block(size_t index, Rng& rng);
  /// Removes block INDEX; the blocks after it move one index down. RuntimeError with
  /// why_not_remove_block() when it cannot.
  void remove_block(size_t index);
  /// Sets the number of blocks to COUNT (1 .. kMaxBlocks), dropping the last blocks or
  /// appending blocks as the configuration builds them, before a checkpoint's structures and
  /// parameters are copied in.
  void set_blocks(size_t count);
  /// Positions available to tokens (max_len, minus one for the CLS slot).
  size_t max_tokens() const { return cls_ ? max_len_ - 1 : max_len_; }
  size_t d_model() const { return d_; }
  size_t num_classes() const { return classes_; }
  size_t vocab_size() const { return vocab_; }
  /// Heads per block (empty entries for blocks without heads).
  std::vector<size_t> heads_per_block() const;
  /// The work of one training step (forward, backward, AdamW) at BATCH sequences of SEQ tokens,
  /// without dropout (as `growformer bench` runs it): the model's own (kernels::model_work) and
  /// each block's (AttentionBlock::step_work). Not counted, with why, for `pool: cls` or a
  /// block that cannot count its work.
  WorkCount step_work(size_t batch, size_t seq) const;
  std::string describe() const;

 private:
  Model(const Options& opts, size_t vocab_size, size_t num_classes, Registry& registry,
        uint64_t seed);
  struct Layer;
  /// Block INDEX as the configuration builds it: its attention from ATTN_RNG, its MLP's weights
  /// from RNG (after its attention's).
  std::shared_ptr<Layer> make_layer(size_t index, Rng& attn_rng, Rng& rng);
  /// The children "layers.0", "layers.1", ... of LAYERS_ unregistered, or registered in order
  /// (after an edit of LAYERS_ between the two, so its blocks' names follow their indices).
  void unregister_layers();
  void register_layers();
  Registry* registry_ = nullptr;
  ConfigNode attn_node_;
  uint64_t seed_ = 0;
  size_t d_, vocab_, classes_, max_len_, mlp_start_ = 0;
  bool cls_;
  float dropout_;
  Var embed_, pos_, cls_vec_, lnf_g_, lnf_b_, head_w_, head_b_;
  bool final_norm_;
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace gf

GROWFORMER_API_END
