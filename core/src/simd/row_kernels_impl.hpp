// Row kernels written once against xsimd's batch type; included by one
// translation unit per instruction set, which sets GF_SIMD_ARCH and its compiler flags.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cmath>

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
inline float erfc_scalar(float x) { return ::erfcf(x); }

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

float k_exp_shift_sum(float* x, size_t n, float shift) {
  B acc(0.0f), sh(shift);
  size_t j = 0;
  for (; j + W <= n; j += W) {
    B e = xsimd::exp(B::load_unaligned(x + j) - sh);
    e.store_unaligned(x + j);
    acc += e;
  }
  float s = xsimd::hadd(acc);
  for (; j < n; ++j) {
    x[j] = ::expf(x[j] - shift);
    s += x[j];
  }
  return s;
}

void k_exp_shift(float* x, size_t n, float shift) {
  B sh(shift);
  size_t j = 0;
  for (; j + W <= n; j += W) xsimd::exp(B::load_unaligned(x + j) - sh).store_unaligned(x + j);
  for (; j < n; ++j) x[j] = ::expf(x[j] - shift);
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
  for (; j + W <= n; j += W) acc = xsimd::fma(B::load_unaligned(a + j), B::load_unaligned(b + j), acc);
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

// Phi(x) = erfc(-x / sqrt 2) / 2 keeps its relative accuracy in the far negative tail.
constexpr float kMInvSqrt2 = -0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

void k_gelu(const float* x, float* y, size_t n) {
  B h(0.5f), c(kMInvSqrt2);
  size_t j = 0;
  for (; j + W <= n; j += W) {
    B v = B::load_unaligned(x + j);
    (h * v * xsimd::erfc(v * c)).store_unaligned(y + j);
  }
  for (; j < n; ++j) y[j] = 0.5f * x[j] * erfc_scalar(x[j] * kMInvSqrt2);
}

void k_gelu_grad(const float* x, const float* g, float* gx, size_t n) {
  B h(0.5f), c(kMInvSqrt2), cp(kInvSqrt2Pi), mh(-0.5f);
  size_t j = 0;
  for (; j + W <= n; j += W) {
    B v = B::load_unaligned(x + j);
    B cdf = h * xsimd::erfc(v * c);
    B pdf = cp * xsimd::exp(mh * v * v);
    xsimd::fma(B::load_unaligned(g + j), xsimd::fma(v, pdf, cdf), B::load_unaligned(gx + j))
        .store_unaligned(gx + j);
  }
  for (; j < n; ++j) {
    float cdf = 0.5f * erfc_scalar(x[j] * kMInvSqrt2);
    float pdf = kInvSqrt2Pi * ::expf(-0.5f * x[j] * x[j]);
    gx[j] += g[j] * (cdf + x[j] * pdf);
  }
}

// Internal linkage: every instruction-set translation unit has its own copy.
RowKernels make_row_kernels(const char* name) {
  return {name,  W,              k_max, k_exp_shift_sum, k_exp_shift, k_scale,
          k_softmax_grad, k_dot, k_axpy, k_gelu,         k_gelu_grad};
}

}  // namespace

}  // namespace simd
}  // namespace kernels
}  // namespace gf
