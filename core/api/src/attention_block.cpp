#include <algorithm>
#include <map>
#include <sstream>

#include "growformer/multihead.hpp"
#include "growformer/ops.hpp"
#include "growformer/projections.hpp"
#include "growformer/registry.hpp"

namespace gf {

// ---- AttentionBlock defaults ------------------------------------------------
int AttentionBlock::add_head(const HeadInit&, Rng&, size_t) {
  throw RuntimeError(describe() + ": this attention block cannot add heads");
}
void AttentionBlock::remove_head(int) {
  throw RuntimeError(describe() + ": this attention block cannot remove heads");
}
void AttentionBlock::restore_structure(const BlockStructure&) {
  throw RuntimeError(describe() + ": this attention block has no structure to restore");
}
WorkCount AttentionBlock::step_work(size_t, size_t) const {
  return WorkCount::none("this attention block does not count its work");
}
double AttentionBlock::head_mask_grad(int id) const {
  auto it = head_masks_.find(id);
  if (it == head_masks_.end() || !it->second.grad().defined()) return 0.0;
  return it->second.grad()[0];
}
Var AttentionBlock::mute_examples(const Var& o, Var& keep) const {
  if (!keep.defined()) {
    const Shape& sh = o.value().shape();
    const size_t batch = sh.empty() ? 0 : sh[0];
    if (batch != part_examples_.size())
      throw RuntimeError(describe() + ": a sit-out on part of a batch marks " +
                         std::to_string(part_examples_.size()) + " examples of a batch of " +
                         std::to_string(batch));
    Tensor mask(sh, 1.0f);
    const size_t per = batch ? mask.size() / batch : 0;
    for (size_t b = 0; b < batch; ++b)
      if (part_examples_[b]) std::fill(mask.data() + b * per, mask.data() + (b + 1) * per, 0.0f);
    keep = constant(std::move(mask));
  }
  return ops::mul(o, keep);
}

// ---- MultiHeadBlock -----------------------------------------------------------
struct MultiHeadBlock::Slot : Module {
  int id = 0;
  size_t born = 0;
  std::shared_ptr<Head> head;
  Var w_o;
  Slot(int id_, std::shared_ptr<Head> h, size_t d_v, size_t d_model, Rng& rng) : id(id_) {
    head = std::move(h);
    register_module("", head);
    Tensor w({d_v, d_model});
    float bound = 1.0f / std::sqrt(static_cast<float>(d_v));
    rng.fill_uniform(w, -bound, bound);
    w_o = register_parameter("w_o", w);
  }
};

const OptionTable<MultiHeadSettings>& MultiHeadSettings::table() {
  using S = MultiHeadSettings;
  static const auto t =
      OptionTable<S>()
          .add("heads", &S::heads, "4", "number of heads at the start", 1, 4096)
          .add("d_k", &S::d_k, "0", "query/key width per head (0 = d_model / heads)", 0, 65536)
          .add("d_v", &S::d_v, "0", "value width per head (0 = d_k)", 0, 65536)
          .add("head", &S::head, "{plugin: dot_product}", "the head plugin and its options")
          .choice("combine", &S::combine_mean, "sum", "how head outputs combine",
                  {{"sum", false}, {"mean", true}})
          .add("max_heads", &S::max_heads, "256", "upper bound on heads for growth", 1, 65536);
  return t;
}

OptionSpecs MultiHeadBlock::common_options() { return MultiHeadSettings::table().specs(); }

MultiHeadBlock::MultiHeadBlock(const Options& opts, const AttentionBuild& build, size_t levels,
                               bool share_qk)
    : MultiHeadBlock(opts, MultiHeadSettings::table().read(opts), build, levels, share_qk) {}

MultiHeadBlock::MultiHeadBlock(const Options& opts, const MultiHeadSettings& s,
                               const AttentionBuild& build, size_t levels, bool share_qk)
    : d_model_(build.d_model),
      head_cfg_(s.head),
      registry_(build.registry),
      init_rng_(build.rng ? *build.rng : Rng(0, "attention")) {
  const size_t heads = s.heads;
  size_t dk = s.d_k;
  if (dk == 0) {
    if (d_model_ % heads != 0)
      opts.fail("heads", "d_model " + std::to_string(d_model_) + " is not divisible by " +
                             std::to_string(heads) + " heads; set d_k explicitly");
    dk = d_model_ / heads;
  }
  const size_t dv = s.d_v == 0 ? dk : s.d_v;
  shape_ = HeadShape{d_model_, dk, dv, levels, share_qk};
  max_heads_ = s.max_heads;
  if (max_heads_ < heads) opts.fail("max_heads", "smaller than the initial number of heads");
  combine_mean_ = s.combine_mean;
  b_o_ = register_parameter("b_o", Tensor({d_model_}, 0.0f));
  if (!registry_) throw std::logic_error("MultiHeadBlock needs a registry to create heads");
  // The starting heads, here rather than in the derived constructor: a block without them
  // cannot exist. Their values do not depend on when they are made (they draw from init_rng_,
  // the block's own copy of the stream) nor does the parameter order (heads are children).
  // Creating them also checks the head options now, not at the first growth.
  for (size_t i = 0; i < heads; ++i) insert_slot(make_slot(next_id_++));
}

std::shared_ptr<MultiHeadBlock::Slot> MultiHeadBlock::make_slot(int id) {
  HeadBuild hb{shape_, registry_, &init_rng_};
  auto head = registry_->create_head(head_cfg_, hb);
  return std::make_shared<Slot>(id, head, shape_.d_v, d_model_, init_rng_);
}

void MultiHeadBlock::insert_slot(std::shared_ptr<Slot> s) {
  register_module("heads." + std::to_string(s->id), s);
  slots_.push_back(std::move(s));
}

std::vector<Var> MultiHeadBlock::make_levels(const Var& x, const ForwardContext&) { return {x}; }

Var MultiHeadBlock::forward(const Var& x, const ForwardContext& ctx) {
  if (capture_) captured_ = x.value().clone();
  std::vector<Var> levels = make_levels(x, ctx);
  AttendFn fn = [this, &ctx](const std::vector<Var>& q, const std::vector<Var>& k, const Var& v) {
    return attend(q, k, v, ctx);
  };
  // Every head's projections in one product per level when all heads use the core part.
  std::vector<QkvProjected> projected;
  if (fused_projections() && slots_.size() > 1) {
    std::vector<const QkvProjections*> parts;
    for (auto& s : slots_) {
      const QkvProjections* p = s->head->projections();
      if (!p || !p->same_shape(*slots_[0]->head->projections())) break;
      parts.push_back(p);
    }
    if (parts.size() == slots_.size()) projected = QkvProjections::project_all(parts, levels);
  }
  std::vector<Var> outs;
  outs.reserve(slots_.size());
  if (!head_masks_on_) head_masks_.clear();
  // Without per-head masks or the mean: the heads' output maps, their sum and the bias as
  // one product (ops::linear_sum), not one output per head, a sum and a bias pass.
  if (!head_masks_on_ && !combine_mean_ && slots_.size() > 1 && muted_.empty() &&
      part_muted_.empty()) {
    std::vector<Var> hs, ws;
    for (size_t i = 0; i < slots_.size(); ++i) {
      HeadInput in{levels, fn, ctx, projected.empty() ? nullptr : &projected[i]};
      hs.push_back(slots_[i]->head->forward(in));
      ws.push_back(slots_[i]->w_o);
    }
    return ops::linear_sum(hs, ws, &b_o_);
  }
  Var keep;  // the part-muted heads' row mask, made once for the pass
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto& s = slots_[i];
    if (is_muted(s->id)) continue;  // an ablation: this head's output is left out
    HeadInput in{levels, fn, ctx, projected.empty() ? nullptr : &projected[i]};
    Var h = s->head->forward(in);
    Var o = ops::linear(h, s->w_o);
    if (std::find(part_muted_.begin(), part_muted_.end(), s->id) != part_muted_.end())
      o = mute_examples(o, keep);
    if (head_masks_on_) {
      Var m = parameter(Tensor::scalar(1.0f));
      head_masks_[s->id] = m;
      o = ops::mul(o, m);
    }
    outs.push_back(o);
  }
  if (outs.empty()) return ops::add(ops::scale(x, 0.0f), b_o_);  // every head muted
  Var y = outs.size() == 1 ? outs[0] : ops::sum_all(outs);
  // combine: mean divides by the block's head count, muted heads included (a muted head
  // contributes zero, as if its W_O were zero)
  const size_t n_mean = slots_.size();
  if (combine_mean_ && n_mean > 1) y = ops::scale(y, 1.0f / static_cast<float>(n_mean));
  return ops::add(y, b_o_);
}

