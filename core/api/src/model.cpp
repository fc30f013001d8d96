#include "growformer/model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "growformer/errors.hpp"
#include "growformer/ops.hpp"
#include "growformer/registry.hpp"

namespace gf {

namespace {
Tensor uniform_init(Shape s, size_t fan_in, Rng& rng) {
  Tensor t(std::move(s));
  float b = 1.0f / std::sqrt(static_cast<float>(fan_in));
  rng.fill_uniform(t, -b, b);
  return t;
}
}  // namespace

namespace {
// The model's naming: block I is "layers.I", its attention block "layers.I.attn", whose heads
// the block registers as "heads.<id>".
const std::string kLayers = "layers.";
const std::string kHeads = ".attn.heads.";
}  // namespace

ParamPlace Model::place_of(const std::string& name) {
  ParamPlace p;
  if (name.rfind(kLayers, 0) != 0) {
    p.block = name.substr(0, name.find('.'));
    return p;
  }
  p.block = name.substr(0, name.find('.', kLayers.size()));
  const size_t h = name.find(kHeads, p.block.size());
  if (h == p.block.size()) p.head = name.substr(0, name.find('.', h + kHeads.size()));
  return p;
}

struct Model::Layer : Module {
  Var ln1_g, ln1_b, ln2_g, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  std::shared_ptr<AttentionBlock> attn;
  std::unique_ptr<Mlp> mlp;  // over fc1_w, fc1_b, fc2_w
  bool left_out = false;     // passed over in forward() (Model::set_left_out)
};

const OptionTable<ModelSettings>& ModelSettings::table() {
  using S = ModelSettings;
  static const auto t =
      OptionTable<S>()
          .add("d_model", &S::d_model, "64", "model width d", 1, 65536)
          .add("layers", &S::layers, "2",
               "number of residual blocks (where the model starts: block edits change it)", 1, 1024)
          .add("mlp_ratio", &S::mlp_ratio, "4",
               "MLP hidden width as a multiple of d_model (where each block starts: MLP edits "
               "change it)",
               0.25, 64)
          .add("max_len", &S::max_len, "512", "learned positions (longer sequences are truncated)",
               1, 1 << 20)
          .choice("pool", &S::cls, "mean", "sequence pooling before the classifier",
                  {{"mean", false}, {"cls", true}})
          .add("dropout", &S::dropout, "0", "dropout on residual branches during training", 0, 0.95)
          .add("final_norm", &S::final_norm, "true", "layer norm before pooling")
          .add("attention", &S::attention, "", "the attention block plugin and its options");
  return t;
}

OptionSpecs Model::options() { return ModelSettings::table().specs(); }

Model::Model(const ConfigNode& node, size_t vocab, size_t classes, Registry& registry,
             uint64_t seed)
    : Model(Options(node, options(), "model"), vocab, classes, registry, seed) {}

Model::Model(const Options& o, size_t vocab, size_t classes, Registry& registry, uint64_t seed)
    : Model(o, ModelSettings::table().read(o), vocab, classes, registry, seed) {}

Model::Model(const Options& o, const ModelSettings& s, size_t vocab, size_t classes,
             Registry& registry, uint64_t seed)
    : vocab_(vocab), classes_(classes) {
  d_ = s.d_model;
  const size_t L = s.layers;
  mlp_start_ = static_cast<size_t>(std::lround(s.mlp_ratio * static_cast<double>(d_)));
  max_len_ = s.max_len;
  cls_ = s.cls;
  if (cls_ && max_len_ < 2) o.fail("max_len", "CLS pooling needs max_len >= 2");
  dropout_ = static_cast<float>(s.dropout);
  final_norm_ = s.final_norm;
  if (vocab_ == 0 || classes_ == 0)
    throw RuntimeError("model: the dataset reports an empty vocabulary or no classes");

  Rng rng(seed, "model.init");
  Tensor emb({vocab_, d_});
  rng.fill_normal(emb, 1.0f);
  embed_ = register_parameter("embed", emb);
  Tensor pos({max_len_, d_});
  rng.fill_normal(pos, 0.02f);
  pos_ = register_parameter("pos", pos);
  if (cls_) {
    Tensor c({d_});
    rng.fill_normal(c, 0.02f);
    cls_vec_ = register_parameter("cls", c);
  }
  registry_ = &registry;
  attn_node_ = s.attention;
  seed_ = seed;
  for (size_t i = 0; i < L; ++i) {
    Rng arng(seed, "model.layers." + std::to_string(i) + ".attn");
    auto layer = make_layer(i, arng, rng);
    if (cls_ && layer->attn->causal())
      o.fail("pool",
             "`pool: cls` reads the CLS slot in front of the tokens, which causal attention lets "
             "see only itself: the classifier would give one output for every input; use "
             "`pool: mean` with causal attention");
    register_module(kLayers + std::to_string(i), layer);
    layers_.push_back(layer);
  }
  if (final_norm_) {
    lnf_g_ = register_parameter("ln_f.gamma", Tensor({d_}, 1.0f));
    lnf_b_ = register_parameter("ln_f.beta", Tensor({d_}, 0.0f));
  }
  head_w_ = register_parameter("classifier.w", uniform_init({d_, classes_}, d_, rng));
  head_b_ = register_parameter("classifier.b", Tensor({classes_}, 0.0f));
}

std::shared_ptr<Model::Layer> Model::make_layer(size_t index, Rng& attn_rng, Rng& rng) {
  auto layer = std::make_shared<Layer>();
  layer->ln1_g = layer->register_parameter("ln1.gamma", Tensor({d_}, 1.0f));
  layer->ln1_b = layer->register_parameter("ln1.beta", Tensor({d_}, 0.0f));
  AttentionBuild ab{d_, index, registry_, &attn_rng};
  layer->attn = registry_->create_attention(attn_node_, ab);
  layer->register_module("attn", layer->attn);
  layer->ln2_g = layer->register_parameter("ln2.gamma", Tensor({d_}, 1.0f));
  layer->ln2_b = layer->register_parameter("ln2.beta", Tensor({d_}, 0.0f));
  const size_t hidden = mlp_start_;
  layer->fc1_w = layer->register_parameter("mlp.fc1.w", uniform_init({d_, hidden}, d_, rng));
  layer->fc1_b = layer->register_parameter("mlp.fc1.b", Tensor({hidden}, 0.0f));
  layer->fc2_w = layer->register_parameter("mlp.fc2.w", uniform_init({hidden, d_}, hidden, rng));
  layer->fc2_b = layer->register_parameter("mlp.fc2.b", Tensor({d_}, 0.0f));
  layer->mlp = std::make_unique<Mlp>(layer->fc1_w, layer->fc1_b, layer->fc2_w, max_mlp_width());
  return layer;
}

Var Model::forward(const Batch& b, bool training, Rng* dropout_rng) {
  Var x = ops::embedding(b.ids, b.batch, b.seq, embed_);
  std::vector<uint8_t> valid = b.valid;
  size_t T = b.seq;
  if (cls_) {
    x = ops::prepend(x, cls_vec_);
    T += 1;
    std::vector<uint8_t> v2(b.batch * T);
    for (size_t i = 0; i < b.batch; ++i) {
      v2[i * T] = 1;
      for (size_t t = 0; t < b.seq; ++t) v2[i * T + t + 1] = b.valid[i * b.seq + t];
    }
    valid.swap(v2);
  }
  x = ops::add_positions(x, pos_);
  ForwardContext ctx;
  ctx.key_valid = &valid;
  ctx.training = training;
  ctx.rng = dropout_rng;
  bool drop = training && dropout_ > 0 && dropout_rng;
  // a shard of a larger batch keeps its rows of the whole batch's mask
  size_t before = b.global_rows ? b.row_offset : 0;
  size_t after = b.global_rows ? b.global_rows - b.row_offset - b.batch : 0;
  for (auto& l : layers_) {
    if (l->left_out) continue;
    Var h = l->attn->forward(ops::layer_norm(x, l->ln1_g, l->ln1_b), ctx);
    if (drop) h = ops::dropout(h, dropout_, *dropout_rng, before, after);
    x = ops::add(x, h);
    Var m = ops::linear(ops::layer_norm(x, l->ln2_g, l->ln2_b), l->fc1_w, &l->fc1_b);
    m = ops::linear(ops::gelu(m), l->fc2_w, &l->fc2_b);
    if (drop) m = ops::dropout(m, dropout_, *dropout_rng, before, after);
    x = ops::add(x, m);
  }
  if (final_norm_) x = ops::layer_norm(x, lnf_g_, lnf_b_);
  Var pooled = cls_ ? ops::select_position(x, 0) : ops::masked_mean_pool(x, valid);
  return ops::linear(pooled, head_w_, &head_b_);
}

void Model::set_left_out(const std::vector<size_t>& indices) {
  for (size_t i : indices)
    if (i >= layers_.size())
      throw RuntimeError("cannot leave out block " + std::to_string(i) + ": the model has " +
                         std::to_string(layers_.size()) + " block(s)");
  for (auto& l : layers_) l->left_out = false;
  for (size_t i : indices) layers_[i]->left_out = true;
}

std::vector<size_t> Model::left_out() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i]->left_out) out.push_back(i);
  return out;
}

