// growth `none` and pruning `none`: the fixed architecture of the config.
#include <growformer/plugin.hpp>

namespace {

using namespace gf;

class NoEdits : public GrowthPolicy {
 public:
  std::vector<Edit> check(const TrainView&) override { return {}; }
};

void register_components(Registry& r) {
  r.add_growth({"none", "never adds a head", {}},
               [](const Options&) { return std::make_unique<NoEdits>(); });
  r.add_pruning({"none", "never removes a head", {}},
                [](const Options&) { return std::make_unique<NoEdits>(); });
}

}  // namespace

GROWFORMER_PLUGIN("growth_none", "0.1.0", register_components)
