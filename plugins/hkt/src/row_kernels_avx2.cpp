// The hkt block's row kernels for AVX2+FMA (compiled with that instruction set's flags, the core's:
// growformer_simd_sources in plugins/hkt/CMakeLists.txt).
#define GF_SIMD_ARCH xsimd::fma3<xsimd::avx2>
#include "row_kernels_impl.hpp"

gf_hkt::kernels::simd::RowKernels gf_hkt::kernels::simd::row_kernels_avx2() {
  return make_row_kernels("avx2");
}
