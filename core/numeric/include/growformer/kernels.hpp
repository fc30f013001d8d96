// Small vectorisable kernels shared by ops and plugins' fused ops.
#pragma once
#include "growformer/export.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

GROWFORMER_API_BEGIN

namespace gf {
namespace kernels {

/// exp(x) for x in [-87, 88] to about 2 ulp; branch-free so loops over arrays vectorise.
/// NaN in gives NaN out (the polynomial runs on 0 so that no NaN reaches an integer conversion).
inline float fast_exp(float x) {
  const float in = x;
  const bool nan = !(x == x);
  x = nan ? 0.0f : x;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float fx = x * 1.44269504088896341f + 0.5f;
  float n = static_cast<float>(static_cast<int32_t>(fx) - (fx < 0.0f ? 1 : 0));
  // correct the truncation for exact negative integers
  n = (n + 1.0f <= fx) ? n + 1.0f : n;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return nan ? in : y * scale;
}

/// In-place softmax of one row of length n; entries with valid[j] == 0 get 0.
/// Returns false when no entry is valid (the row is then all zeros).
bool softmax_row(float* row, size_t n, const uint8_t* valid);

// ---- vectorised row kernels --------------------------------------------------
// Written once with xsimd and compiled for SSE2, AVX2+FMA and AVX-512F; the widest
// set this CPU has is chosen at load time. GROWFORMER_ISA=sse2|avx2|avx512 caps it (oneDNN's
// ISA cap: a set above the CPU's is capped to the widest it has, with a message; any other
// value is an error naming the variable; GROWFORMER_SIMD is its older name).
// Results depend on the set (summation order), never on the thread count.

/// max_j x[j] (-inf when n == 0).
float row_max(const float* x, size_t n);
/// x[j] = exp(x[j] - shift); returns sum_j x[j].
float exp_shift_sum(float* x, size_t n, float shift);
/// x[j] = exp(x[j] - shift).
void exp_shift(float* x, size_t n, float shift);
/// x[j] *= s.
void scale_row(float* x, size_t n, float s);
/// ds[j] = p[j] * (ds[j] - dot) * s: the softmax backward of one row.
void softmax_grad_row(float* ds, const float* p, size_t n, float dot, float s);
/// sum_j a[j] b[j].
float dot(const float* a, const float* b, size_t n);
/// y[j] += a x[j].
void axpy(float* y, const float* x, size_t n, float a);
/// y[r ldy + j] += w[j] x[r ldx + j] for r < rows, j < c (a depthwise convolution's tap over
/// rows of c channels).
void mul_add_rows(float* y, size_t ldy, const float* x, size_t ldx, const float* w, size_t rows,
                  size_t c);
/// acc[j] += sum_r g[r ldg + j] x[r ldx + j], the rows in order (a tap's weight gradient).
void dot_rows(float* acc, const float* g, size_t ldg, const float* x, size_t ldx, size_t rows,
              size_t c);
/// xt (cols x rows) = x^T for x (rows x cols), both dense: eight rows at a time, so each
/// column's stores fill whole cache lines (1.4x the row-by-row loop at 512 x 16).
void transpose(const float* x, size_t rows, size_t cols, float* xt);
/// xt (cols x rows, row stride ldxt) = x^T for x (rows x cols, row stride ldx), in square tiles
/// whose reads and writes both stay in L1 (a weight's column-by-column transpose wrote each
/// float a row of W^T apart: 3 % of a d 512 training step).
void transpose_tiled(const float* x, size_t rows, size_t cols, size_t ldx, float* xt, size_t ldxt);
/// y[j] = x[j] Phi(x[j]) (exact GELU).
void gelu(const float* x, float* y, size_t n);
/// gx[j] += g[j] (Phi(x[j]) + x[j] phi(x[j])).
/// With accumulate false gx is written, not added to (a fresh gradient buffer).
void gelu_grad(const float* x, const float* g, float* gx, size_t n, bool accumulate = true);

/// A product's Y (len x n) packed once into the column panels the products below would copy it
/// into (a Y over 256 KiB, read by more than one tile of rows), for a product split by rows over
/// the threads: every thread's call reads the same panels instead of packing its own copy (at
/// d 512 the 64-row blocks of a split product each packed the whole weight). Empty when the
/// product reads Y in place. The panels change no bit: each column keeps its FMA chain.
struct Panels {
  std::vector<float> data;
  size_t nb = 0, n = 0, len = 0;  // columns a panel (the last narrower), columns, rows
  bool empty() const { return data.empty(); }
  Panels() = default;
  Panels(Panels&&) = default;
  Panels& operator=(Panels&&) = default;
  /// Gives the storage back to this thread's cache, for its next pack_panels (a fresh
  /// allocation of a weight's size a call cost its page faults again).
  ~Panels();
};
/// Y (len x n, ldy) packed for products of M rows in all (gemm_bias, gemm_bias_parts: Y = W,
/// len = k; gemm_acc_nd: Y, len = n; SHORT_K, gemm_short_k: Y = Bt, len = d, packed only for a
/// d over 256); empty when they read Y in place. The panels keep a copy: Y may change after.
Panels pack_panels(size_t m, size_t len, size_t n, const float* y, size_t ldy,
                   bool short_k = false);

/// Products with one short dimension d (a head's width, d_k or d_v), row-major, computed
/// in registers without packing; each output element is summed in a fixed order.
/// PANELS (null or empty: none) is Y packed by pack_panels for the same Y: read instead of Y.
/// C (m x n) = alpha A (m x d) Bt (d x n).
void gemm_short_k(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                  const float* bt, size_t ldb, float* c, size_t ldc,
                  const Panels* panels = nullptr);
/// gemm_short_k (the same C, bit for bit), and rowmax[i] = max(rowmax[i], max_j C[i, j]) for
/// each of the m rows, taken from the products as they are stored.
void gemm_short_k_max(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                      const float* bt, size_t ldb, float* c, size_t ldc, float* rowmax);
/// C (m x d) += alpha X (m x n) Y (n x d).
void gemm_acc_nd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                 const float* y, size_t ldy, float* c, size_t ldc, const Panels* panels = nullptr);
/// C[i] += alpha[i] (X Y)[i]: gemm_acc_nd with a scale per row of C.
void gemm_acc_nd_rows(size_t m, size_t n, size_t d, const float* alpha, const float* x, size_t ldx,
                      const float* y, size_t ldy, float* c, size_t ldc);
/// C (n x d) += alpha X^T Y, X (m x n), Y (m x d).
void gemm_acc_tnd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                  const float* y, size_t ldy, float* c, size_t ldc);

