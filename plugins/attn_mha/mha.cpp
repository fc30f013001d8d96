// attention `mha` (standard multi-head scaled dot-product attention) and head
// `dot_product` (per-level query/key projections and a value projection).
#include <growformer/multihead.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>

#include <cmath>
#include <string>

namespace {

using namespace gf;

class DotProductHead : public Head {
 public:
  DotProductHead(const Options&, const HeadBuild& b) : Head(b.shape) {
    Rng& rng = *b.rng;
    size_t d = shape_.d_model, dk = shape_.d_k, dv = shape_.d_v;
    size_t nqk = shape_.share_qk ? 1 : shape_.levels;
    float bound = 1.0f / std::sqrt(static_cast<float>(d));
    for (size_t l = 0; l < nqk; ++l) {
      std::string sfx = l == 0 ? "" : "_l" + std::to_string(l);
      Tensor wq({d, dk}), wk({d, dk});
      rng.fill_uniform(wq, -bound, bound);
      rng.fill_uniform(wk, -bound, bound);
      w_q_.push_back(register_parameter("w_q" + sfx, wq));
      b_q_.push_back(register_parameter("b_q" + sfx, Tensor({dk}, 0.0f)));
      w_k_.push_back(register_parameter("w_k" + sfx, wk));
      b_k_.push_back(register_parameter("b_k" + sfx, Tensor({dk}, 0.0f)));
    }
    Tensor wv({d, dv});
    rng.fill_uniform(wv, -bound, bound);
    w_v_ = register_parameter("w_v", wv);
    b_v_ = register_parameter("b_v", Tensor({dv}, 0.0f));
  }

  Var forward(const HeadInput& in) override {
    std::vector<Var> q, k;
    size_t L = shape_.levels;
    for (size_t l = 0; l < L && l < in.levels.size(); ++l) {
      size_t p = shape_.share_qk ? 0 : l;
      q.push_back(ops::linear(in.levels[l], w_q_[p], &b_q_[p]));
      k.push_back(ops::linear(in.levels[l], w_k_[p], &b_k_[p]));
    }
    Var v = ops::linear(in.levels[0], w_v_, &b_v_);
    return in.attend(q, k, v);
  }

  const Var* w_q(size_t level) const override {
    return level < w_q_.size() ? &w_q_[level] : (shape_.share_qk ? &w_q_[0] : nullptr);
  }
  const Var* w_k(size_t level) const override {
    return level < w_k_.size() ? &w_k_[level] : (shape_.share_qk ? &w_k_[0] : nullptr);
  }
  const Var* w_v() const override { return &w_v_; }

  void initialize(const HeadInit& init, Rng& rng) override {
    size_t d = shape_.d_model, dk = shape_.d_k;
    float qk_std = 1.0f / std::sqrt(static_cast<float>(d));  // W_Q, W_K ~ N(0, 1/d)
    for (size_t l = 0; l < w_q_.size(); ++l) {
      rng.fill_normal(w_q_[l].value(), qk_std);
      rng.fill_normal(w_k_[l].value(), qk_std);
      b_q_[l].value().zero();
      b_k_[l].value().zero();
    }
    if (init.mode == "directed" && init.direction.size() == d) {
      // the new head looks first along the direction it was grown for
      double norm = 0;
      for (float x : init.direction) norm += static_cast<double>(x) * x;
      norm = std::sqrt(norm);
      if (norm > 0)
        for (size_t i = 0; i < d; ++i)
          w_q_[0].value()[i * dk] = static_cast<float>(init.direction[i] / norm);
    }
    if (init.value_variance >= 0)
      rng.fill_normal(w_v_.value(), static_cast<float>(std::sqrt(init.value_variance)));
    b_v_.value().zero();
  }

 private:
  std::vector<Var> w_q_, b_q_, w_k_, b_k_;
  Var w_v_, b_v_;
};

class MhaBlock : public MultiHeadBlock {
 public:
  MhaBlock(const Options& opts, const AttentionBuild& b)
      : MultiHeadBlock(opts, b, 1, false), causal_(opts.get_bool("causal")) {
    create_initial_heads();
  }

 protected:
  Var attend(const std::vector<Var>& q, const std::vector<Var>& k, const Var& v,
             const ForwardContext& ctx) override {
    ops::AttentionMask m;
    m.key_valid = ctx.key_valid;
    m.causal = causal_;
    float scale = 1.0f / std::sqrt(static_cast<float>(q[0].dim(2)));
    return ops::attention(q[0], k[0], v, scale, m);
  }
  std::string block_name() const override { return "mha"; }
  bool causal() const override { return causal_; }

 private:
  bool causal_;
};

void register_components(Registry& r) {
  OptionSpecs mha = MultiHeadBlock::common_options();
  mha.push_back({"causal", OptType::Bool, "false", "mask future positions (decoder-style)"});
  r.add_attention({"mha", "standard multi-head scaled dot-product attention", mha},
                  [](const Options& o, const AttentionBuild& b) {
                    return std::make_unique<MhaBlock>(o, b);
                  });
  r.add_head({"dot_product", "query/key projections per level and a value projection", {}},
             [](const Options& o, const HeadBuild& b) {
               return std::make_unique<DotProductHead>(o, b);
             });
}

}  // namespace

GROWFORMER_PLUGIN("attn_mha", "0.1.0", register_components)
