// The hkt block's row kernels in the instruction set the core's kernels run: each call looks
// the set up (gf::kernels::active_isa(), one load), so GROWFORMER_ISA and set_simd reach these
// kernels as they reach the core's. A set's table is made the first time the set is chosen,
// and only then: its code may use instructions of that set.
#include <growformer/hkt/kernels.hpp>

#include <growformer/kernels.hpp>

#include "row_kernels.hpp"

namespace gf_hkt {
namespace kernels {

namespace {

const simd::RowKernels& active() {
  switch (gf::kernels::active_isa()) {
    case gf::kernels::Isa::avx512: {
      static const simd::RowKernels k = simd::row_kernels_avx512();
      return k;
    }
    case gf::kernels::Isa::avx2: {
      static const simd::RowKernels k = simd::row_kernels_avx2();
      return k;
    }
    case gf::kernels::Isa::sse2:
      break;
  }
  static const simd::RowKernels k = simd::row_kernels_sse2();
  return k;
}

}  // namespace

void exp_add_shift(float* y, const float* x, size_t n, float shift) {
  active().exp_add_shift(y, x, n, shift);
}
float add_max(float* y, const float* x, size_t n) { return active().add_max(y, x, n); }
void add_up2(float* y, const float* c, size_t n) { active().add_up2(y, c, n); }
float add_max_up2(float* y, const float* c, size_t n) { return active().add_max_up2(y, c, n); }
void exp_add_up2_shift(float* y, const float* c, size_t n, float shift) {
  active().exp_add_up2_shift(y, c, n, shift);
}
void fold_pairs2(float* out, const float* r0, const float* r1, size_t n) {
  active().fold_pairs2(out, r0, r1, n);
}
const char* isa_name() { return active().name; }

}  // namespace kernels
}  // namespace gf_hkt
