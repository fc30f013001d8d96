// `hybrid_conv` head (HKT, Cirrincione 2026): a learned per-head gate between
// attention and a causal depthwise convolution of the value stream,
//   Y = sigmoid(beta) * attend(Q, K, V) + (1 - sigmoid(beta)) * conv_k(V),  V = X W_V.
// beta starts at 0 (both terms weigh 1/2). With beta -> +inf the head is a plain
// dot-product head; with beta -> -inf it is the convolution alone.
#include <algorithm>
#include <cmath>
#include <growformer/attention.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using gf::Var;
namespace ops = gf::ops;

class HybridConvHead : public gf::Head {
 public:
  // Projections exactly like the `dot_product` head (same names, biases and
  // initialisation), so that beta -> +inf reproduces it weight for weight.
  HybridConvHead(const gf::Options& o, const gf::HeadBuild& b)
      : gf::Head(b.shape), kernel_(static_cast<size_t>(o.get_int("kernel"))) {
    gf::Rng& rng = *b.rng;
    const size_t d = shape_.d_model, dk = shape_.d_k, dv = shape_.d_v;
    const size_t nqk = shape_.share_qk ? 1 : std::max<size_t>(1, shape_.levels);
    const float bound = 1.0f / std::sqrt(static_cast<float>(d));
    for (size_t l = 0; l < nqk; ++l) {
      const std::string sfx = l == 0 ? "" : "_l" + std::to_string(l);
      gf::Tensor wq({d, dk}), wk({d, dk});
      rng.fill_uniform(wq, -bound, bound);
      rng.fill_uniform(wk, -bound, bound);
      w_q_.push_back(register_parameter("w_q" + sfx, wq));
      b_q_.push_back(register_parameter("b_q" + sfx, gf::Tensor({dk}, 0.0f)));
      w_k_.push_back(register_parameter("w_k" + sfx, wk));
      b_k_.push_back(register_parameter("b_k" + sfx, gf::Tensor({dk}, 0.0f)));
    }
    gf::Tensor wv({d, dv});
    rng.fill_uniform(wv, -bound, bound);
    w_v_ = register_parameter("w_v", wv);
    b_v_ = register_parameter("b_v", gf::Tensor({dv}, 0.0f));
    // Like torch's Conv1d default: uniform(+-1/sqrt(kernel)).
    gf::Tensor cw({dv, kernel_});
    const float cb = 1.0f / std::sqrt(static_cast<float>(kernel_));
    rng.fill_uniform(cw, -cb, cb);
    conv_w_ = register_parameter("conv_w", cw);
    conv_b_ = register_parameter("conv_b", gf::Tensor({dv}, 0.0f));
    beta_ = register_parameter("beta", gf::Tensor({1}, 0.0f));
  }

  Var forward(const gf::HeadInput& in) override {
    const size_t L = std::min(shape_.levels, in.levels.size());
    std::vector<Var> q, k;
    q.reserve(L);
    k.reserve(L);
    for (size_t l = 0; l < L; ++l) {
      const size_t p = shape_.share_qk ? 0 : l;
      q.push_back(ops::linear(in.levels[l], w_q_[p], &b_q_[p]));
      k.push_back(ops::linear(in.levels[l], w_k_[p], &b_k_[p]));
    }
    Var v = ops::linear(in.levels[0], w_v_, &b_v_);
    Var att = in.attend(q, k, v);
    Var conv = ops::depthwise_conv1d_causal(v, conv_w_, &conv_b_, 1);
    // g * att + (1 - g) * conv = conv + g * (att - conv)
    Var g = ops::sigmoid(beta_);
    return ops::add(conv, ops::mul(ops::sub(att, conv), g));
  }

  const Var* w_q(size_t level) const override {
    return level < w_q_.size() ? &w_q_[level] : (shape_.share_qk ? &w_q_[0] : nullptr);
  }
  const Var* w_k(size_t level) const override {
    return level < w_k_.size() ? &w_k_[level] : (shape_.share_qk ? &w_k_[0] : nullptr);
  }
  const Var* w_v() const override { return &w_v_; }

  void initialize(const gf::HeadInit& init, gf::Rng& rng) override {
    const size_t d = shape_.d_model, dk = shape_.d_k;
    const float qk_std = 1.0f / std::sqrt(static_cast<float>(d));  // W_Q, W_K ~ N(0, 1/d)
    for (size_t l = 0; l < w_q_.size(); ++l) {
      rng.fill_normal(w_q_[l].value(), qk_std);
      rng.fill_normal(w_k_[l].value(), qk_std);
      b_q_[l].value().zero();
      b_k_[l].value().zero();
    }
    if (init.mode == "directed" && init.direction.size() == d) {
      // The new head's first query column looks along the direction it was grown for.
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
    const float cb = 1.0f / std::sqrt(static_cast<float>(kernel_));
    rng.fill_uniform(conv_w_.value(), -cb, cb);
    conv_b_.value().zero();
    beta_.value().zero();  // both terms start at weight 1/2
  }

  std::map<std::string, double> diagnostics() const override {
    const double beta = beta_.value()[0];
    return {{"beta", beta}, {"gate", 1.0 / (1.0 + std::exp(-beta))}};
  }

 private:
  size_t kernel_;
  std::vector<Var> w_q_, b_q_, w_k_, b_k_;
  Var w_v_, b_v_, conv_w_, conv_b_, beta_;
};

void register_hybrid_conv(gf::Registry& r) {
  gf::OptionSpecs specs{{"kernel",
                         gf::OptType::Int,
                         "3",
                         "kernel of the causal depthwise convolution of V",
                         1,
                         64,
                         {}}};
  r.add_head({"hybrid_conv",
              "attention mixed with a causal depthwise convolution of V by a learned "
              "sigmoid(beta) per head (HKT)",
              specs},
             [](const gf::Options& o, const gf::HeadBuild& b) {
               return std::unique_ptr<gf::Head>(new HybridConvHead(o, b));
             });
}

}  // namespace

GROWFORMER_PLUGIN("head_hybrid_conv", "0.1.0", register_hybrid_conv)
