// Row kernels for AVX2+FMA (compiled with that instruction set's flags; see core/CMakeLists.txt).
#define GF_SIMD_ARCH xsimd::fma3<xsimd::avx2>
#include "row_kernels_impl.hpp"

gf::kernels::simd::RowKernels gf::kernels::simd::row_kernels_avx2() {
  return make_row_kernels("avx2");
}
