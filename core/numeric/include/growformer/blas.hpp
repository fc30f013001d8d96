// Matrix products through xtensor-blas (OpenBLAS underneath), and the BLAS
// kernel selection that runs before OpenBLAS initialises.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <string>

GROWFORMER_API_BEGIN

namespace gf {

/// C = alpha op(A) op(B) + beta C, row-major, single BLAS thread (the caller's thread).
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

/// The same product with the rows of C (m) split over the thread pool when large
/// enough; each row is computed by one thread, so results do not depend on the thread count.
void sgemm_rows(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                int lda, const float* b, int ldb, float beta, float* c, int ldc);

/// Name of the OpenBLAS kernel set in use ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_kernel_name();
/// OpenBLAS's own thread count (growformer keeps it at 1; the pool does the threading).
int blas_threads();
void blas_set_threads(int n);

/// Called first thing in main(): when this CPU has AVX-512 or AVX2, the user has not set
/// OPENBLAS_CORETYPE and OpenBLAS picked its generic fallback, re-executes the program with
/// the matching kernel set, verifies it with a GEMM self-test against a naive product, and
/// falls back to the default kernels if the test fails. Returns a one-line description.
std::string select_blas_kernels(int argc, char** argv);
/// What select_blas_kernels decided (for bench and metrics).
std::string blas_selection_note();

/// Max |C_blas - C_naive| of a small random product (self-test).
double blas_self_test_error();

/// Matrix-product FLOPs (2 m n k per product) done so far by sgemm, sgemm_rows and the
/// short-dimension kernels (kernels::gemm_*), process-wide; bench divides by step time.
uint64_t matmul_flops();
void add_matmul_flops(uint64_t flops);
/// SGEMM GFLOP/s of this machine with the pool's thread count: the best of a few
/// 1024 x 1024 x 1024 products split over the pool like sgemm_rows (about half a second).
double sgemm_peak_gflops();
/// The CPU's model name from /proc/cpuinfo ("unknown" elsewhere).
std::string cpu_model_name();

}  // namespace gf

GROWFORMER_API_END