std::string Model::why_not_insert_block(size_t index) const {
  const size_t n = layers_.size();
  if (index > n)
    return "there is no index " + std::to_string(index) + " to insert at (the model has " +
           std::to_string(n) + " blocks: a new block goes at 0.." + std::to_string(n) + ")";
  if (n >= kMaxBlocks)
    return "the model already has the most blocks a model may hold, " + std::to_string(kMaxBlocks);
  if (!n || layers_[0]->attn->heads().empty())
    return "its attention blocks have no heads whose output maps could start at zero (" +
           (n ? layers_[0]->attn->describe() : std::string("no block")) + ")";
  return "";
}

std::string Model::why_not_remove_block(size_t index) const {
  const size_t n = layers_.size();
  if (index >= n)
    return "it has no block " + std::to_string(index) + " (its blocks: 0.." +
           std::to_string(n - 1) + ")";
  if (n == 1) return "removing its only block would leave it none";
  return "";
}

void Model::unregister_layers() {
  for (size_t i = 0; i < layers_.size(); ++i) unregister_module(kLayers + std::to_string(i));
}

void Model::register_layers() {
  for (size_t i = 0; i < layers_.size(); ++i)
    register_module(kLayers + std::to_string(i), layers_[i]);
}

void Model::insert_block(size_t index, Rng& rng) {
  const std::string why = why_not_insert_block(index);
  if (!why.empty()) throw RuntimeError("model: cannot insert a block: " + why);
  Rng arng(rng.next_u64(), "model.inserted.attn");
  auto layer = make_layer(index, arng, rng);
  for (const HeadInfo& h : layer->attn->heads()) Var(*h.w_o).value().zero();
  layer->fc2_w.value().zero();
  unregister_layers();
  layers_.insert(layers_.begin() + static_cast<long>(index), layer);
  register_layers();
}

