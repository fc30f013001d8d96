// attention `mha` (standard multi-head scaled dot-product attention) and head
// `dot_product` (per-level query/key projections and a value projection).
#include <growformer/fields.hpp>
#include <growformer/multihead.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>
#include <growformer/projections.hpp>

#include <cmath>
#include <string>

namespace {

using namespace gf;

class DotProductHead : public Head {
 public:
  DotProductHead(const Options&, const HeadBuild& b)
      : Head(b.shape), proj_(*this, b.shape, *b.rng) {}

  Var forward(const HeadInput& in) override {
    QkvProjections::Projected p = proj_.project(in);
    return in.attend(p.q, p.k, p.v);
  }

  const Var* w_q(size_t level) const override { return proj_.w_q(level); }
  const Var* w_k(size_t level) const override { return proj_.w_k(level); }
  const Var* w_v() const override { return proj_.w_v(); }
  const QkvProjections* projections() const override { return &proj_; }
  void initialize(const HeadInit& init, Rng& rng) override { proj_.initialize(init, rng); }
  // nothing beyond the projections, which the block counts
  WorkCount step_work(size_t, size_t) const override { return WorkCount::of({}); }

 private:
  QkvProjections proj_;
};

/// The options of `mha`, each declared once: the multi-head ones, then `causal`.
struct MhaSettings {
  MultiHeadSettings common;
  bool causal = false;
  static const OptionTable<MhaSettings>& table() {
    using S = MhaSettings;
    static const auto t =
        OptionTable<S>()
            .include(MultiHeadSettings::table(), &S::common)
            .add("causal", &S::causal, "false", "mask future positions (decoder-style)");
    return t;
  }
};

class MhaBlock : public MultiHeadBlock {
 public:
  MhaBlock(const Options& opts, const AttentionBuild& b)
      : MhaBlock(opts, b, MhaSettings::table().read(opts)) {}
  MhaBlock(const Options& opts, const AttentionBuild& b, const MhaSettings& s)
      : MultiHeadBlock(opts, s.common, b, 1, false), causal_(s.causal) {}

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

  // How the scores of one training step are counted (ops::attention; docs/results/speed.md,
  // "The roofline of a step"): H heads, B x T, n = B T, qw = H d_k, vw = H d_v, B H T^2 scores.
  //   products  2 B H T^2 (d_k + d_v) forward (Q K^T, P V); 2 B H T^2 (3 d_k + 2 d_v) backward:
  //             the scores recomputed (d_k), dV += P^T dO (d_v), dP = dO V^T (d_v), dQ += dS K
  //             (d_k), dK += dS^T Q (d_k)
  //   exps      B H T^2 in the forward softmax and B H T^2 again backward, which recomputes the
  //             probabilities from the kept row log-sum-exp
  //   in cache  the forward's row maxima (B H T^2), the backward's softmax row pass (B H T^2)
  //   memory    forward K^T 2 n qw; attention q, K^T, v in, o out: n (2 qw + 2 vw). Backward
  //             n (5 qw + 6 vw) (Q, K^T, K, V, O, dO in, V^T made, dQ, dK, dV out).
  // Causal attention is not counted: its tiles see fewer keys.
  WorkCount attend_work(size_t batch, size_t seq) const override {
    if (causal_) return WorkCount::none("causal attention is not counted");
    const double B = static_cast<double>(batch), T = static_cast<double>(seq);
    const double H = static_cast<double>(num_heads()), n = B * T;
    const double dk = static_cast<double>(head_shape().d_k),
                 dv = static_cast<double>(head_shape().d_v);
    const double qw = H * dk, vw = H * dv, scores = B * H * T * T;
    kernels::StepWork w;
    w.product_flops = 2 * scores * (dk + dv) + 2 * scores * (3 * dk + 2 * dv);
    w.exp_elements = 2 * scores;
    w.max_elements = scores;
    w.softmax_grad_elements = scores;
    w.memory_bytes = 4.0 * ((2 * n * qw + n * (2 * qw + 2 * vw)) + n * (5 * qw + 6 * vw));
    return WorkCount::of(w);
  }

 private:
  bool causal_;
};

void register_components(Registry& r) {
  r.add_attention(
      {"mha", "standard multi-head scaled dot-product attention", MhaSettings::table().specs()},
      [](const Options& o, const AttentionBuild& b) { return std::make_unique<MhaBlock>(o, b); });
  r.add_head(
      {"dot_product", "query/key projections per level and a value projection", {}},
      [](const Options& o, const HeadBuild& b) { return std::make_unique<DotProductHead>(o, b); });
}

}  // namespace

GROWFORMER_PLUGIN("attn_mha", "0.1.0", register_components)
