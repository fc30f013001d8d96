// The hkt block's row kernels written once against xsimd's batch type; included by one
// translation unit per instruction set, which sets GF_SIMD_ARCH and its compiler flags. Moved
// from the core's kernels (core/src/simd/row_kernels_impl.hpp); the exps since take the core's
// vector exp (growformer/simd_exp.hpp), as the core's softmax does.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstdint>

#include <growformer/simd_exp.hpp>
#include "row_kernels.hpp"

namespace gf_hkt {
namespace kernels {
namespace simd {
namespace {

using A = GF_SIMD_ARCH;
using B = xsimd::batch<float, A>;
constexpr size_t W = B::size;

// No std:: inline templates here (std::max, ...): a copy compiled with this TU's
// instruction set must not be picked by the linker for the rest of the library.
inline float fmax_(float a, float b) { return a < b ? b : a; }

// The core's vector exp (growformer/simd_exp.hpp), as the core's softmax uses it.
inline B vexp(B x) { return gf::simd_exp::vexp<A>(x); }

// y[j] = exp(y[j]) for the last n < W elements, padded into one register (the core's
// padded_tail): a value's bits do not depend on where in the row it lies
inline void exp_tail(float* y, size_t n) {
  gf::simd_exp::padded_tail<A>(y, n, [](B v) { return vexp(v); });
}

void k_exp_add_shift(float* y, const float* x, size_t n, float shift) {
  B sh(shift);
  size_t j = 0;
  for (; j + W <= n; j += W)
    vexp((B::load_unaligned(y + j) + B::load_unaligned(x + j)) - sh).store_unaligned(y + j);
  for (size_t i = j; i < n; ++i) y[i] = (y[i] + x[i]) - shift;
  exp_tail(y + j, n - j);
}

float k_add_max(float* y, const float* x, size_t n) {
  float m = -HUGE_VALF;
  size_t j = 0;
  if (n >= W) {
    B acc(-HUGE_VALF);
    for (; j + W <= n; j += W) {
      const B v = B::load_unaligned(y + j) + B::load_unaligned(x + j);
      v.store_unaligned(y + j);
      acc = xsimd::max(acc, v);
    }
    alignas(64) float lanes[W];
    acc.store_aligned(lanes);
    for (size_t i = 0; i < W; ++i) m = fmax_(m, lanes[i]);
  }
  for (; j < n; ++j) {
    y[j] += x[j];
    m = fmax_(m, y[j]);
  }
  return m;
}

// ---- rows on a grid twice as coarse (HKT's stride-2 levels) ---------------------------
// up2(c)[j] = c[j / 2]: one load of W coarse values gives two vectors of the fine row.
struct DupLo {
  static constexpr uint32_t get(size_t i, size_t) { return static_cast<uint32_t>(i / 2); }
};
struct DupHi {
  static constexpr uint32_t get(size_t i, size_t n) { return static_cast<uint32_t>(n / 2 + i / 2); }
};
struct PairSwap {  // lanes 2i and 2i + 1 exchanged
  static constexpr uint32_t get(size_t i, size_t) { return static_cast<uint32_t>(i ^ 1); }
};
struct EvenLo {  // lane i < n/2 takes lane 2i
  static constexpr uint32_t get(size_t i, size_t n) { return static_cast<uint32_t>((2 * i) % n); }
};
struct EvenHi {  // lane i >= n/2 takes lane 2i - n
  static constexpr uint32_t get(size_t i, size_t n) {
    return static_cast<uint32_t>(i < n / 2 ? 0 : 2 * i - n);
  }
};
using U = xsimd::batch<uint32_t, A>;

// Calls f(v, j) for each vector of up2(c) at j (every j + W <= n, as the full-row kernels'
// vector loops), then fs(j) for the rest.
template <class F, class FS>
inline void for_up2(const float* c, size_t n, F f, FS fs) {
  size_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    const B cv = B::load_unaligned(c + j / 2);
    f(xsimd::swizzle(cv, xsimd::make_batch_constant<U, DupLo>()), j);
    f(xsimd::swizzle(cv, xsimd::make_batch_constant<U, DupHi>()), j + W);
  }
  if (j + W <= n) {  // one more vector: its W / 2 coarse values, without reading past them
    alignas(64) float h[W] = {};
    for (size_t i = 0; i < W / 2; ++i) h[i] = c[j / 2 + i];
    f(xsimd::swizzle(B::load_aligned(h), xsimd::make_batch_constant<U, DupLo>()), j);
    j += W;
  }
  for (; j < n; ++j) fs(j);  // the scalar tail of the full-row kernels, element for element
}

void k_add_up2(float* y, const float* c, size_t n) {
  for_up2(
      c, n, [=](B u, size_t j) { (B::load_unaligned(y + j) + u).store_unaligned(y + j); },
      [=](size_t j) { y[j] += c[j / 2]; });
}

float k_add_max_up2(float* y, const float* c, size_t n) {
  B acc(-HUGE_VALF);
  float m = -HUGE_VALF;
  for_up2(
      c, n,
      [&](B u, size_t j) {
        const B v = B::load_unaligned(y + j) + u;
        v.store_unaligned(y + j);
        acc = xsimd::max(acc, v);
      },
      [&](size_t j) {
        y[j] += c[j / 2];
        m = fmax_(m, y[j]);
      });
  alignas(64) float lanes[W];
  acc.store_aligned(lanes);
  for (size_t i = 0; i < W; ++i) m = fmax_(m, lanes[i]);
  return m;
}

void k_exp_add_up2_shift(float* y, const float* c, size_t n, float shift) {
  const B sh(shift);
  for_up2(
      c, n,
      [=](B u, size_t j) { vexp((B::load_unaligned(y + j) + u) - sh).store_unaligned(y + j); },
      [=](size_t j) { y[j] = (y[j] + c[j / 2]) - shift; });
  const size_t tail = n % W;  // for_up2 left the last n % W elements to the scalar loop
  exp_tail(y + (n - tail), tail);
}

// out[J] = (0 + (r0[2J] + r1[2J])) + (r0[2J + 1] + r1[2J + 1]) for 2J + 1 < n, and
// out[n / 2] = 0 + (r0[n - 1] + r1[n - 1]) when n is odd (the leading 0 + makes an all -0
// sum +0, as a sum from zero does).
void k_fold_pairs2(float* out, const float* r0, const float* r1, size_t n) {
  const B zero(0.0f);
  alignas(64) float idx[W];
  for (size_t i = 0; i < W; ++i) idx[i] = static_cast<float>(i);
  const auto low = B::load_aligned(idx) < B(static_cast<float>(W / 2));
  size_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    const B sa = B::load_unaligned(r0 + j) + B::load_unaligned(r1 + j);
    const B sb = B::load_unaligned(r0 + j + W) + B::load_unaligned(r1 + j + W);
    const B ta = (zero + sa) + xsimd::swizzle(sa, xsimd::make_batch_constant<U, PairSwap>());
    const B tb = (zero + sb) + xsimd::swizzle(sb, xsimd::make_batch_constant<U, PairSwap>());
    xsimd::select(low, xsimd::swizzle(ta, xsimd::make_batch_constant<U, EvenLo>()),
                  xsimd::swizzle(tb, xsimd::make_batch_constant<U, EvenHi>()))
        .store_unaligned(out + j / 2);
  }
  for (; j + 1 < n; j += 2) out[j / 2] = (0.0f + (r0[j] + r1[j])) + (r0[j + 1] + r1[j + 1]);
  if (j < n) out[j / 2] = 0.0f + (r0[j] + r1[j]);
}

// Internal linkage: every instruction-set translation unit has its own copy.
RowKernels make_row_kernels(const char* name) {
  return {name,          k_exp_add_shift,     k_add_max,    k_add_up2,
          k_add_max_up2, k_exp_add_up2_shift, k_fold_pairs2};
}

}  // namespace

}  // namespace simd
}  // namespace kernels
}  // namespace gf_hkt
