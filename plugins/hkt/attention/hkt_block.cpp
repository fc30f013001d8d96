// `hkt`: Hierarchical Kernel Transformer attention (Cirrincione 2026, see
// shared/spec/HKT.md). Levels are made by causal depthwise-separable
// downsampling; each head's per-level scores are fused with softmax weights
// lambda (static or input-dependent) through the index map up(S_l)[i, j] =
// S_l[i / s^l, j / s^l], inside one fused op (<growformer/hkt/attend.hpp>).
#include <cmath>
#include <growformer/fields.hpp>
#include <growformer/multihead.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/linalg.hpp>

#include <growformer/hkt/analysis.hpp>
#include <growformer/hkt/attend.hpp>

namespace {

using gf::Var;
namespace ops = gf::ops;

/// The options of `hkt`, each declared once: the multi-head ones, then the levels' own.
struct HktSettings {
  gf::MultiHeadSettings common;
  size_t levels = 3, stride = 2, down_kernel = 3;
  bool share_qk = false;
  bool input_fusion = false;
  bool causal = false;
  static const gf::OptionTable<HktSettings>& table() {
    using S = HktSettings;
    static const auto t =
        gf::OptionTable<S>()
            .include(gf::MultiHeadSettings::table(), &S::common)
            .add("levels", &S::levels, "3", "number of score resolutions L (level 0 = input)", 1, 8)
            .add("stride", &S::stride, "2", "downsampling stride s between levels", 2, 16)
            .add("down_kernel", &S::down_kernel, "3",
                 "kernel of the causal depthwise convolution that makes each coarser level", 1, 16)
            .add("share_qk", &S::share_qk, "false",
                 "heads use one W_Q/W_K for every level instead of one per level")
            .choice(
                "fusion", &S::input_fusion, "static",
                "level weights: static = softmax(logits); input = softmax(W meanpool(X) + b) per "
                "sample",
                {{"static", false}, {"input", true}})
            .add("causal", &S::causal, "false",
                 "mask future keys; coarse scores only where the whole key block is in the past");
    return t;
  }
};

class HktBlock : public gf::MultiHeadBlock {
 public:
  HktBlock(const gf::Options& o, const gf::AttentionBuild& b)
      : HktBlock(o, b, HktSettings::table().read(o)) {}
  HktBlock(const gf::Options& o, const gf::AttentionBuild& b, const HktSettings& s)
      : gf::MultiHeadBlock(o, s.common, b, s.levels, s.share_qk),
        levels_(s.levels),
        stride_(s.stride),
        kernel_(s.down_kernel),
        input_fusion_(s.input_fusion),
        causal_(s.causal) {
    if (input_fusion_ && causal_)
      o.fail("fusion",
             "`fusion: input` pools the whole sequence, so with `causal: true` every output would "
             "see future tokens; use `fusion: static` for causal models");
    const size_t d = b.d_model;
    gf::Rng local(0, "hkt");
    gf::Rng& rng = b.rng ? *b.rng : local;
    for (size_t l = 1; l < levels_; ++l) {
      const std::string p = "down." + std::to_string(l) + ".";
      gf::Tensor dw({d, kernel_});
      rng.fill_normal(dw, 1.0f / std::sqrt(static_cast<float>(kernel_)));
      gf::Tensor pw({d, d});
      rng.fill_normal(pw, 1.0f / std::sqrt(static_cast<float>(d)));
      down_.push_back({register_parameter(p + "dw", dw),
                       register_parameter(p + "dw_b", gf::Tensor({d}, 0.0f)),
                       register_parameter(p + "pw", pw),
                       register_parameter(p + "pw_b", gf::Tensor({d}, 0.0f))});
    }
    if (input_fusion_) {
      // Zero weights: every sample starts with uniform lambda, like the static logits.
      fusion_w_ = register_parameter("fusion.w", gf::Tensor({d, levels_}, 0.0f));
      fusion_b_ = register_parameter("fusion.b", gf::Tensor({levels_}, 0.0f));
    } else {
      fusion_logits_ = register_parameter("fusion.logits", gf::Tensor({levels_}, 0.0f));
    }
  }

  std::map<std::string, std::vector<double>> diagnostics() const override {
    std::map<std::string, std::vector<double>> m;
    m["lambda"] = last_lambda_.empty() && !input_fusion_ ? static_lambda() : last_lambda_;
    return m;
  }

  std::string analyze_json(const gf::Tensor* probe,
                           const std::vector<uint8_t>* valid) const override;

