// The products' precision (growformer/precision.hpp): whether bf16 can run, the switch the
// product kernels read (kernels.cpp), the portable bf16 rounding and the bf16 peak.
#include "growformer/precision.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "growformer/kernels.hpp"
#include "simd/bf16_kernels.hpp"

namespace gf {
namespace kernels {

namespace {
// The bf16 table while the products run in bf16, else null (read by every product call).
std::atomic<const simd::Bf16Kernels*> g_bf16{nullptr};

bool cpu_has_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
}

const simd::Bf16Kernels& bf16_table() {
  static const simd::Bf16Kernels t = simd::bf16_kernels_avx512();
  return t;
}
}  // namespace

namespace simd {
const Bf16Kernels* bf16_products() { return g_bf16.load(std::memory_order_relaxed); }
}  // namespace simd

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "float32"; }

std::string bf16_unavailable_reason() {
  if (!cpu_has_bf16())
    return "this CPU has no AVX512_BF16 (vdpbf16ps; /proc/cpuinfo lists avx512_bf16 where it "
           "does)";
  if (active_isa() != Isa::avx512)
    return "the kernel set in use is " + simd_note() +
           ", and the bf16 products are AVX-512 kernels (GROWFORMER_ISA=avx512 or unset)";
  return "";
}

void set_product_precision(Precision p) {
  if (p == Precision::bf16) {
    const std::string why = bf16_unavailable_reason();
    if (!why.empty()) throw std::runtime_error("bf16 products cannot run: " + why);
    g_bf16.store(&bf16_table(), std::memory_order_relaxed);
  } else {
    g_bf16.store(nullptr, std::memory_order_relaxed);
  }
}

Precision product_precision() {
  return g_bf16.load(std::memory_order_relaxed) ? Precision::bf16 : Precision::float32;
}

float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t exp = u & 0x7f800000u;
  if (exp == 0) {
    u &= 0x80000000u;  // zero or subnormal: a zero of its sign
  } else if (exp == 0x7f800000u) {
    if (u & 0x007fffffu) u |= 0x00400000u;  // NaN: quiet
    u &= 0xffff0000u;
  } else {
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // to nearest, ties to even
  }
  float y;
  std::memcpy(&y, &u, sizeof y);
  return y;
}

bool bf16_round_simd(const float* x, float* y, size_t n) {
  if (!bf16_available()) return false;
  bf16_table().round(x, y, n);
  return true;
}

double bf16_peak_gflops(size_t threads, double seconds) {
  if (!bf16_available()) return 0;
  const simd::Bf16Kernels& t = bf16_table();
  return simd::loop_peak_gflops(t.dot_loop, t.dot_loop_flops, threads, seconds);
}

}  // namespace kernels
}  // namespace gf
