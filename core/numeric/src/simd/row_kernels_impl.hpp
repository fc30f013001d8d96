// Row kernels written once against xsimd's batch type; included by one
// translation unit per instruction set, which sets GF_SIMD_ARCH and its compiler flags.
// Split in three by concern: row_elementwise_impl.hpp (the batch type, element-wise rows),
// row_products_impl.hpp (the products) and this file (convolution rows, layer norm, the set's
// multiply-add peak and the table of kernels that make_row_kernels hands out).
#pragma once

#include "row_products_impl.hpp"

namespace gf {
namespace kernels {
namespace simd {
namespace {

// ---- rows of a depthwise convolution ------------------------------------------------
void k_mul_add_rows(float* y, size_t ldy, const float* x, size_t ldx, const float* w, size_t rows,
                    size_t c) {
  for (size_t r = 0; r < rows; ++r) {
    float* yr = y + r * ldy;
    const float* xr = x + r * ldx;
    size_t j = 0;
    for (; j + W <= c; j += W)
      vfma(B::load_unaligned(w + j), B::load_unaligned(xr + j), B::load_unaligned(yr + j))
          .store_unaligned(yr + j);
    for (; j < c; ++j) yr[j] = lane_fma(w[j], xr[j], yr[j]);
  }
}

void k_dot_rows(float* acc, const float* g, size_t ldg, const float* x, size_t ldx, size_t rows,
                size_t c) {
  size_t j = 0;
  // up to four vectors of columns stay in registers over all rows
  for (; j + 4 * W <= c; j += 4 * W) {
    B a[4];
    for (size_t v = 0; v < 4; ++v) a[v] = B::load_unaligned(acc + j + v * W);
    for (size_t r = 0; r < rows; ++r)
      for (size_t v = 0; v < 4; ++v)
        a[v] = vfma(B::load_unaligned(g + r * ldg + j + v * W),
                    B::load_unaligned(x + r * ldx + j + v * W), a[v]);
    for (size_t v = 0; v < 4; ++v) a[v].store_unaligned(acc + j + v * W);
  }
  for (; j + W <= c; j += W) {
    B a = B::load_unaligned(acc + j);
    for (size_t r = 0; r < rows; ++r)
      a = vfma(B::load_unaligned(g + r * ldg + j), B::load_unaligned(x + r * ldx + j), a);
    a.store_unaligned(acc + j);
  }
  for (; j < c; ++j) {
    float a = acc[j];
    for (size_t r = 0; r < rows; ++r) a = lane_fma(g[r * ldg + j], x[r * ldx + j], a);
    acc[j] = a;
  }
}

// ---- layer norm ---------------------------------------------------------------------
// Row sums in vector lanes, then across the lanes, then the scalar tail.
inline float row_sum(const float* x, size_t n) {
  B acc(0.0f);
  size_t j = 0;
  for (; j + W <= n; j += W) acc += B::load_unaligned(x + j);
  float s = xsimd::hadd(acc);
  for (; j < n; ++j) s += x[j];
  return s;
}

void k_layer_norm(const float* x, size_t rows, size_t d, const float* gamma, const float* beta,
                  float eps, float* y, float* stats) {
  for (size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    const float mu = row_sum(xi, d) / float(d);
    const B m(mu);
    B v(0.0f);
    size_t j = 0;
    for (; j + W <= d; j += W) {
      const B t = B::load_unaligned(xi + j) - m;
      v = xsimd::fma(t, t, v);
    }
    float var = xsimd::hadd(v);
    for (; j < d; ++j) var += (xi[j] - mu) * (xi[j] - mu);
    var /= float(d);
    const float rs = 1.0f / std::sqrt(var + eps);
    stats[2 * i] = mu;
    stats[2 * i + 1] = rs;
    const B r(rs);
    for (j = 0; j + W <= d; j += W)
      xsimd::fma((B::load_unaligned(xi + j) - m) * r, B::load_unaligned(gamma + j),
                 B::load_unaligned(beta + j))
          .store_unaligned(yi + j);
    for (; j < d; ++j) yi[j] = (xi[j] - mu) * rs * gamma[j] + beta[j];
  }
}

void k_layer_norm_grad(const float* x, const float* g, const float* stats, size_t rows, size_t d,
                       const float* gamma, float* gx) {
  for (size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * d;
    const float* gi = g + i * d;
    float* gxi = gx + i * d;
    const float mu = stats[2 * i], rs = stats[2 * i + 1];
    const B m(mu), r(rs);
    B a1(0.0f), a2(0.0f);
    size_t j = 0;
    for (; j + W <= d; j += W) {
      const B xh = (B::load_unaligned(xi + j) - m) * r;
      const B gy = B::load_unaligned(gi + j) * B::load_unaligned(gamma + j);
      a1 += gy;
      a2 = xsimd::fma(gy, xh, a2);
    }
    float s1 = xsimd::hadd(a1), s2 = xsimd::hadd(a2);
    for (; j < d; ++j) {
      const float xh = (xi[j] - mu) * rs, gy = gi[j] * gamma[j];
      s1 += gy;
      s2 += gy * xh;
    }
    s1 /= float(d);
    s2 /= float(d);
    const B v1(s1), v2(s2);
    for (j = 0; j + W <= d; j += W) {
      const B xh = (B::load_unaligned(xi + j) - m) * r;
      const B gy = B::load_unaligned(gi + j) * B::load_unaligned(gamma + j);
      xsimd::fma(r, gy - v1 - xh * v2, B::load_unaligned(gxi + j)).store_unaligned(gxi + j);
    }
    for (; j < d; ++j) {
      const float xh = (xi[j] - mu) * rs;
      gxi[j] += rs * (gi[j] * gamma[j] - s1 - xh * s2);
    }
  }
}

void k_layer_norm_param_grad(const float* x, const float* g, const float* stats, size_t rows,
                             size_t d, float* ggamma, float* gbeta) {
  for (size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * d;
    const float* gi = g + i * d;
    const float mu = stats[2 * i], rs = stats[2 * i + 1];
    const B m(mu), r(rs);
    size_t j = 0;
    for (; j + W <= d; j += W) {
      const B gv = B::load_unaligned(gi + j);
      if (ggamma)
        xsimd::fma(gv, (B::load_unaligned(xi + j) - m) * r, B::load_unaligned(ggamma + j))
            .store_unaligned(ggamma + j);
      if (gbeta) (B::load_unaligned(gbeta + j) + gv).store_unaligned(gbeta + j);
    }
    for (; j < d; ++j) {
      if (ggamma) ggamma[j] += gi[j] * ((xi[j] - mu) * rs);
      if (gbeta) gbeta[j] += gi[j];
    }
  }
}

// ---- the set's multiply-add peak ---------------------------------------------------------
// KF independent chains (enough to cover latency x throughput: 2 pipes x 4 cycles on current
// cores, more for SSE2's separate multiply and add), registers only.
constexpr size_t KF = W == 16 ? 24 : 12;

float k_fma_loop(size_t iters) {
  // fully unrolled, so that the accumulators live in registers (a loop over the array kept
  // them in memory)
  B acc[KF];
#pragma GCC unroll 32
  for (size_t k = 0; k < KF; ++k) acc[k] = B(1.0f + 1e-3f * float(k));
  const B m(0.999999f), a(1e-7f);
  for (size_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (size_t k = 0; k < KF; ++k) acc[k] = vfma(acc[k], m, a);
  }
  B s = acc[0];
#pragma GCC unroll 32
  for (size_t k = 1; k < KF; ++k) s += acc[k];
  return xsimd::hadd(s);
}

// Internal linkage: every instruction-set translation unit has its own copy.
RowKernels make_row_kernels(const char* name) {
  return {name,
          W,
          k_fma_loop,
          2.0 * KF * W,
          k_max,
          k_exp_shift_sum,
          k_exp_shift,
          k_scale,
          k_softmax_grad,
          k_dot,
          k_axpy,
          k_gelu,
          k_gelu_grad,
          k_gemm_short_k,
          k_gemm_acc_nd,
          k_gemm_acc_nd_rows,
          k_gemm_acc_tnd,
          k_gemm_bias,
          k_gemm_bias_parts,
          k_panel_width,
          k_mul_add_rows,
          k_dot_rows,
          k_layer_norm,
          k_layer_norm_grad,
          k_layer_norm_param_grad};
}

}  // namespace

}  // namespace simd
}  // namespace kernels
}  // namespace gf
