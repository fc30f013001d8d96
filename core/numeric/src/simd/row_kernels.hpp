// The table of vectorised row kernels, one instance per instruction set. Each
// instance is compiled in its own translation unit with that set's flags
// (row_kernels_<isa>.cpp) and chosen at run time by the CPU (core/src/kernels.cpp).
#pragma once

#include <cstddef>

namespace gf {
namespace kernels {
namespace simd {

/// A product's Y packed once for many calls (kernels::Panels): NB columns a panel (the last one
/// narrower), panel p at DATA + LEN * p * NB as LEN dense rows of its own width; N columns.
struct PanelView {
  const float* data;
  size_t nb, n, len;
};

struct RowKernels {
  const char* name;
  size_t width;  // floats per register
  /// ITERS rounds of independent multiply-adds on registers only (the set's peak); returns a
  /// sum of the accumulators so that the loop is kept
  float (*fma_loop)(size_t iters);
  double fma_loop_flops;  // flops of one round
  /// max_j x[j]; -inf when n == 0
  float (*max)(const float* x, size_t n);
  /// x[j] = exp(x[j] - shift); returns the sum of the new x
  float (*exp_shift_sum)(float* x, size_t n, float shift);
  /// x[j] = exp(x[j] - shift)
  void (*exp_shift)(float* x, size_t n, float shift);
  /// x[j] *= s
  void (*scale)(float* x, size_t n, float s);
  /// ds[j] = p[j] * (ds[j] - dot) * s   (softmax backward)
  void (*softmax_grad)(float* ds, const float* p, size_t n, float dot, float s);
  /// sum_j a[j] b[j]
  float (*dot)(const float* a, const float* b, size_t n);
  /// y += a * x
  void (*axpy)(float* y, const float* x, size_t n, float a);
  /// y[j] = x[j] Phi(x[j])   (exact GELU)
  void (*gelu)(const float* x, float* y, size_t n);
  /// gx[j] += g[j] (Phi(x[j]) + x[j] phi(x[j]))
  /// gx[j] (+)= g[j] (Phi(x[j]) + x[j] phi(x[j])): accumulates, or stores when !accumulate
  void (*gelu_grad)(const float* x, const float* g, float* gx, size_t n, bool accumulate);
  // Products with one short dimension d (a head's width), row-major; PV (may be null): Y
  // already packed (the caller's panels, shared by the threads of a split product):
  /// C (m x n) = alpha A (m x d) Bt (d x n); ROWMAX (null: none) rowmax[i] = max(rowmax[i],
  /// max_j C[i, j])
  void (*gemm_short_k)(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                       const float* bt, size_t ldb, float* c, size_t ldc, const PanelView* pv,
                       float* rowmax);
  /// C (m x d) += alpha X (m x n) Y (n x d)
  void (*gemm_acc_nd)(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                      const float* y, size_t ldy, float* c, size_t ldc, const PanelView* pv);
  /// C[i] += alpha[i] (X Y)[i]: a scale per row
  void (*gemm_acc_nd_rows)(size_t m, size_t n, size_t d, const float* alpha, const float* x,
                           size_t ldx, const float* y, size_t ldy, float* c, size_t ldc);
  /// C (n x d) += alpha X^T Y with X (m x n), Y (m x d)
  void (*gemm_acc_tnd)(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                       const float* y, size_t ldy, float* c, size_t ldc);
  /// C (m x n) = X (m x k) W (k x n) + bias (n; may be null), each element one FMA chain
  void (*gemm_bias)(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                    size_t ldw, const float* bias, float* c, size_t ldc, const PanelView* pv);
  /// gemm_bias with column part p (columns off[p] .. off[p + 1] - 1) stored in dst[p], dense
  void (*gemm_bias_parts)(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                          size_t ldw, const float* bias, const size_t* off, size_t parts,
                          float* const* dst, const PanelView* pv);
  /// The panel width product uses for Y (len x n) over M rows, 0 when it reads Y in place;
  /// SHORT_K: for gemm_short_k (Y = Bt, len = d), which packs only a long d
  size_t (*panel_width)(size_t m, size_t len, size_t n, bool short_k);
  // Rows of width c (a depthwise convolution's taps):
  /// y[r ldy + j] += w[j] x[r ldx + j] for r < rows, j < c
  void (*mul_add_rows)(float* y, size_t ldy, const float* x, size_t ldx, const float* w,
                       size_t rows, size_t c);
  /// acc[j] += sum_r g[r ldg + j] x[r ldx + j], rows in order
  void (*dot_rows)(float* acc, const float* g, size_t ldg, const float* x, size_t ldx, size_t rows,
                   size_t c);
  // Layer norm over rows of width d (stats: mean, 1 / std per row):
  /// y = (x - mean) / std * gamma + beta
  void (*layer_norm)(const float* x, size_t rows, size_t d, const float* gamma, const float* beta,
                     float eps, float* y, float* stats);
  /// gx += d y / d x applied to g
  void (*layer_norm_grad)(const float* x, const float* g, const float* stats, size_t rows, size_t d,
                          const float* gamma, float* gx);
  /// ggamma += sum_rows g x_hat, gbeta += sum_rows g (either may be null), rows in order
  void (*layer_norm_param_grad)(const float* x, const float* g, const float* stats, size_t rows,
                                size_t d, float* ggamma, float* gbeta);
};

RowKernels row_kernels_sse2();
RowKernels row_kernels_avx2();
RowKernels row_kernels_avx512();

}  // namespace simd
}  // namespace kernels
}  // namespace gf