std::vector<HeadInfo> MultiHeadBlock::heads() const {
  std::vector<HeadInfo> out;
  for (const auto& s : slots_) out.push_back({s->id, s->head.get(), &s->w_o, s->born});
  return out;
}

int MultiHeadBlock::add_head(const HeadInit& init, Rng& rng, size_t step) {
  if (slots_.size() >= max_heads_)
    throw RuntimeError(block_name() +
                       ": cannot add a head beyond max_heads = " + std::to_string(max_heads_));
  auto s = make_slot(next_id_++);
  s->born = step;
  s->head->initialize(init, rng);
  if (init.preserve_function) {
    s->w_o.value().zero();
    // combine: mean divides by the head count: scale the existing heads' output maps
    // by (H + 1) / H so that the block's output is unchanged by the new (zero) head.
    if (combine_mean_ && !slots_.empty()) {
      const float f = static_cast<float>(slots_.size() + 1) / static_cast<float>(slots_.size());
      for (auto& old : slots_) {
        Tensor& w = old->w_o.value();
        for (size_t i = 0; i < w.size(); ++i) w[i] *= f;
      }
    }
  }
  insert_slot(s);
  return s->id;
}

void MultiHeadBlock::remove_head(int id) {
  auto it = std::find_if(slots_.begin(), slots_.end(), [&](auto& s) { return s->id == id; });
  if (it == slots_.end())
    throw RuntimeError(block_name() + ": no head with id " + std::to_string(id));
  if (slots_.size() == 1) throw RuntimeError(block_name() + ": cannot remove the last head");
  unregister_module("heads." + std::to_string(id));
  slots_.erase(it);
  head_masks_.erase(id);
}

