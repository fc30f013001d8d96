// The products' precision (growformer/precision.hpp): whether bf16 can run, the switch the
// product kernels read (kernels.cpp), the portable bf16 rounding and the bf16 peak.
#include "growformer/precision.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// AMX-BF16 and AMX-TILE (CPUID 7.0 EDX bits 22, 24), and Linux's leave to use the tiles' 8 KiB
// of state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; Linux 5.16 and later), asked once.
bool amx_usable() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

// The bf16 kernels: "amx" where AMX can run, else "avx512_bf16"; GROWFORMER_BF16 names one
// (avx512_bf16 where AMX is there but not wanted; amx where it cannot run falls back, saying so).
// GROWFORMER_BF16 ("" when unset); throws std::invalid_argument for a value that is no set.
std::string bf16_env() {
  const char* env = std::getenv("GROWFORMER_BF16");
  const std::string want = env ? env : "";
  if (!want.empty() && want != "amx" && want != "avx512_bf16")
    throw std::invalid_argument("GROWFORMER_BF16=" + want +
                                " is not a bf16 kernel set: use amx or avx512_bf16");
  return want;
}

const simd::Bf16Kernels* choose_table() {
  static const simd::Bf16Kernels avx = simd::bf16_kernels_avx512(), amx = simd::bf16_kernels_amx();
  const std::string want = bf16_env();
  if (want == "avx512_bf16") return &avx;
  if (amx_usable()) return &amx;
  if (want == "amx")
    std::fprintf(stderr,
                 "growformer: GROWFORMER_BF16=amx, but this CPU or system cannot run AMX tiles; "
                 "using avx512_bf16\n");
  return &avx;
}

const simd::Bf16Kernels*& bf16_choice() {
  static const simd::Bf16Kernels* t = choose_table();
  return t;
}
const simd::Bf16Kernels& bf16_table() { return *bf16_choice(); }
}  // namespace

std::string bf16_kernels_name() {
  bf16_env();  // a value that is no set is an error on any CPU
  return bf16_available() ? bf16_table().name : "";
}

bool set_bf16_kernels(const std::string& name) {
  if (!bf16_available()) return false;
  static const simd::Bf16Kernels avx = simd::bf16_kernels_avx512(), amx = simd::bf16_kernels_amx();
  const simd::Bf16Kernels* t = name == "avx512_bf16"           ? &avx
                               : name == "amx" && amx_usable() ? &amx
                                                               : nullptr;
  if (!t) return false;
  bf16_choice() = t;
  if (g_bf16.load()) g_bf16.store(t);
  return true;
}

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