/// C (m x n) = X (m x k) W (k x n) + bias (n; null: none), also in registers without packing:
/// every element is one FMA chain over k from 0 (vector lanes and scalar tails alike), then
/// + bias. A column's values therefore do not depend on its position in W: the product with
/// several weight matrices side by side equals the separate products bit for bit.
void gemm_bias(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w, size_t ldw,
               const float* bias, float* c, size_t ldc, const Panels* panels = nullptr);

/// gemm_bias with C's columns split into parts: part p, columns off[p] .. off[p + 1] - 1
/// (off[parts] == n), goes to dst[p] as dense rows of its own width. Bit for bit the
/// columns gemm_bias computes, without a copy of the product.
void gemm_bias_parts(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                     size_t ldw, const float* bias, const size_t* off, size_t parts,
                     float* const* dst, const Panels* panels = nullptr);

/// The instruction set in use ("sse2", "avx2", "avx512") and the ones this CPU can run.
/// Layer norm of ROWS rows of width D: y = (x - mean) / sqrt(var + eps) * gamma + beta;
/// STATS gets (mean, 1 / sqrt(var + eps)) per row.
void layer_norm_rows(const float* x, size_t rows, size_t d, const float* gamma, const float* beta,
                     float eps, float* y, float* stats);
/// gx += the layer norm's input gradient for the output gradient g.
void layer_norm_grad_rows(const float* x, const float* g, const float* stats, size_t rows, size_t d,
                          const float* gamma, float* gx);
/// ggamma += sum_rows g x_hat and gbeta += sum_rows g (either may be null), rows in order.
void layer_norm_param_grad(const float* x, const float* g, const float* stats, size_t rows,
                           size_t d, float* ggamma, float* gbeta);