std::optional<BlockStructure> MultiHeadBlock::structure() const {
  BlockStructure s;
  s.next_id = next_id_;
  s.rng_state = init_rng_.state();
  s.rng_increment = init_rng_.increment();
  for (auto& sl : slots_) s.heads.push_back({sl->id, sl->born, sl->head->save_state()});
  return s;
}

void MultiHeadBlock::restore_structure(const BlockStructure& s) {
  // the checkpoint's reader checked S; a block keeps its own invariants all the same
  if (s.heads.empty() || s.heads.size() > max_heads_)
    throw RuntimeError(block_name() + ": a structure of " + std::to_string(s.heads.size()) +
                       " heads (a block has 1 to max_heads = " + std::to_string(max_heads_) + ")");
  for (auto& sl : slots_) unregister_module("heads." + std::to_string(sl->id));
  slots_.clear();
  for (auto& h : s.heads) {
    auto sl = make_slot(h.id);
    sl->born = h.born;
    if (!h.state.empty()) sl->head->load_state(h.state);
    insert_slot(sl);
  }
  next_id_ = s.next_id;
  init_rng_.restore(s.rng_state, s.rng_increment);
}

std::string MultiHeadBlock::describe() const {
  std::ostringstream o;
  o << block_name() << ": " << slots_.size() << " head" << (slots_.size() == 1 ? "" : "s")
    << " (ids";
  for (auto& s : slots_) o << " " << s->id;
  o << "), d_k " << shape_.d_k << ", d_v " << shape_.d_v;
  if (shape_.levels > 1) o << ", " << shape_.levels << " levels";
  return o.str();
}

}  // namespace gf
