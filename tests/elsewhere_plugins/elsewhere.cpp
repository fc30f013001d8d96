// A working growth policy built outside the plugin search path, so that a test run finds it
// only through --plugin-path (and a resume only through the run's plugins.lock).
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <memory>
#include <vector>

namespace {
struct NeverGrows : gf::GrowthPolicy {
  std::vector<gf::Edit> check(const gf::TrainView&) override { return {}; }
};
void reg(gf::Registry& r) {
  r.add_growth({"elsewhere_none", "never grows (a plugin found only through its folder)", {}},
               [](const gf::Options&) { return std::make_unique<NeverGrows>(); });
}
}  // namespace
GROWFORMER_PLUGIN("elsewhere", "1.0.0", reg)
