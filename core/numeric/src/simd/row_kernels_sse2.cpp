// Row kernels for SSE2 (compiled with that instruction set's flags; see core/CMakeLists.txt).
#define GF_SIMD_ARCH xsimd::sse2
#include "row_kernels_impl.hpp"

gf::kernels::simd::RowKernels gf::kernels::simd::row_kernels_sse2() {
  return make_row_kernels("sse2");
}
