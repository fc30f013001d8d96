// Run-time choice of the vectorised row kernels (core/src/simd/) and the row
// softmax built on them.
#include "growformer/kernels.hpp"
#include "growformer/parallel.hpp"

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <thread>
#include <vector>

#include "growformer/blas.hpp"
#include "growformer/precision.hpp"
#include "simd/bf16_kernels.hpp"
#include "simd/row_kernels.hpp"

namespace gf {
namespace kernels {

namespace {

bool cpu_can(const std::string& name) {
  auto av = xsimd::available_architectures();
  if (name == "sse2") return av.sse2;
  if (name == "avx2") return av.fma3_avx2;
  if (name == "avx512") return av.avx512f && av.avx512dq;
  return false;
}

simd::RowKernels table_for(const std::string& name) {
  if (name == "avx512") return simd::row_kernels_avx512();
  if (name == "avx2") return simd::row_kernels_avx2();
  return simd::row_kernels_sse2();
}

std::string best_available() {
  auto all = simd_available();
  return all.empty() ? "sse2" : all.back();
}

// The kernel set in use and why (the note `--version` and `bench` print).
std::string g_note;

// GROWFORMER_ISA (or its older name GROWFORMER_SIMD), in the environment.
std::string choose_isa() {
  const char* var = "GROWFORMER_ISA";
  const char* env = std::getenv(var);
  if (!env || !*env) {
    const char* old = std::getenv("GROWFORMER_SIMD");
    if (old && *old) var = "GROWFORMER_SIMD", env = old;
  }
  return resolve_isa(var, env, &g_note);
}

Isa isa_named(const std::string& name) {
  if (name == "avx512") return Isa::avx512;
  if (name == "avx2") return Isa::avx2;
  return Isa::sse2;
}

// The kernel table in use and its set's name as an Isa, switched together.
struct ActiveSet {
  simd::RowKernels table;
  Isa isa;
};
ActiveSet set_named(const std::string& name) { return {table_for(name), isa_named(name)}; }

ActiveSet& active_set() {
  static ActiveSet a = set_named(choose_isa());
  return a;
}
simd::RowKernels& active() { return active_set().table; }

size_t default_block_rows() {
  if (const char* env = std::getenv("GROWFORMER_ATTN_ROWS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (v > 0 && end && *end == '\0') return static_cast<size_t>(v);
    std::fprintf(stderr,
                 "growformer: GROWFORMER_ATTN_ROWS=%s is not a positive whole number; using 128\n",
                 env);
  }
  return 128;
}

size_t g_block_rows = default_block_rows();
constexpr size_t kKeyBlockBytes = 256 * 1024;
size_t g_key_block_bytes = kKeyBlockBytes;

}  // namespace

std::string resolve_isa(const std::string& var, const char* value, std::string* note) {
  const std::string best = best_available();
  std::string why;
  std::string chosen = best;
  if (!value || !*value) {
    why = best + " (the widest this CPU runs)";
  } else {
    std::string want;
    for (const char* c = value; *c; ++c)
      want += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    if (want != "sse2" && want != "avx2" && want != "avx512")
      throw std::invalid_argument(var + "=" + value +
                                  " is not a kernel set: use sse2, avx2 or avx512");
    const std::string set = var + "=" + value;
    if (cpu_can(want)) {
      chosen = want;
      why = want + " (" + set + "; this CPU runs up to " + best + ")";
    } else {
      std::fprintf(stderr,
                   "growformer: %s is above what this CPU runs; capped to %s, the widest it has\n",
                   set.c_str(), best.c_str());
      why = best + " (" + set + " capped: this CPU runs up to " + best + ")";
    }
  }
  if (note) *note = why;
  return chosen;
}

std::vector<std::string> simd_available() {
  std::vector<std::string> out;
  for (const char* n : {"sse2", "avx2", "avx512"})
    if (cpu_can(n)) out.push_back(n);
  return out;
}

std::string simd_name() { return active().name; }
Isa active_isa() { return active_set().isa; }

std::string simd_note() {
  const std::string name = active().name;
  return g_note.rfind(name, 0) == 0 ? g_note : name + " (set by the program)";
}

bool set_simd(const std::string& name) {
  if (name == "best") {
    active_set() = set_named(best_available());
    return true;
  }
  if (!cpu_can(name)) return false;
  active_set() = set_named(name);
  if (name != "avx512") set_product_precision(Precision::float32);  // bf16 runs AVX-512 kernels
  return true;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

namespace simd {
double loop_peak_gflops(float (*loop)(size_t), double round_flops, size_t threads, double seconds) {
  if (threads == 0) threads = 1;
  const size_t chunk = 1u << 16;  // iterations per call: about 0.1 ms
  loop(chunk);                    // warm up (frequency, caches)
  std::vector<double> rate(threads, 0.0);
  std::vector<float> sink(threads, 0.0f);
  auto work = [&](size_t t) {
    double best = 0;
    auto start = std::chrono::steady_clock::now();
    // the best of 10 rounds, each at least SECONDS / 10 of this thread's CPU time (on a shared
    // machine the thread is preempted; its CPU time counts only the cycles it ran)
    for (int round = 0; round < 10; ++round) {
      size_t calls = 0;
      const double t0 = thread_cpu_seconds();
      double el = 0;
      do {
        sink[t] += loop(chunk);
        ++calls;
        el = thread_cpu_seconds() - t0;
      } while (el < seconds / 10);
      best = std::max(best, static_cast<double>(calls) * chunk * round_flops / el);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
          2 * seconds)
        break;
    }
    rate[t] = best;
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  double sum = 0;
  for (double r : rate) sum += r;
  volatile float keep = 0;
  for (float x : sink) keep = keep + x;
  (void)keep;
  return sum / 1e9;
}
}  // namespace simd

double fma_peak_gflops(size_t threads, double seconds) {
  simd::RowKernels& k = active();
  return simd::loop_peak_gflops(k.fma_loop, k.fma_loop_flops, threads, seconds);
}

size_t attention_block_rows() { return g_block_rows; }
void set_attention_block_rows(size_t rows) {
  g_block_rows = rows == 0 ? default_block_rows() : rows;
}
size_t attention_key_block_bytes() { return g_key_block_bytes; }
void set_attention_key_block_bytes(size_t bytes) {
  g_key_block_bytes = bytes == 0 ? kKeyBlockBytes : bytes;
}

float row_max(const float* x, size_t n) { return active().max(x, n); }
float exp_shift_sum(float* x, size_t n, float shift) { return active().exp_shift_sum(x, n, shift); }
void exp_shift(float* x, size_t n, float shift) { active().exp_shift(x, n, shift); }
void scale_row(float* x, size_t n, float s) { active().scale(x, n, s); }
void softmax_grad_row(float* ds, const float* p, size_t n, float dot, float s) {
  active().softmax_grad(ds, p, n, dot, s);
}
float dot(const float* a, const float* b, size_t n) { return active().dot(a, b, n); }
void layer_norm_rows(const float* x, size_t rows, size_t d, const float* gamma, const float* beta,
                     float eps, float* y, float* stats) {
  active().layer_norm(x, rows, d, gamma, beta, eps, y, stats);
}
void layer_norm_grad_rows(const float* x, const float* g, const float* stats, size_t rows, size_t d,
                          const float* gamma, float* gx) {
  active().layer_norm_grad(x, g, stats, rows, d, gamma, gx);
}
void layer_norm_param_grad(const float* x, const float* g, const float* stats, size_t rows,
                           size_t d, float* ggamma, float* gbeta) {
  active().layer_norm_param_grad(x, g, stats, rows, d, ggamma, gbeta);
}
void axpy(float* y, const float* x, size_t n, float a) { active().axpy(y, x, n, a); }
void mul_add_rows(float* y, size_t ldy, const float* x, size_t ldx, const float* w, size_t rows,
                  size_t c) {
  active().mul_add_rows(y, ldy, x, ldx, w, rows, c);
}
void dot_rows(float* acc, const float* g, size_t ldg, const float* x, size_t ldx, size_t rows,
              size_t c) {
  active().dot_rows(acc, g, ldg, x, ldx, rows, c);
}
void transpose(const float* x, size_t rows, size_t cols, float* xt) {
  constexpr size_t kRows = 8;
  size_t r0 = 0;
  for (; r0 + kRows <= rows; r0 += kRows)
    for (size_t c = 0; c < cols; ++c) {
      float* o = xt + c * rows + r0;
      for (size_t r = 0; r < kRows; ++r) o[r] = x[(r0 + r) * cols + c];
    }
  for (; r0 < rows; ++r0)
    for (size_t c = 0; c < cols; ++c) xt[c * rows + r0] = x[r0 * cols + c];
}
void transpose_tiled(const float* x, size_t rows, size_t cols, size_t ldx, float* xt, size_t ldxt) {
  constexpr size_t kTile = 16;
  for (size_t r0 = 0; r0 < rows; r0 += kTile) {
    const size_t r1 = std::min(rows, r0 + kTile);
    for (size_t c0 = 0; c0 < cols; c0 += kTile) {
      const size_t c1 = std::min(cols, c0 + kTile);
      for (size_t c = c0; c < c1; ++c)
        for (size_t r = r0; r < r1; ++r) xt[c * ldxt + r] = x[r * ldx + c];
    }
  }
}
void gelu(const float* x, float* y, size_t n) { active().gelu(x, y, n); }
void gelu_grad(const float* x, const float* g, float* gx, size_t n, bool accumulate) {
  active().gelu_grad(x, g, gx, n, accumulate);
}

namespace {
// The kernels' view of PANELS (null when there are none).
const simd::PanelView* view_of(const Panels* panels, simd::PanelView& v) {
  if (!panels || panels->empty()) return nullptr;
  v = {panels->data.data(), panels->nb, panels->n, panels->len};
  return &v;
}

thread_local std::vector<float> t_panel_cache;  // the storage of this thread's last Panels
}  // namespace

Panels::~Panels() {
  if (data.capacity() > t_panel_cache.capacity()) t_panel_cache.swap(data);
}

Panels pack_panels(size_t m, size_t len, size_t n, const float* y, size_t ldy, bool short_k) {
  Panels p;
  if (simd::bf16_products()) return p;  // the bf16 products pack their own operands
  const size_t nb = active().panel_width(m, len, n, short_k);
  if (nb == 0) return p;
  p.nb = nb, p.n = n, p.len = len;
  p.data.swap(t_panel_cache);
  p.data.resize(len * n);
  // panel by panel, each len rows of its width, the panels over the pool (the copy ran alone
  // while the other threads waited for the product)
  parallel_for((n + nb - 1) / nb, [&](size_t panel) {
    const size_t c0 = panel * nb, w = std::min(nb, n - c0);
    float* o = p.data.data() + len * c0;
    for (size_t q = 0; q < len; ++q) std::memcpy(o + q * w, y + q * ldy + c0, w * sizeof(float));
  });
  return p;
}

void gemm_short_k(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                  const float* bt, size_t ldb, float* c, size_t ldc, const Panels* panels) {
  add_matmul_flops(2ull * m * n * d);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_short_k(m, n, d, alpha, a, lda, bt, ldb, c, ldc, nullptr);
  simd::PanelView v;
  active().gemm_short_k(m, n, d, alpha, a, lda, bt, ldb, c, ldc, view_of(panels, v), nullptr);
}
void gemm_short_k_max(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                      const float* bt, size_t ldb, float* c, size_t ldc, float* rowmax) {
  add_matmul_flops(2ull * m * n * d);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_short_k(m, n, d, alpha, a, lda, bt, ldb, c, ldc, rowmax);
  active().gemm_short_k(m, n, d, alpha, a, lda, bt, ldb, c, ldc, nullptr, rowmax);
}
void gemm_acc_nd_rows(size_t m, size_t n, size_t d, const float* alpha, const float* x, size_t ldx,
                      const float* y, size_t ldy, float* c, size_t ldc) {
  add_matmul_flops(2ull * m * n * d);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_acc_nd_rows(m, n, d, alpha, x, ldx, y, ldy, c, ldc);
  active().gemm_acc_nd_rows(m, n, d, alpha, x, ldx, y, ldy, c, ldc);
}
void gemm_acc_nd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                 const float* y, size_t ldy, float* c, size_t ldc, const Panels* panels) {
  add_matmul_flops(2ull * m * n * d);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_acc_nd(m, n, d, alpha, x, ldx, y, ldy, c, ldc);
  simd::PanelView v;
  active().gemm_acc_nd(m, n, d, alpha, x, ldx, y, ldy, c, ldc, view_of(panels, v));
}
void gemm_acc_tnd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                  const float* y, size_t ldy, float* c, size_t ldc) {
  add_matmul_flops(2ull * m * n * d);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_acc_tnd(m, n, d, alpha, x, ldx, y, ldy, c, ldc);
  active().gemm_acc_tnd(m, n, d, alpha, x, ldx, y, ldy, c, ldc);
}

void gemm_bias(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w, size_t ldw,
               const float* bias, float* c, size_t ldc, const Panels* panels) {
  add_matmul_flops(2ull * m * n * k);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_bias(m, n, k, x, ldx, w, ldw, bias, c, ldc);
  simd::PanelView v;
  active().gemm_bias(m, n, k, x, ldx, w, ldw, bias, c, ldc, view_of(panels, v));
}

void gemm_bias_parts(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                     size_t ldw, const float* bias, const size_t* off, size_t parts,
                     float* const* dst, const Panels* panels) {
  add_matmul_flops(2ull * m * n * k);
  if (const simd::Bf16Kernels* b = simd::bf16_products())
    return b->gemm_bias_parts(m, n, k, x, ldx, w, ldw, bias, off, parts, dst);
  simd::PanelView v;
  active().gemm_bias_parts(m, n, k, x, ldx, w, ldw, bias, off, parts, dst, view_of(panels, v));
}

bool softmax_row(float* row, size_t n, const uint8_t* valid) {
  if (valid)
    for (size_t j = 0; j < n; ++j)
      if (!valid[j]) row[j] = -INFINITY;
  float mx = row_max(row, n);
  if (mx == -INFINITY) {  // nothing valid: an all-zero row (NaN scores propagate)
    std::memset(row, 0, n * sizeof(float));
    return false;
  }
  float s = exp_shift_sum(row, n, mx);
  scale_row(row, n, 1.0f / s);
  return true;
}

}  // namespace kernels
}  // namespace gf