/// The kernel set in use ("sse2", "avx2", "avx512"); throws std::invalid_argument when
/// GROWFORMER_ISA names no set.
std::string simd_name();
/// The kernel sets, narrowest first.
enum class Isa { sse2, avx2, avx512 };
/// The set in use, as simd_name() names it, in one load: for kernels compiled per set outside
/// the core (growformer_simd_sources in CMake; the HKT plugin's), which follow the core's choice,
/// GROWFORMER_ISA and set_simd included. Such a kernel runs only the set this returns (it is
/// never above the CPU's).
Isa active_isa();
/// simd_name() and why it was chosen (the widest the CPU runs, GROWFORMER_ISA, capped).
std::string simd_note();
std::vector<std::string> simd_available();
/// The kernel set a cap VALUE of variable VAR selects (null or empty: the widest the CPU runs;
/// a set above the CPU's: capped, with a message on stderr); NOTE gets the reason. Throws
/// std::invalid_argument naming VAR for a value that is no set.
std::string resolve_isa(const std::string& var, const char* value, std::string* note);
/// Peak GFLOP/s of the kernel set in use: a loop of independent multiply-adds that never
/// leaves registers, run on THREADS threads at once for about SECONDS (the sum of their best
/// rates, each per second of that thread's CPU time, so that preemption on a shared machine
/// does not lower it). Counts 2 flops per lane per multiply-add (fused where the set has FMA).
double fma_peak_gflops(size_t threads, double seconds = 0.2);
/// CPU time of the calling thread, seconds.
double thread_cpu_seconds();
/// Switches the instruction set (tests compare them); false when the CPU lacks it.
bool set_simd(const std::string& name);

// ---- the roofline of a training step ------------------------------------------------------
// The work of one training step counted from the model's shape: the model's own work here
// (core/numeric/src/kernels_roofline.cpp says how each term is counted), each attention
// block's by the block (AttentionBlock::step_work, <growformer/attention.hpp>), and the rates
// it is read against, measured in the process like fma_peak_gflops: the step's roofline is the
// time the work would take if each kind ran at its own measured rate, one kind after another.

/// The shape of a training step's model around its attention blocks: BATCH sequences of SEQ
/// tokens, LAYERS pre-norm blocks with a GELU MLP of HIDDEN, the final norm when FINAL_NORM,
/// mean pooling, a linear classifier over CLASSES; PARAMS parameters in all, the blocks'
/// included (AdamW).
struct ModelShape {
  size_t batch = 0, seq = 0, d_model = 0, layers = 0, hidden = 0;
  size_t classes = 0, params = 0;
  bool final_norm = true;
};

/// The work of one step (forward, backward, AdamW), by the kind of throughput that bounds it.
/// Every count is a whole number, so sums of counts are exact in any order.
struct StepWork {
  double product_flops = 0;       // 2 m n k per matrix product
  double exp_elements = 0;        // softmax exps: the forward pass and the backward's recomputation
  double gelu_elements = 0;       // GELU forward evaluations
  double gelu_grad_elements = 0;  // GELU derivative evaluations
  double max_elements = 0;        // the softmax's row maxima (attention tiles, in cache)
  double softmax_grad_elements = 0;  // the softmax backward's row pass (attention tiles, in cache)
  double add_elements = 0;  // other passes over tiles in cache (HKT's coarse rows and folds)
  double memory_bytes = 0;  // activation-sized passes and the parameters' traffic (see .cpp)
  StepWork& operator+=(const StepWork& o);
};
/// The model's own work: the embedding, positions, layer norms, residual adds, MLPs, pooling,
/// the classifier and AdamW over all PARAMS parameters; not the attention blocks'.
StepWork model_work(const ModelShape& s);

/// Measured rates (all THREADS threads at once, each per second of its own CPU time, summed).
struct ElementRates {
  double exp = 0, gelu = 0, gelu_grad = 0, max = 0, softmax_grad = 0;  // elements/s, in L1
  double add = 0;           // elements/s of y += a x on a row in L1 (StepWork::add_elements)
  double memory_bytes = 0;  // bytes/s of y += a x over arrays far beyond the caches
};
/// About SECONDS in all on the kernel set in use.
ElementRates element_rates(size_t threads, double seconds = 0.5);

/// The roofline of WORK: each kind's time at its rate (FMA_GFLOPS for the products), seconds.
struct Roofline {
  double products_s = 0, exp_gelu_s = 0, in_cache_s = 0, memory_s = 0;
  double total_s() const { return products_s + exp_gelu_s + in_cache_s + memory_s; }
};
Roofline roofline(const StepWork& work, const ElementRates& rates, double fma_gflops);

/// Query rows per tile of the streaming attention kernels (default 128); the HKT
/// kernel rounds it up to a multiple of its coarsest block. Tests set small values
/// to exercise many tiles.
size_t attention_block_rows();
void set_attention_block_rows(size_t rows);

/// The bytes of scores the attention holds a tile at a time (default 256 KiB): a tile whose
/// rows are longer takes its keys in blocks (a multiple of 16 keys, at least 16), the forward
/// pass with an online softmax, so scores, probabilities and their gradient stay in L2.
/// Tests set small values to exercise many key blocks; 0 restores the default.
size_t attention_key_block_bytes();
void set_attention_key_block_bytes(size_t bytes);

}  // namespace kernels
}  // namespace gf

GROWFORMER_API_END
