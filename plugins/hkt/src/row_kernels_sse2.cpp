// The hkt block's row kernels for SSE2 (compiled with that instruction set's flags, the core's:
// growformer_simd_sources in plugins/hkt/CMakeLists.txt).
#define GF_SIMD_ARCH xsimd::sse2
#include "row_kernels_impl.hpp"

gf_hkt::kernels::simd::RowKernels gf_hkt::kernels::simd::row_kernels_sse2() {
  return make_row_kernels("sse2");
}
