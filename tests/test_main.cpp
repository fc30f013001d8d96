#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "testing.hpp"

#include "growformer/ops.hpp"

namespace gf_test {

gf::Var weighted_sum(const gf::Var& y, uint64_t seed) {
  gf::Var w = gf::constant(randn(y.shape(), seed));
  return gf::ops::sum(gf::ops::mul(y, w));
}

gf::Registry& registry() {
  static gf::Registry* r = [] {
    auto* reg = new gf::Registry();
    reg->load_directories({GF_PLUGIN_DIR});
    return reg;
  }();
  return *r;
}

}  // namespace gf_test
