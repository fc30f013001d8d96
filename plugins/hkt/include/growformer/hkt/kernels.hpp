// The `hkt` block's own row kernels: a score row's last addend fused with its max or its exp,
// and rows against a grid twice as coarse (the stride-2 levels, up2(c)[j] = c[j / 2]). Written
// once with xsimd and compiled per instruction set with the core's flags (src/, CMake's
// growformer_simd_sources); the set is the one the core's kernels run
// (gf::kernels::active_isa(): the widest the CPU has, GROWFORMER_ISA's cap, set_simd), so that
// a row's bits do not depend on which library's kernels touched it.
#pragma once

#include <cstddef>

namespace gf_hkt {
namespace kernels {

/// y[j] = exp((y[j] + x[j]) - shift): a score row's last addend and its exp in one pass.
void exp_add_shift(float* y, const float* x, size_t n, float shift);
/// y[j] += x[j]; returns the new max_j y[j] (-inf when n == 0): one pass for a score row's
/// last addend and the max its softmax needs.
float add_max(float* y, const float* x, size_t n);
/// Rows against a grid twice as coarse, up2(c)[j] = c[j / 2]; the same bits as adding an
/// expanded row with add_max / exp_add_shift / gf::kernels::axpy(..., 1), without writing it
/// out. c holds ceil(n / 2) values.
/// y[j] += c[j / 2].
void add_up2(float* y, const float* c, size_t n);
/// y[j] += c[j / 2]; returns the new max_j y[j] (-inf when n == 0).
float add_max_up2(float* y, const float* c, size_t n);
/// y[j] = exp((y[j] + c[j / 2]) - shift).
void exp_add_up2_shift(float* y, const float* c, size_t n, float shift);
/// out[J] = (0 + (r0[2J] + r1[2J])) + (r0[2J + 1] + r1[2J + 1]) for 2J + 1 < n, and, when n
/// is odd, out[n / 2] = 0 + (r0[n - 1] + r1[n - 1]): two rows' column sums folded over
/// blocks of 2 (the 0 + turns an all -0 sum into +0, as a sum from zero does).
void fold_pairs2(float* out, const float* r0, const float* r1, size_t n);

/// The instruction set these kernels run now ("sse2", "avx2", "avx512"): always the core's,
/// gf::kernels::simd_name().
const char* isa_name();

}  // namespace kernels
}  // namespace gf_hkt
