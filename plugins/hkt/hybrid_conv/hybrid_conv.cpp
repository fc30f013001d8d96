// `hybrid_conv` head (HKT, Cirrincione 2026): a learned per-head gate between
// attention and a causal depthwise convolution of the value stream,
//   Y = sigmoid(beta) * attend(Q, K, V) + (1 - sigmoid(beta)) * conv_k(V),  V = X W_V.
// beta starts at 0 (both terms weigh 1/2). With beta -> +inf the head is a plain
// dot-product head; with beta -> -inf it is the convolution alone.
#include <algorithm>
#include <cmath>
#include <growformer/attention.hpp>
#include <growformer/fields.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>
#include <growformer/projections.hpp>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using gf::Var;
namespace ops = gf::ops;

/// The options of `hybrid_conv`, each declared once.
struct HybridConvSettings {
  size_t kernel = 3;
  static const gf::OptionTable<HybridConvSettings>& table() {
    static const auto t = gf::OptionTable<HybridConvSettings>().add(
        "kernel", &HybridConvSettings::kernel, "3",
        "kernel of the causal depthwise convolution of V", 1, 64);
    return t;
  }
};

class HybridConvHead : public gf::Head {
 public:
  // Projections exactly like the `dot_product` head (the same core part: names, biases and
  // initialisation), so that beta -> +inf reproduces it weight for weight.
  HybridConvHead(const HybridConvSettings& s, const gf::HeadBuild& b)
      : gf::Head(b.shape), kernel_(s.kernel), proj_(*this, b.shape, *b.rng) {
    const size_t dv = shape_.d_v;
    // Like torch's Conv1d default: uniform(+-1/sqrt(kernel)).
    gf::Tensor cw({dv, kernel_});
    const float cb = 1.0f / std::sqrt(static_cast<float>(kernel_));
    b.rng->fill_uniform(cw, -cb, cb);
    conv_w_ = register_parameter("conv_w", cw);
    conv_b_ = register_parameter("conv_b", gf::Tensor({dv}, 0.0f));
    beta_ = register_parameter("beta", gf::Tensor({1}, 0.0f));
  }

  Var forward(const gf::HeadInput& in) override {
    gf::QkvProjections::Projected p = proj_.project(in);
    Var att = in.attend(p.q, p.k, p.v);
    Var conv = ops::depthwise_conv1d_causal(p.v, conv_w_, &conv_b_, 1);
    // g * att + (1 - g) * conv = conv + g * (att - conv), in one pass
    return ops::lerp(conv, att, ops::sigmoid(beta_));
  }

  const Var* w_q(size_t level) const override { return proj_.w_q(level); }
  const Var* w_k(size_t level) const override { return proj_.w_k(level); }
  const Var* w_v() const override { return proj_.w_v(); }
  const gf::QkvProjections* projections() const override { return &proj_; }

  void initialize(const gf::HeadInit& init, gf::Rng& rng) override {
    proj_.initialize(init, rng);
    const float cb = 1.0f / std::sqrt(static_cast<float>(kernel_));
    rng.fill_uniform(conv_w_.value(), -cb, cb);
    conv_b_.value().zero();
    beta_.value().zero();  // both terms start at weight 1/2
  }

  // Its work in one training step beyond the projections and the block's scores (docs/
  // results/speed.md, "The roofline of a step"), n = B T rows of d_v: forward the convolution
  // of V (V in, out) 2 n d_v, the gate's sigmoid 1 exp, lerp 3 n d_v (both terms in, the
  // output); backward lerp 7 n d_v (dY in, d conv out; dY in, d att out; dY and both terms in
  // for d beta), the convolution 4 n d_v (dY in, dV out; V, dY in for its weights). Its K
  // multiply-adds an element are element-wise work, counted as these passes.
  gf::WorkCount step_work(size_t batch, size_t seq) const override {
    const double n = static_cast<double>(batch) * static_cast<double>(seq);
    gf::kernels::StepWork w;
    w.exp_elements = 1;
    w.memory_bytes = 4.0 * ((2 + 3) + (7 + 4)) * n * static_cast<double>(shape_.d_v);
    return gf::WorkCount::of(w);
  }

  std::map<std::string, double> diagnostics() const override {
    const double beta = beta_.value()[0];
    return {{"beta", beta}, {"gate", 1.0 / (1.0 + std::exp(-beta))}};
  }

 private:
  size_t kernel_;
  gf::QkvProjections proj_;
  Var conv_w_, conv_b_, beta_;
};

void register_hybrid_conv(gf::Registry& r) {
  r.add_head({"hybrid_conv",
              "attention mixed with a causal depthwise convolution of V by a learned "
              "sigmoid(beta) per head (HKT)",
              HybridConvSettings::table().specs()},
             [](const gf::Options& o, const gf::HeadBuild& b) {
               return std::unique_ptr<gf::Head>(
                   new HybridConvHead(HybridConvSettings::table().read(o), b));
             });
}

}  // namespace

GROWFORMER_PLUGIN("head_hybrid_conv", "0.1.0", register_hybrid_conv)
