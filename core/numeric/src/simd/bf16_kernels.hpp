// The bf16 products (AVX512_BF16's vdpbf16ps): the row kernels' products with their inputs
// rounded to bf16 and float32 accumulation. One translation unit (bf16_products.cpp) compiled
// with AVX512F+BW+BF16; run only where the CPU has AVX512_BF16 and the kernel set in use is
// avx512 (core/numeric/src/precision.cpp decides, growformer/precision.hpp is the interface).
#pragma once

#include <cstddef>

namespace gf {
namespace kernels {
namespace simd {

/// The same products and arguments as RowKernels' (without packed panels: these kernels pack
/// their own operands to bf16 pairs); each output element is one chain of vdpbf16ps over the
/// contraction's pairs in order, from 0, whatever the tile or thread it falls in.
struct Bf16Kernels {
  const char* name;  // "avx512_bf16" (vdpbf16ps) or "amx" (TDPBF16PS)
  /// ITERS rounds of independent vdpbf16ps on registers only (the set's bf16 peak)
  float (*dot_loop)(size_t iters);
  double dot_loop_flops;  // flops of one round (2 per product)
  /// y[j] = x[j] rounded to bf16 by the instruction the products use (vcvtneps2bf16), as float
  void (*round)(const float* x, float* y, size_t n);
  void (*gemm_short_k)(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                       const float* bt, size_t ldb, float* c, size_t ldc, float* rowmax);
  void (*gemm_acc_nd)(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                      const float* y, size_t ldy, float* c, size_t ldc);
  void (*gemm_acc_nd_rows)(size_t m, size_t n, size_t d, const float* alpha, const float* x,
                           size_t ldx, const float* y, size_t ldy, float* c, size_t ldc);
  void (*gemm_acc_tnd)(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                       const float* y, size_t ldy, float* c, size_t ldc);
  void (*gemm_bias)(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                    size_t ldw, const float* bias, float* c, size_t ldc);
  void (*gemm_bias_parts)(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                          size_t ldw, const float* bias, const size_t* off, size_t parts,
                          float* const* dst);
};

/// The AVX512_BF16 table (call only where the CPU has it).
Bf16Kernels bf16_kernels_avx512();
/// The AMX-BF16 table (call only where the CPU has it and the process may use the tiles).
Bf16Kernels bf16_kernels_amx();

/// The bf16 table when the products run in bf16 (growformer/precision.hpp), else null.
const Bf16Kernels* bf16_products();

/// Peak GFLOP/s of LOOP (ROUND_FLOPS flops a call of one iteration) on THREADS threads at once
/// for about SECONDS: kernels::fma_peak_gflops's measurement for any register loop.
double loop_peak_gflops(float (*loop)(size_t), double round_flops, size_t threads, double seconds);

}  // namespace simd
}  // namespace kernels
}  // namespace gf
