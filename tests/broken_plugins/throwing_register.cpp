// A register callback that registers one component, then throws.
#include <growformer/plugin.hpp>

#include <stdexcept>

namespace {
struct NoEdits : gf::GrowthPolicy {
  std::vector<gf::Edit> check(const gf::TrainView&) override { return {}; }
};
void reg(gf::Registry& r) {
  r.add_growth({"half_registered", "", {}},
               [](const gf::Options&) { return std::make_unique<NoEdits>(); });
  throw std::runtime_error("boom from register");
}
}  // namespace
GROWFORMER_PLUGIN("throwing_register", "1.0.0", reg)
