// Row kernels for AVX-512F+DQ (compiled with that instruction set's flags; see
// core/CMakeLists.txt).
#define GF_SIMD_ARCH xsimd::avx512f
#include "row_kernels_impl.hpp"

gf::kernels::simd::RowKernels gf::kernels::simd::row_kernels_avx512() {
  return make_row_kernels("avx512");
}
