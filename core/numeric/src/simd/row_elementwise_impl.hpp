// Row kernels written once against xsimd's batch type, part 1 of 3: the instruction set's batch
// type and the element-wise rows (max, exp, softmax's pieces, GELU). Included through
// row_kernels_impl.hpp by one translation unit per instruction set, which sets GF_SIMD_ARCH and
// its compiler flags.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstdlib>
#include <type_traits>

#include <growformer/simd_exp.hpp>
#include "row_kernels.hpp"

namespace gf {
namespace kernels {
namespace simd {
namespace {

using A = GF_SIMD_ARCH;
using B = xsimd::batch<float, A>;
constexpr size_t W = B::size;

// No std:: inline templates here (std::max, ...): a copy compiled with this TU's
// instruction set must not be picked by the linker for the rest of the library.
inline float fmax_(float a, float b) { return a < b ? b : a; }

float k_max(const float* x, size_t n) {
  float m = -HUGE_VALF;
  size_t j = 0;
  if (n >= W) {
    B acc = B::load_unaligned(x);
    for (j = W; j + W <= n; j += W) acc = xsimd::max(acc, B::load_unaligned(x + j));
    alignas(64) float lanes[W];
    acc.store_aligned(lanes);
    for (size_t i = 0; i < W; ++i) m = fmax_(m, lanes[i]);
  }
  for (; j < n; ++j) m = fmax_(m, x[j]);
  return m;
}

inline B vfma(B a, B b, B c);  // below, with the products

// the core's vector exp (growformer/simd_exp.hpp, shared with the plugins' kernels)
template <bool Split>
inline B vexp_core(B x, B lo) {
  return gf::simd_exp::vexp_core<Split, A>(x, lo);
}
inline B vexp(B x) { return gf::simd_exp::vexp<A>(x); }

inline B vmin(B a, B b) {
#if defined(__AVX512F__)
  if constexpr (W == 16) return B(_mm512_min_ps(a, b));
#endif
  return xsimd::min(a, b);
}
inline B vmax(B a, B b) {
#if defined(__AVX512F__)
  // the masked form with every lane set: the plain one's undefined pass-through register drew
  // GCC 12's -Wuninitialized once inlined into gemm_short_k's epilogue
  if constexpr (W == 16) return B(_mm512_mask_max_ps(a, static_cast<__mmask16>(0xFFFF), a, b));
#endif
  return xsimd::max(a, b);
}

// The standard normal's CDF Phi(x) of U registers and, with GAUSS, e^(-x^2 / 2), without branches
// and with one exp. Phi(x) = erfc(z) / 2 for x < 0 and 1 - erfc(z) / 2 otherwise, z = |x| / sqrt 2,
// with erfc(z) = t e^(-z^2) Q(t), t = 1 / (1 + z / 2), and Q of degree 8 fitted to erfcx(z) / t
// (tools/normal_cdf_fit.py: least squares in the Chebyshev basis on 400,001 points of t in
// [0.163, 1], i.e. z in [0, 10.25]; relative error 1.1e-7 in double, 2.1e-7 evaluated in float;
// the coefficients below from the highest power down): the form of Numerical
// Recipes' erfcc, whose polynomial sits inside the exp and so takes a second exp where the
// derivative needs e^(-z^2) as well. e^(-z^2) = e^(-x^2 / 2) is the derivative's Gaussian, so
// GELU's derivative takes no exp of its own. x^2 / 2 goes into the exp's reduction as hi + lo
// (vexp_core<true>; x split into two halves of 12 significant bits, so hi is exact): x^2 / 2
// rounded first would put up to x^2 2^-25 into the result's relative error, 3e-6 at x = -10, and
// the far negative tail keeps its relative accuracy. |x| is clamped to 14.5 first: Phi(-14.5) =
// 6e-48 is 0 in float, and -z^2 stays in the reduction's range. xsimd 8's erfc evaluates one
// polynomial per range of z and, once a register mixes ranges, all of them: on N(0, 1) values
// GELU ran at 1.8..2.0 G elements/s and its derivative at 1.3..1.4 (5.8 / 2.6 on values in one
// range); this form runs 2.0..2.6 and 1.9..2.0 on any values (Zen 5, AVX-512, one core, a row of
// 512 in L1).
template <size_t U, bool Gauss>
inline void vnormal_cdf(const B* x, B* cdf, B* gauss) {
  using I = xsimd::batch<int32_t, A>;
  B t[U], q[U], hi[U], lo[U], xc[U];
  for (size_t u = 0; u < U; ++u) {
    // min and max return their second operand when either is NaN: NaN stays NaN
    xc[u] = vmax(B(-14.5f), vmin(B(14.5f), x[u]));
    const B ax = xsimd::abs(xc[u]);
    t[u] = B(1.0f) / vfma(ax, B(0.35355339059327376f), B(1.0f));  // 1 / (1 + z / 2)
    const B xh = xsimd::bitwise_cast<B>(xsimd::bitwise_cast<I>(ax) & I(int32_t(0xFFFFF000u)));
    const B xl = ax - xh;
    hi[u] = B(0.5f) * xh * xh;           // exact
    lo[u] = xl * vfma(B(0.5f), xl, xh);  // x^2 / 2 - hi = xl (xh + xl / 2), rounded twice
    q[u] = B(-5.919486657e-02f);
  }
  constexpr float c[] = {2.849175930e-01f, -4.873928726e-01f, 2.777568698e-01f, -2.609205432e-02f,
                         2.023469657e-01f, 2.432128638e-01f,  2.823579013e-01f, 2.820875049e-01f};
  for (float ck : c)
    for (size_t u = 0; u < U; ++u) q[u] = vfma(q[u], t[u], B(ck));
  for (size_t u = 0; u < U; ++u) {
    const B e = vexp_core<true>(-hi[u], -lo[u]);  // e^(-x^2 / 2) = e^(-z^2)
    const B half_erfc = (B(0.5f) * t[u]) * (e * q[u]);
    if constexpr (Gauss) gauss[u] = e;
    cdf[u] = xsimd::select(xc[u] < B(0.0f), half_erfc, B(1.0f) - half_erfc);
  }
}

// The last n % W elements of x through vexp too (growformer/simd_exp.hpp's padded_tail), so
// that an element's bits do not depend on where in the row it lies.
template <class F>
inline void exp_tail(float* x, size_t n, F&& each) {
  gf::simd_exp::padded_tail<A>(x, n, each);
}

float k_exp_shift_sum(float* x, size_t n, float shift) {
  B acc(0.0f), sh(shift);
  size_t j = 0;
  for (; j + W <= n; j += W) {
    B e = vexp(B::load_unaligned(x + j) - sh);
    e.store_unaligned(x + j);
    acc += e;
  }
  float s = xsimd::hadd(acc);
  if (j < n) {
    exp_tail(x + j, n - j, [&](B v) { return vexp(v - sh); });
    for (; j < n; ++j) s += x[j];
  }
  return s;
}

void k_exp_shift(float* x, size_t n, float shift) {
  B sh(shift);
  size_t j = 0;
  for (; j + W <= n; j += W) vexp(B::load_unaligned(x + j) - sh).store_unaligned(x + j);
  if (j < n) exp_tail(x + j, n - j, [&](B v) { return vexp(v - sh); });
}

void k_scale(float* x, size_t n, float s) {
  B sv(s);
  size_t j = 0;
  for (; j + W <= n; j += W) (B::load_unaligned(x + j) * sv).store_unaligned(x + j);
  for (; j < n; ++j) x[j] *= s;
}

void k_softmax_grad(float* ds, const float* p, size_t n, float dot, float s) {
  B dv(dot), sv(s);
  size_t j = 0;
  for (; j + W <= n; j += W)
    (B::load_unaligned(p + j) * (B::load_unaligned(ds + j) - dv) * sv).store_unaligned(ds + j);
  for (; j < n; ++j) ds[j] = p[j] * (ds[j] - dot) * s;
}

float k_dot(const float* a, const float* b, size_t n) {
  B acc(0.0f);
  size_t j = 0;
  for (; j + W <= n; j += W)
    acc = xsimd::fma(B::load_unaligned(a + j), B::load_unaligned(b + j), acc);
  float s = xsimd::hadd(acc);
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

void k_axpy(float* y, const float* x, size_t n, float a) {
  B av(a);
  size_t j = 0;
  for (; j + W <= n; j += W)
    xsimd::fma(av, B::load_unaligned(x + j), B::load_unaligned(y + j)).store_unaligned(y + j);
  for (; j < n; ++j) y[j] += a * x[j];
}

constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// Applies F(const B* x, const float* const* in, B* out) to U registers at a time, then one, then
// the last n % W elements padded into one register, so that an element's bits do not depend on
// where in the row it lies. IN: NIN further inputs read beside x; OUT is stored to y.
template <size_t U, size_t NIN, class F>
inline void rows_by_register(const float* x, const float* const* in, float* y, size_t n, F&& f) {
  size_t j = 0;
  auto run = [&](auto ucount, const float* xs, const float* const* ins, float* ys) {
    constexpr size_t V = decltype(ucount)::value;
    B xv[V], out[V];
    for (size_t u = 0; u < V; ++u) xv[u] = B::load_unaligned(xs + u * W);
    f(std::integral_constant<size_t, V>{}, xv, ins, out);
    for (size_t u = 0; u < V; ++u) out[u].store_unaligned(ys + u * W);
  };
  const float* at[NIN + 1];
  for (; j + U * W <= n; j += U * W) {
    for (size_t k = 0; k < NIN; ++k) at[k] = in[k] + j;
    run(std::integral_constant<size_t, U>{}, x + j, at, y + j);
  }
  for (; j + W <= n; j += W) {
    for (size_t k = 0; k < NIN; ++k) at[k] = in[k] + j;
    run(std::integral_constant<size_t, 1>{}, x + j, at, y + j);
  }
  if (j < n) {
    alignas(64) float lanes[NIN + 2][W];
    for (size_t u = 0; u < W; ++u) {
      lanes[0][u] = u < n - j ? x[j + u] : 0.0f;
      for (size_t k = 0; k < NIN; ++k) lanes[k + 1][u] = u < n - j ? in[k][j + u] : 0.0f;
    }
    for (size_t k = 0; k < NIN; ++k) at[k] = lanes[k + 1];
    run(std::integral_constant<size_t, 1>{}, lanes[0], at, lanes[NIN + 1]);
    for (size_t u = 0; j < n; ++u, ++j) y[j] = lanes[NIN + 1][u];
  }
}

// Four registers at a time: each register's chain from x to Phi(x) is long (a division, eight
// multiply-adds, an exp), and one register at a time ran GELU at 1.6..1.9 G elements/s against
// 2.0..2.3 (two: 1.9..2.1, eight: 1.9..2.0, spilling; Zen 5, AVX-512, a row of 512 in L1; measured
// on the two-exp form before this one).
constexpr size_t kNormalRegs = 4;

// y = x Phi(x)
void k_gelu(const float* x, float* y, size_t n) {
  rows_by_register<kNormalRegs, 0>(x, nullptr, y, n,
                                   [](auto uc, const B* v, const float* const*, B* out) {
                                     constexpr size_t V = decltype(uc)::value;
                                     B cdf[V];
                                     vnormal_cdf<V, false>(v, cdf, nullptr);
                                     for (size_t u = 0; u < V; ++u) out[u] = v[u] * cdf[u];
                                   });
}

// gx (+)= g (Phi(x) + x phi(x)), phi(x) = e^(-x^2 / 2) / sqrt(2 pi)
void k_gelu_grad(const float* x, const float* g, float* gx, size_t n, bool accumulate) {
  const float* in[2] = {g, gx};
  rows_by_register<kNormalRegs, 2>(
      x, in, gx, n, [&](auto uc, const B* v, const float* const* at, B* out) {
        constexpr size_t V = decltype(uc)::value;
        B cdf[V], gauss[V];
        vnormal_cdf<V, true>(v, cdf, gauss);
        for (size_t u = 0; u < V; ++u)
          out[u] =
              vfma(B::load_unaligned(at[0] + u * W), vfma(v[u] * B(kInvSqrt2Pi), gauss[u], cdf[u]),
                   accumulate ? B::load_unaligned(at[1] + u * W) : B(0.0f));
      });
}

}  // namespace

}  // namespace simd
}  // namespace kernels
}  // namespace gf
