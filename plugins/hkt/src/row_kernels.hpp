// The table of the `hkt` block's row kernels, one instance per instruction set, each compiled
// in its own translation unit with that set's flags (row_kernels_<isa>.cpp) and chosen by the
// core's choice of set (row_kernels.cpp).
#pragma once

#include <cstddef>

namespace gf_hkt {
namespace kernels {
namespace simd {

struct RowKernels {
  const char* name;
  /// y[j] = exp((y[j] + x[j]) - shift)
  void (*exp_add_shift)(float* y, const float* x, size_t n, float shift);
  /// y += x; returns max_j y[j] (-inf when n == 0)
  float (*add_max)(float* y, const float* x, size_t n);
  // Rows against a grid twice as coarse, up2(c)[j] = c[j / 2]:
  /// y[j] += c[j / 2]
  void (*add_up2)(float* y, const float* c, size_t n);
  /// y[j] += c[j / 2]; returns max_j y[j]
  float (*add_max_up2)(float* y, const float* c, size_t n);
  /// y[j] = exp((y[j] + c[j / 2]) - shift)
  void (*exp_add_up2_shift)(float* y, const float* c, size_t n, float shift);
  /// out[J] = (0 + (r0[2J] + r1[2J])) + (r0[2J + 1] + r1[2J + 1]) (an odd last pair: its first)
  void (*fold_pairs2)(float* out, const float* r0, const float* r1, size_t n);
};

RowKernels row_kernels_sse2();
RowKernels row_kernels_avx2();
RowKernels row_kernels_avx512();

}  // namespace simd
}  // namespace kernels
}  // namespace gf_hkt