 private:
  struct ProbeScores;
  nlohmann::json bilinear_json(const std::vector<gf::HeadInfo>& heads, bool& all_psd) const;
  ProbeScores catch_projections(const std::vector<Var>& lv, const std::vector<uint8_t>* valid,
                                size_t B, size_t T) const;
  nlohmann::json kurtosis_json(ProbeScores& ps) const;
  nlohmann::json gram_rank_json(const ProbeScores& ps, const std::vector<double>& lambda) const;

 public:
 protected:
  std::vector<Var> make_levels(const Var& x, const gf::ForwardContext& ctx) override {
    std::vector<Var> lv = build_levels(x);
    logits_ = fusion_logits(x, ctx.key_valid);
    // Batch mean of lambda, for diagnostics().
    last_lambda_ = mean_lambda(logits_.value());
    return lv;
  }

  Var attend(const std::vector<Var>& q, const std::vector<Var>& k, const Var& v,
             const gf::ForwardContext& ctx) override {
    gf_hkt::FusedSpec spec;
    spec.stride = stride_;
    spec.causal = causal_;
    spec.key_valid = ctx.key_valid;
    spec.scale = 1.0f / std::sqrt(static_cast<float>(head_shape().d_k));
    return gf_hkt::hkt_attend(q, k, v, logits_, spec);
  }

  bool causal() const override { return causal_; }

  std::vector<size_t> level_lengths(size_t seq) const override {
    std::vector<size_t> t;
    for (size_t l = 0; l < levels_; ++l) t.push_back(gf_hkt::level_length(seq, stride_, l));
    return t;
  }

  // How HKT's work in one training step is counted beside the base's (the projections of every
  // level, the output maps) and the heads' own (hybrid_conv: Head::step_work); docs/results/
  // speed.md, "The roofline of a step". B x T, H heads, L levels of T_l = ceil(T / 2^l) rows,
  // n_l = B T_l, qw = H d_k, vw = H d_v, P_l = B H T_l^2 level-l scores.
  // make_levels, each level l > 0 (levels_work):
  //   products  the pointwise map 2 n_l d^2 forward, twice it backward
  //   memory    the strided depthwise convolution n_(l-1) d + n_l d forward, 2 n_(l-1) d + 2 n_l d
  //             backward (dX: dY in, dX out; dW: X, dY in); the pointwise map 2 n_l d forward,
  //             4 n_l d backward. The convolution's K multiply-adds an output are element-wise
  //             work, counted as its memory passes (as a layer norm's arithmetic is).
  //   fusion    static: the mean lambda's L exps; input: also the masked mean pool, n d forward
  //             and n d backward, its map 2 B d L forward, twice it backward, and B L exps.
  // the fused op of every head (gf_hkt::hkt_attend), no padding:
  //   products  2 B H d_k sum_l T_l^2 + 2 B H T^2 d_v forward (each level's scores, P V);
  //             6 B H d_k sum_l T_l^2 + 4 B H T^2 d_v backward: every level's scores
  //             recomputed, G_l = dS_l k_l, dk_l += c dS_l^T q_l; dV += P^T dO, dP = dO V^T
  //   exps      P_0 forward, P_0 backward (recomputed from the kept row log-sum-exp); lambda's
  //             L a sample in every head's call, B H L
  //   in cache  the row maxima P_0 forward (the coarse row added in the same pass); the softmax
  //             row pass P_0 backward; adds: the coarse grids summed coarse to fine, C_l = S_l +
  //             up(C_(l+1)) for 0 < l < L - 1, forward and again backward; dS folded into dS_1
  //             (P_0) and dS_(l-1) into dS_l (P_(l-1), 1 < l < L); d lambda's q_l . G_l and
  //             dq_l += c G_l, 2 B H d_k T_l a level
  //   memory    forward per level K_l^T made 2 n_l qw, q_l and K_l^T in 2 n_l qw; v in, o out
  //             2 n vw. Backward per level 5 n_l qw (Q_l, K_l^T, K_l in, dQ_l, dK_l out) and
  //             6 n vw (V, O, dO in, V^T made, dV out), as for mha's scores.
  // Counted at stride 2 without the causal mask (other strides and causal tiles take other
  // passes over the rows).
  gf::WorkCount attend_work(size_t batch, size_t seq) const override {
    if (causal_) return gf::WorkCount::none("causal hkt is not counted");
    if (stride_ != 2) return gf::WorkCount::none("hkt is counted at stride 2 only");
    const double B = static_cast<double>(batch), T = static_cast<double>(seq);
    const double H = static_cast<double>(num_heads()), L = static_cast<double>(levels_);
    const double dk = static_cast<double>(head_shape().d_k),
                 dv = static_cast<double>(head_shape().d_v);
    const double n = B * T, qw = H * dk, vw = H * dv, P0 = B * H * T * T;
    gf::kernels::StepWork w = levels_work(batch, seq);
    const std::vector<size_t> t = level_lengths(seq);
    double sum_t2 = 0, floats = 2 * n * vw + 6 * n * vw;
    for (size_t l = 0; l < levels_; ++l) {
      const double tl = static_cast<double>(t[l]), nl = B * tl, pl = B * H * tl * tl;
      sum_t2 += tl * tl;
      floats += 4 * nl * qw + 5 * nl * qw;
      w.add_elements += 2 * B * H * dk * tl;                   // d lambda's dot, dq's axpy
      if (l > 0 && l + 1 < levels_) w.add_elements += 3 * pl;  // C_l twice, dS_l folded
    }
    if (levels_ > 1) w.add_elements += P0;  // dS into dS_1
    w.product_flops += 8 * B * H * dk * sum_t2 + 6 * P0 * dv;
    w.exp_elements += 2 * P0 + B * H * L;
    w.max_elements += P0;
    w.softmax_grad_elements += P0;
    w.memory_bytes += 4.0 * floats;
    return gf::WorkCount::of(w);
  }

