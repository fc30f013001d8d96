// The only translation unit that includes xtensor-blas: GEMM goes through its
// cxxblas layer (CBLAS underneath). OpenBLAS's extension functions are declared
// here by hand because cblas.h cannot be included next to xtensor-blas.
#include "growformer/blas.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <xtensor-blas/xblas.hpp>

#include "growformer/parallel.hpp"

extern "C" {
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
}

namespace gf {

namespace {
std::atomic<uint64_t> g_flops{0};
}

uint64_t matmul_flops() { return g_flops.load(std::memory_order_relaxed); }
void add_matmul_flops(uint64_t flops) { g_flops.fetch_add(flops, std::memory_order_relaxed); }

void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  add_matmul_flops(2ull * m * n * k);
  if (k == 0) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cxxblas::gemm<int>(cxxblas::StorageOrder::RowMajor,
                     ta ? cxxblas::Transpose::Trans : cxxblas::Transpose::NoTrans,
                     tb ? cxxblas::Transpose::Trans : cxxblas::Transpose::NoTrans, m, n, k, alpha,
                     a, lda, b, ldb, beta, c, ldc);
}

void sgemm_rows(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc) {
  // Split only when every thread gets enough work to amortise a GEMM call.
  double flops = 2.0 * m * n * k;
  size_t threads = num_threads();
  if (threads <= 1 || flops < 4e6 || m < 64) {
    sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  size_t grain = std::max<size_t>(16, (m + threads * 4 - 1) / (threads * 4));
  parallel_chunks(m, grain, [&](size_t r0, size_t r1) {
    const float* ap = ta ? a + r0 : a + r0 * lda;
    sgemm(ta, tb, static_cast<int>(r1 - r0), n, k, alpha, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
  });
}

std::string blas_kernel_name() {
  const char* name = openblas_get_corename();
  std::string s = name ? name : "unknown";
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}
int blas_threads() { return openblas_get_num_threads(); }
void blas_set_threads(int n) { openblas_set_num_threads(n); }

double blas_self_test_error() {
  const int m = 67, n = 45, k = 131;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  uint32_t s = 12345;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  };
  for (auto& x : a) x = next();
  for (auto& x : b) x = next();
  double worst = 0;
  for (int variant = 0; variant < 2; ++variant) {
    bool tb = variant == 1;
    std::vector<float> bt(b);
    if (tb)
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < n; ++j) bt[j * k + i] = b[i * n + j];
    sgemm(false, tb, m, n, k, 1.0f, a.data(), k, bt.data(), tb ? k : n, 0.0f, c.data(), n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double ref = 0;
        for (int p = 0; p < k; ++p) ref += static_cast<double>(a[i * k + p]) * b[p * n + j];
        worst = std::max(worst, std::fabs(ref - c[i * n + j]));
      }
  }
  return worst;
}

double sgemm_peak_gflops() {
  const int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
    b[i] = static_cast<float>((i * 11) % 17) / 17.0f - 0.5f;
  }
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    sgemm_rows(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);  // the first one warms up
  }
  return best;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        std::string s = line.substr(p + 1);
        s.erase(0, s.find_first_not_of(' '));
        return s;
      }
    }
  return "unknown";
}

namespace {

std::string g_note;

bool cpu_has(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      line += ' ';
      return line.find(" " + flag + " ") != std::string::npos;
    }
  }
  return false;
}

bool generic_kernel(const std::string& name) {
  static const char* generic[] = {"Prescott", "Core2",     "Penryn",     "Dunnington", "Nehalem",
                                  "Atom",     "Katmai",    "Coppermine", "Northwood",  "Banias",
                                  "Opteron",  "Barcelona", "unknown"};
  for (const char* g : generic)
    if (strcasecmp(name.c_str(), g) == 0) return true;
  return false;
}

[[noreturn]] void reexec(char** argv) {
  execv("/proc/self/exe", argv);
  // execv only returns on failure; carry on would be wrong (state half-set), so report and exit.
  perror("growformer: re-executing to select BLAS kernels failed");
  std::exit(1);
}

}  // namespace

std::string select_blas_kernels(int, char** argv) {
  // growformer does its own threading; OpenBLAS stays single-threaded inside it.
  openblas_set_num_threads(1);
  const char* stage = std::getenv("GROWFORMER_BLAS_STAGE");
  std::string kernel = blas_kernel_name();
  if (stage && std::string(stage) == "selected") {
    // We re-executed with a kernel set of our choosing: verify it.
    double err = blas_self_test_error();
    if (std::getenv("GROWFORMER_BLAS_SELFTEST_FAIL")) err = INFINITY;  // exercises the fallback
    if (!(err < 1e-3)) {
      unsetenv("OPENBLAS_CORETYPE");
      setenv("GROWFORMER_BLAS_STAGE", "fallback", 1);
      setenv("GROWFORMER_BLAS_FAILED", (kernel + " self-test error " + std::to_string(err)).c_str(),
             1);
      reexec(argv);
    }
    g_note =
        kernel + " (selected automatically; GEMM self-test max error " + std::to_string(err) + ")";
    return g_note;
  }
  if (stage && std::string(stage) == "fallback") {
    const char* why = std::getenv("GROWFORMER_BLAS_FAILED");
    g_note = kernel +
             " (OpenBLAS default; automatic selection failed: " + std::string(why ? why : "?") +
             ")";
    return g_note;
  }
  if (std::getenv("OPENBLAS_CORETYPE")) {
    g_note = kernel + " (OPENBLAS_CORETYPE set by the user)";
    return g_note;
  }
  if (std::getenv("GROWFORMER_NO_BLAS_SELECT")) {
    g_note = kernel + " (OpenBLAS default; GROWFORMER_NO_BLAS_SELECT set)";
    return g_note;
  }
  // GROWFORMER_BLAS_ASSUME_GENERIC exercises the selection on CPUs OpenBLAS already recognises
  if (generic_kernel(kernel) || std::getenv("GROWFORMER_BLAS_ASSUME_GENERIC")) {
    const char* want = nullptr;
    if (cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl"))
      want = "SkylakeX";
    else if (cpu_has("avx2") && cpu_has("fma"))
      want = "Haswell";
    if (want) {
      setenv("OPENBLAS_CORETYPE", want, 1);
      setenv("GROWFORMER_BLAS_STAGE", "selected", 1);
      reexec(argv);
    }
  }
  g_note = kernel + " (OpenBLAS default)";
  return g_note;
}

std::string blas_selection_note() { return g_note.empty() ? blas_kernel_name() : g_note; }

}  // namespace gf
