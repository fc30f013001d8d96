// The hkt block's row kernels for AVX-512F+DQ (compiled with that instruction set's flags, the
// core's: growformer_simd_sources in plugins/hkt/CMakeLists.txt).
#define GF_SIMD_ARCH xsimd::avx512f
#include "row_kernels_impl.hpp"

gf_hkt::kernels::simd::RowKernels gf_hkt::kernels::simd::row_kernels_avx512() {
  return make_row_kernels("avx512");
}
