// The precision of the model's products: float32, or bf16 inputs with float32 accumulation
// (AVX512_BF16's vdpbf16ps). docs/NUMERICS.md says what is rounded where and the error bound.
#pragma once
#include "growformer/export.hpp"

#include <cstddef>
#include <string>

GROWFORMER_API_BEGIN

namespace gf {
namespace kernels {

/// float32: every product in float32 (fused multiply-adds). bf16: the products of
/// gemm_short_k, gemm_acc_nd(_rows), gemm_acc_tnd, gemm_bias(_parts) (growformer/kernels.hpp:
/// linear layers, attention scores and outputs, the MLP and all their gradients) take their two
/// inputs rounded to bf16 (round to nearest even, subnormals to zero) and sum the exact
/// products in float32. Everything else (weights, optimizer state, softmax, norms, losses,
/// statistics) stays float32.
enum class Precision { float32, bf16 };

/// "float32" or "bf16".
const char* precision_name(Precision p);

/// Empty when bf16 products can run here; else why not, one sentence (the CPU lacks
/// AVX512_BF16, or the kernel set in use, GROWFORMER_ISA, is below avx512).
std::string bf16_unavailable_reason();
inline bool bf16_available() { return bf16_unavailable_reason().empty(); }

/// The bf16 kernels in use: "amx" (AMX-BF16 tiles, TDPBF16PS) where the CPU has them and Linux
/// grants the tiles, else "avx512_bf16" (vdpbf16ps); GROWFORMER_BF16=avx512_bf16|amx chooses
/// (amx where it cannot run falls back with a message; another value throws
/// std::invalid_argument naming the variable). Empty where bf16 cannot run.
std::string bf16_kernels_name();
/// Switches the bf16 kernels ("amx", "avx512_bf16"; tests compare them); false where that set
/// cannot run.
bool set_bf16_kernels(const std::string& name);

/// The products' precision, process-wide (every thread, every model). Setting bf16 where it
/// cannot run throws std::runtime_error with bf16_unavailable_reason(); set_simd to a set below
/// avx512 turns bf16 off.
void set_product_precision(Precision p);
Precision product_precision();

/// Sets P for its lifetime and restores the precision before it.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p) : old_(product_precision()) { set_product_precision(p); }
  ~PrecisionScope() { set_product_precision(old_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision old_;
};

/// X as the bf16 products take it, as a float: round to nearest even on the top 16 bits,
/// subnormals (and zeros) to a zero of X's sign, infinities kept, NaN quiet (vcvtneps2bf16).
/// Portable: runs on any CPU (the tests' reference).
float bf16_round(float x);
/// The same rounding by the instruction (y[j] = round(x[j])); false where bf16 cannot run.
bool bf16_round_simd(const float* x, float* y, size_t n);

/// Peak GFLOP/s of vdpbf16ps (a product counts 2 flops, as in fma_peak_gflops), measured like
/// fma_peak_gflops on THREADS threads; 0 where bf16 cannot run.
double bf16_peak_gflops(size_t threads, double seconds = 0.2);

}  // namespace kernels
}  // namespace gf

GROWFORMER_API_END