  double score_cost_ratio() const override {
    double r = 0, level = 1;
    for (size_t l = 0; l < levels_; ++l, level /= static_cast<double>(stride_ * stride_))
      r += level;
    return r;
  }
  std::string block_name() const override {
    std::ostringstream s;
    s << "hkt(L=" << levels_ << ", s=" << stride_
      << ", fusion=" << (input_fusion_ ? "input" : "static") << (causal_ ? ", causal" : "") << ")";
    return s.str();
  }

 private:
  struct Down {
    Var dw, dw_b, pw, pw_b;
  };

  // {x, x_1, ..., x_{L-1}}: x_l = pointwise(depthwise_causal(x_{l-1}, stride)).
  std::vector<Var> build_levels(const Var& x) const {
    std::vector<Var> lv{x};
    for (const Down& dn : down_) {
      Var y = ops::depthwise_conv1d_causal(lv.back(), dn.dw, &dn.dw_b, stride_);
      lv.push_back(ops::linear(y, dn.pw, &dn.pw_b));
    }
    return lv;
  }

  // The work of make_levels in one training step (attend_work says how it is counted).
  gf::kernels::StepWork levels_work(size_t batch, size_t seq) const {
    const double B = static_cast<double>(batch), d = static_cast<double>(head_shape().d_model);
    const double L = static_cast<double>(levels_), n = B * static_cast<double>(seq);
    const std::vector<size_t> t = level_lengths(seq);
    gf::kernels::StepWork w;
    double floats = 0;
    for (size_t l = 1; l < levels_; ++l) {
      const double prev = B * static_cast<double>(t[l - 1]), nl = B * static_cast<double>(t[l]);
      w.product_flops += 3 * (2 * nl * d * d);
      floats += (prev * d + nl * d) + (2 * prev * d + 2 * nl * d) + 2 * nl * d + 4 * nl * d;
    }
    w.exp_elements = input_fusion_ ? B * L : L;
    if (input_fusion_) {
      w.product_flops += 3 * (2 * B * d * L);
      floats += 2 * n * d;
    }
    w.memory_bytes = 4.0 * floats;
    return w;
  }

  // (L) static logits, or (B, L) from the masked mean of the block input.
  Var fusion_logits(const Var& x, const std::vector<uint8_t>* key_valid) const {
    if (!input_fusion_) return fusion_logits_;
    std::vector<uint8_t> all;
    if (!key_valid) {
      all.assign(x.dim(0) * x.dim(1), 1);
      key_valid = &all;
    }
    return ops::linear(ops::masked_mean_pool(x, *key_valid), fusion_w_, &fusion_b_);
  }

  std::vector<double> mean_lambda(const gf::Tensor& logits) const {
    const size_t L = levels_;
    const size_t rows = logits.size() / L;
    std::vector<double> mean(L, 0.0);
    std::vector<float> lam(L);
    for (size_t r = 0; r < rows; ++r) {
      gf_hkt::detail::softmax_logits(logits.data() + r * L, L, lam.data());
      for (size_t l = 0; l < L; ++l) mean[l] += lam[l] / static_cast<double>(rows);
    }
    return mean;
  }

