// xtensor views of growformer tensors, for translation units that want xtensor
// expressions. Heavy: include it in few .cpp files only.
#pragma once
#include "growformer/export.hpp"

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include "growformer/tensor.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// A 1-D xtensor adaptor over the tensor's storage (no copy, no ownership).
inline auto xflat(Tensor& t) {
  return xt::adapt(t.data(), t.size(), xt::no_ownership(), std::array<size_t, 1>{t.size()});
}
inline auto xflat(const Tensor& t) {
  return xt::adapt(const_cast<float*>(t.data()), t.size(), xt::no_ownership(),
                   std::array<size_t, 1>{t.size()});
}
/// An N-D adaptor with the tensor's shape.
inline auto xview(Tensor& t) {
  return xt::adapt(t.data(), t.size(), xt::no_ownership(), t.shape());
}

}  // namespace gf

GROWFORMER_API_END