void Model::remove_block(size_t index) {
  const std::string why = why_not_remove_block(index);
  if (!why.empty()) throw RuntimeError("model: cannot remove a block: " + why);
  unregister_layers();
  layers_.erase(layers_.begin() + static_cast<long>(index));
  register_layers();
}

void Model::set_blocks(size_t count) {
  if (count == 0 || count > kMaxBlocks)
    throw RuntimeError("model: " + std::to_string(count) + " blocks (a model holds 1.." +
                       std::to_string(kMaxBlocks) + ")");
  Rng rng(seed_, "model.blocks");
  while (layers_.size() > count) {
    unregister_module(kLayers + std::to_string(layers_.size() - 1));
    layers_.pop_back();
  }
  while (layers_.size() < count) {
    const size_t i = layers_.size();
    Rng arng(seed_, "model.layers." + std::to_string(i) + ".attn");
    layers_.push_back(make_layer(i, arng, rng));
    register_module(kLayers + std::to_string(i), layers_.back());
  }
}

std::vector<AttentionBlock*> Model::blocks() const {
  std::vector<AttentionBlock*> out;
  for (auto& l : layers_) out.push_back(l->attn.get());
  return out;
}

std::vector<Mlp*> Model::mlps() const {
  std::vector<Mlp*> out;
  for (auto& l : layers_) out.push_back(l->mlp.get());
  return out;
}

std::vector<size_t> Model::mlp_widths() const {
  std::vector<size_t> out;
  for (auto& l : layers_) out.push_back(l->mlp->width());
  return out;
}

std::vector<size_t> Model::heads_per_block() const {
  std::vector<size_t> out;
  for (auto& l : layers_) out.push_back(l->attn->num_heads());
  return out;
}

WorkCount Model::step_work(size_t batch, size_t seq) const {
  if (cls_) return WorkCount::none("the model's work is counted for mean pooling, not `pool: cls`");
  for (auto& l : layers_)
    if (l->mlp->width() != layers_[0]->mlp->width())
      return WorkCount::none(
          "the blocks' MLP widths differ (grown); the model's work is counted "
          "for one width");
  kernels::ModelShape s;
  s.batch = batch, s.seq = seq, s.d_model = d_, s.layers = layers_.size();
  s.hidden = layers_.empty() ? 0 : layers_[0]->fc1_w.dim(1);
  s.classes = classes_, s.params = num_parameters(), s.final_norm = final_norm_;
  kernels::StepWork w = kernels::model_work(s);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const WorkCount b = layers_[i]->attn->step_work(batch, seq);
    if (!b.work) return WorkCount::none(kLayers + std::to_string(i) + ".attn: " + b.why_not);
    w += *b.work;
  }
  return WorkCount::of(w);
}

std::string Model::describe() const {
  std::ostringstream o;
  o << "classifier: vocab " << vocab_ << ", d_model " << d_ << ", " << layers_.size()
    << " layers, max_len " << max_len_ << ", pool " << (cls_ ? "cls" : "mean") << ", " << classes_
    << " classes, " << num_parameters() << " parameters\n";
  for (size_t i = 0; i < layers_.size(); ++i)
    o << "  layers." << i << ".attn  " << layers_[i]->attn->describe() << "\n";
  const std::vector<size_t> w = mlp_widths();
  if (std::any_of(w.begin(), w.end(), [this](size_t u) { return u != mlp_start_; }))
    for (size_t i = 0; i < w.size(); ++i)
      o << "  layers." << i << ".mlp  " << w[i] << " units (grown from " << mlp_start_ << ")\n";
  return o.str();
}

}  // namespace gf