  std::vector<double> static_lambda() const {
    return input_fusion_ ? std::vector<double>{} : mean_lambda(fusion_logits_.value());
  }

  size_t levels_, stride_, kernel_;
  bool input_fusion_, causal_;
  std::vector<Down> down_;
  Var fusion_logits_, fusion_w_, fusion_b_;
  Var logits_;  // of the current forward, read by attend()
  std::vector<double> last_lambda_;
};

// The level-l dot products q_I . k_J (unscaled, in double) of sample B's first N level-l tokens,
// row-major N x N; with CAUSAL the pairs J > I are left 0.
std::vector<double> level_dots(const Var& q, const Var& k, size_t b, size_t n, bool causal) {
  const size_t Tl = q.dim(1), dq = q.dim(2);
  std::vector<double> out(n * n, 0.0);
  for (size_t I = 0; I < n; ++I)
    for (size_t J = 0; J < n; ++J) {
      if (causal && J > I) continue;  // the pairs some query of block I uses
      const float* qi = q.value().data() + (b * Tl + I) * dq;
      const float* kj = k.value().data() + (b * Tl + J) * dq;
      double s = 0.0;
      for (size_t c = 0; c < dq; ++c) s += static_cast<double>(qi[c]) * kj[c];
      out[I * n + J] = s;
    }
  return out;
}

// The level-l scores q_I . k_J * SCALE of every sample b and every pair of its first
// ceil(LEN[b] / BLOCK) level-l tokens (J <= I only when CAUSAL), in the order (b, I, J); the
// first sample's dot products (level_dots) go to FIRST.
std::vector<double> level_scores(const Var& q, const Var& k, const std::vector<size_t>& len,
                                 size_t block, float scale, bool causal,
                                 std::vector<double>& first) {
  std::vector<double> out;
  const size_t Tl = q.dim(1);
  for (size_t b = 0; b < len.size(); ++b) {
    const size_t n = std::min(Tl, (len[b] + block - 1) / block);
    std::vector<double> dots = level_dots(q, k, b, n, causal);
    for (size_t I = 0; I < n; ++I)
      for (size_t J = 0; J < n; ++J)
        if (!(causal && J > I)) out.push_back(dots[I * n + J] * scale);
    if (b == 0) first = std::move(dots);
  }
  return out;
}

/// Each head's own q_l, k_l on the probe (biases, shared weights and all) and what the score
/// statistics read of them.
struct HktBlock::ProbeScores {
  std::vector<std::vector<Var>> q, k;  // per head, per level
  std::vector<size_t> len;             // valid tokens per sample (right padding)
  std::vector<std::vector<std::vector<double>>> first_dots;  // per level, per head: sample 0's dots
  float scale = 1.0f;
};

std::string HktBlock::analyze_json(const gf::Tensor* probe,
                                   const std::vector<uint8_t>* valid) const {
  using nlohmann::json;
  gf::NoGradGuard no_grad;
  const auto heads_info = heads();
  json j;
  j["block"] = block_name();
  j["levels"] = levels_;
  j["stride"] = stride_;
  j["fusion"] = input_fusion_ ? "input" : "static";
  j["bilinear_form"] =
      "M_l = W_Q^(l) W_K^(l)T (d_model x d_model) of each head; ratios are "
      "||M_a||_F / ||M||_F averaged over heads (per_head lists each head)";
  bool all_psd = true;
  j["bilinear"] = bilinear_json(heads_info, all_psd);

  // ---- fusion weights ----
  std::vector<double> lambda;
  std::vector<Var> lv;
  std::vector<uint8_t> all_valid;
  if (probe && probe->defined()) {
    Var x = gf::constant(*probe);
    if (!valid) {
      all_valid.assign(probe->dim(0) * probe->dim(1), 1);
      valid = &all_valid;
    }
    lv = build_levels(x);
    lambda = mean_lambda(fusion_logits(x, valid).value());
  } else if (!input_fusion_) {
    lambda = static_lambda();
  }
  bool lambda_nonneg = !lambda.empty();
  for (double v : lambda) lambda_nonneg = lambda_nonneg && v >= 0.0;
  j["lambda"] = lambda;
  j["lambda_source"] = input_fusion_ ? "mean of softmax(W pool(X) + b) over the probe batch"
                                     : "softmax(fusion.logits)";
  j["psd_condition"] = {{"all_sym_parts_psd", all_psd},
                        {"lambda_nonnegative", lambda_nonneg},
                        {"holds", all_psd && lambda_nonneg},
                        {"tolerance", "min eigenvalue >= -1e-6 * max(1, ||M||_F)"}};

  // ---- the probe's scores: kurtosis per level, rank of the fused score matrix ----
  if (!lv.empty()) {
    ProbeScores ps = catch_projections(lv, valid, probe->dim(0), probe->dim(1));
    j["score_kurtosis"] = kurtosis_json(ps);
    j["score_kurtosis_note"] =
        "q_l.k_l/sqrt(d_k) (each head's own projections) over valid (and, if causal, past) level-l "
        "token pairs of the probe batch. excess_kurtosis = m4/m2^2 - 3 pooled over heads (0 for a "
        "Gaussian); pearson_kurtosis = m4/m2^2 (3 for a Gaussian); mardia_kurtosis: Mardia's b_2,p "
        "of the vector of a pair's scores across the heads (p = heads; p (p + 2) for a Gaussian)";
    j["gram_rank"] = gram_rank_json(ps, lambda);
  } else {
    j["score_kurtosis"] = nullptr;
    j["gram_rank"] = nullptr;
  }

  // ---- heads ----
  json hj = json::array();
  for (const auto& h : heads_info) {
    json e;
    e["id"] = h.id;
    for (const auto& kv : h.head->diagnostics()) e[kv.first] = kv.second;
    hj.push_back(e);
  }
  j["heads"] = hj;
  return j.dump();
}

/// Per level, the antisymmetric share and the smallest eigenvalue of the symmetric part of
/// each head's bilinear form; ALL_PSD is cleared when a symmetric part is not PSD.
nlohmann::json HktBlock::bilinear_json(const std::vector<gf::HeadInfo>& heads_info,
                                       bool& all_psd) const {
  using nlohmann::json;
  json levels = json::array();
  const double tol = 1e-6;
  for (size_t l = 0; l < levels_; ++l) {
    json lj;
    lj["level"] = l;
    json ratios = json::array(), mins = json::array();
    double ratio_sum = 0.0, min_all = INFINITY;
    size_t n = 0;
    for (const auto& h : heads_info) {
      const Var* wq = h.head->w_q(l);
      const Var* wk = h.head->w_k(l);
      if (!wq || !wk) continue;
      auto st = gf::linalg::bilinear_stats(gf::linalg::bilinear_form(wq->value(), &wk->value()));
      ratios.push_back(st.antisym_ratio);
      mins.push_back(st.min_eig_sym);
      ratio_sum += st.antisym_ratio;
      min_all = std::min(min_all, st.min_eig_sym);
      // PSD up to rounding relative to the form's size.
      if (st.min_eig_sym < -tol * std::max(1.0, st.norm)) all_psd = false;
      ++n;
    }
    lj["antisym_ratio_mean"] = n ? json(ratio_sum / n) : json(nullptr);
    lj["antisym_ratio_per_head"] = ratios;
    lj["min_eig_sym_per_head"] = mins;
    lj["min_eig_sym"] = n ? json(min_all) : json(nullptr);
    if (!n) all_psd = false;
    levels.push_back(lj);
  }
  return levels;
}

/// Each head's q_l, k_l on the probe's levels LV, caught at its attend call.
HktBlock::ProbeScores HktBlock::catch_projections(const std::vector<Var>& lv,
                                                  const std::vector<uint8_t>* valid, size_t B,
                                                  size_t T) const {
  ProbeScores ps;
  ps.scale = 1.0f / std::sqrt(static_cast<float>(head_shape().d_k));
  gf::ForwardContext ctx;
  ctx.key_valid = valid;
  for (const auto& h : heads()) {
    gf::AttendFn catcher = [&](const std::vector<Var>& q, const std::vector<Var>& k, const Var& v) {
      ps.q.push_back(q);
      ps.k.push_back(k);
      return v;
    };
    h.head->forward(gf::HeadInput{lv, catcher, ctx});
  }
  ps.len.assign(B, 0);
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t) ps.len[b] += (*valid)[b * T + t] ? 1 : 0;
  return ps;
}

