// The causal depthwise convolution of the hybrid heads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "growformer/kernels.hpp"
#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

namespace {
// The taps of a causal depthwise convolution of width K and stride STRIDE over T input rows
// (To output rows): tap j of output row `to` reads input row to * stride - (K - 1) + j.
struct CausalTaps {
  size_t K, stride, T, To;
  // The output rows [lo, hi) whose tap j falls inside the input; the first reads input row in0.
  struct Span {
    size_t lo, hi, in0;
  };
  Span span(size_t j) const {
    const size_t back = K - 1 - j;
    Span sp{(back + stride - 1) / stride, T ? std::min(To, (T - 1 + back) / stride + 1) : 0, 0};
    if (sp.lo > sp.hi) sp.lo = sp.hi;
    sp.in0 = sp.lo * stride - back;
    return sp;
  }
};

// One sample's output Y (To x C) from its input X (T x C), WT the weights as (K, C): the bias
// (or zeros) in every row, then the taps in order, each one vector kernel over rows of C channels.
void conv_sample_forward(float* Y, const float* X, const float* wt, const float* bias,
                         const CausalTaps& taps, size_t C) {
  const size_t To = taps.To;
  if (!bias) {
    std::memset(Y, 0, To * C * sizeof(float));
  } else if (To) {  // the bias in every row: one row, then copies that double
    std::memcpy(Y, bias, C * sizeof(float));
    for (size_t done = 1; done < To;) {
      const size_t n = std::min(done, To - done);
      std::memcpy(Y + done * C, Y, n * C * sizeof(float));
      done += n;
    }
  }
  for (size_t j = 0; j < taps.K; ++j) {  // each output sums its taps in order
    const auto sp = taps.span(j);
    if (sp.lo < sp.hi)
      kernels::mul_add_rows(Y + sp.lo * C, C, X + sp.in0 * C, taps.stride * C, wt + j * C,
                            sp.hi - sp.lo, C);
  }
}

// gw (C x K) += sum_b sum_to G X over each tap's rows and gb (C) += the column sums of G, for
// G (B x To x C), X (B x T x C); either may be null. One partial sum per sample (over its rows in
// order) in parallel, then the samples in order: the same bits with any thread count.
void conv_param_grads(const float* X, const float* G, size_t B, size_t C, const CausalTaps& taps,
                      float* gw, float* gb) {
  const size_t K = taps.K, T = taps.T, To = taps.To, stride = taps.stride;
  std::vector<float> part(B * (K + 1) * C, 0.0f);
  parallel_for(B, [&](size_t b) {
    float* pb = part.data() + b * (K + 1) * C;
    if (gw)
      for (size_t j = 0; j < K; ++j) {
        const auto sp = taps.span(j);
        if (sp.lo < sp.hi)
          kernels::dot_rows(pb + j * C, G + (b * To + sp.lo) * C, C, X + (b * T + sp.in0) * C,
                            stride * C, sp.hi - sp.lo, C);
      }
    if (gb) {
      float* __restrict a = pb + K * C;
      for (size_t to = 0; to < To; ++to) {
        const float* __restrict gr = G + (b * To + to) * C;
        for (size_t c = 0; c < C; ++c) a[c] += gr[c];
      }
    }
  });
  std::vector<float> sum((K + 1) * C, 0.0f);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[b * (K + 1) * C + i];
  for (size_t c = 0; c < C; ++c) {
    if (gw)
      for (size_t j = 0; j < K; ++j) gw[c * K + j] += sum[j * C + c];
    if (gb) gb[c] += sum[K * C + c];
  }
}
}  // namespace

Var depthwise_conv1d_causal(const Var& x, const Var& w, const Var* bias, size_t stride) {
  if (x.shape().size() != 3) shape_error("depthwise_conv1d_causal", "x must be (B, T, C)");
  size_t B = x.dim(0), T = x.dim(1), C = x.dim(2), K = w.dim(1);
  if (w.dim(0) != C) shape_error("depthwise_conv1d_causal", "weight must be (C, k)");
  if (stride == 0) shape_error("depthwise_conv1d_causal", "stride must be >= 1");
  const CausalTaps taps{K, stride, T, (T + stride - 1) / stride};
  const size_t To = taps.To;
  Tensor y = Tensor::empty({B, To, C});
  const float* X = x.value().data();
  // the weights as (k, C), so each tap is one vector kernel over rows of C channels
  auto wt = std::make_shared<std::vector<float>>(K * C);
  {
    const float* W = w.value().data();
    for (size_t c = 0; c < C; ++c)
      for (size_t j = 0; j < K; ++j) (*wt)[j * C + c] = W[c * K + j];
  }
  const float* bv = bias ? bias->value().data() : nullptr;
  parallel_for(B, [&](size_t b) {
    conv_sample_forward(y.data() + b * To * C, X + b * T * C, wt->data(), bv, taps, C);
  });
  auto grad_fn = [xx = x, ww = w, bb = bias ? *bias : Var(), wt, taps, B, C](
                     const Tensor& g, const Tensor&) mutable {
    const float* G = g.data();
    const size_t T = taps.T, To = taps.To, stride = taps.stride;
    float* gx = xx.requires_grad() ? xx.grad_buf().data() : nullptr;
    if (gx)  // the transposed taps, in order
      parallel_for(B, [&](size_t b) {
        for (size_t j = 0; j < taps.K; ++j) {
          const auto sp = taps.span(j);
          if (sp.lo < sp.hi)
            kernels::mul_add_rows(gx + (b * T + sp.in0) * C, stride * C, G + (b * To + sp.lo) * C,
                                  C, wt->data() + j * C, sp.hi - sp.lo, C);
        }
      });
    float* gw = ww.requires_grad() ? ww.grad_buf().data() : nullptr;
    float* gb = bb.defined() && bb.requires_grad() ? bb.grad_buf().data() : nullptr;
    if (gw || gb) conv_param_grads(xx.value().data(), G, B, C, taps, gw, gb);
  };
  return finish(std::move(y), {&x, &w, bias}, grad_fn);
}

}  // namespace ops
}  // namespace gf