/// Per level, the kurtosis of the heads' scores pooled (excess, Pearson) and across heads
/// (Mardia); keeps the first sample's dot products for gram_rank_json.
nlohmann::json HktBlock::kurtosis_json(ProbeScores& ps) const {
  using nlohmann::json;
  json kj = json::array();
  ps.first_dots.assign(levels_, {});
  size_t block = 1;
  for (size_t l = 0; l < levels_; ++l, block *= stride_) {
    // per head, the level-l scores of every valid (and, if causal, past) pair in one order
    std::vector<std::vector<double>> per_head;
    ps.first_dots[l].resize(ps.q.size());
    for (size_t h = 0; h < ps.q.size(); ++h) {
      if (l >= ps.q[h].size()) continue;
      per_head.push_back(level_scores(ps.q[h][l], ps.k[h][l], ps.len, block, ps.scale, causal_,
                                      ps.first_dots[l][h]));
    }
    std::vector<double> pooled;
    for (auto& v : per_head) pooled.insert(pooled.end(), v.begin(), v.end());
    json e;
    e["level"] = l;
    e["scores"] = pooled.size();
    const double kurt = gf_hkt::excess_kurtosis(pooled);
    e["excess_kurtosis"] = std::isnan(kurt) ? json(nullptr) : json(kurt);
    e["pearson_kurtosis"] = std::isnan(kurt) ? json(nullptr) : json(kurt + 3.0);
    // Mardia: each token pair is one sample, the vector of its scores across heads
    if (per_head.size() >= 2) {
      std::vector<std::vector<double>> samples(per_head[0].size(),
                                               std::vector<double>(per_head.size()));
      for (size_t h = 0; h < per_head.size(); ++h)
        for (size_t i = 0; i < samples.size(); ++i) samples[i][h] = per_head[h][i];
      size_t rank = 0;
      const double b2 = gf_hkt::mardia_kurtosis(samples, &rank);
      e["mardia_kurtosis"] = std::isnan(b2) ? json(nullptr) : json(b2);
      e["mardia_normal_expectation"] = rank * (rank + 2);
      e["mardia_dimension"] = rank;
    }
    kj.push_back(e);
  }
  return kj;
}

/// Rank of the hierarchical Gram (fused score) matrix of the probe's first sequence, per head:
/// S = sum_l lambda_l up(S_l) with rank(up(S_l)) <= rank(S_l) <= min(T_l, d_k). Reads the
/// level scores kurtosis_json computed (the first sample's dot products), not again.
nlohmann::json HktBlock::gram_rank_json(const ProbeScores& ps,
                                        const std::vector<double>& lambda) const {
  using nlohmann::json;
  const size_t dk = head_shape().d_k;
  const size_t n = std::min<size_t>(ps.len[0], 256);
  json gj = json::array();
  size_t bound = 0, tl = n;
  for (size_t l = 0; l < levels_; ++l, tl = (tl + stride_ - 1) / stride_) bound += std::min(tl, dk);
  for (size_t h = 0; h < ps.q.size(); ++h) {
    gf::linalg::Mat g(n);
    size_t blk = 1;
    for (size_t l = 0; l < ps.q[h].size() && l < lambda.size(); ++l, blk *= stride_) {
      const std::vector<double>& dots = ps.first_dots[l][h];
      const size_t n0 = static_cast<size_t>(std::sqrt(double(dots.size())) + 0.5);
      for (size_t a = 0; a < n; ++a)
        for (size_t c = 0; c < n; ++c) {
          if (causal_ && c > a) continue;
          g(a, c) += lambda[l] * dots[(a / blk) * n0 + c / blk] * ps.scale;
        }
    }
    gj.push_back(gf_hkt::numerical_rank(g));
  }
  return {{"tokens", n},
          {"rank_per_head", gj},
          {"bound", std::min(bound, n)},
          {"note",
           "numerical rank (singular values > 1e-5 of the largest) of the fused "
           "score matrix sum_l lambda_l up(S_l) of the probe's first sequence "
           "(its first <= 256 tokens; future pairs zero if causal); bound = "
           "min(T, sum_l min(T_l, d_k)) since up(S_l) has rank <= min(T_l, d_k)"}};
}

void register_hkt(gf::Registry& r) {
  r.add_attention({"hkt",
                   "Hierarchical Kernel Transformer: multi-resolution scores fused by learned "
                   "weights (Cirrincione 2026)",
                   HktSettings::table().specs()},
                  [](const gf::Options& o, const gf::AttentionBuild& b) {
                    return std::unique_ptr<gf::AttentionBlock>(new HktBlock(o, b));
                  });
}

}  // namespace

GROWFORMER_PLUGIN("attn_hkt", "0.1.0", register_hkt)
