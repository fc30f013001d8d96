// A dataset whose factory throws.
#include <growformer/plugin.hpp>

#include <stdexcept>

namespace {
void reg(gf::Registry& r) {
  r.add_dataset({"exploding", "always fails to build", {}},
                [](const gf::Options&, const gf::DatasetBuild&) -> std::unique_ptr<gf::Dataset> {
                  throw std::runtime_error("boom from the factory");
                });
}
}  // namespace
GROWFORMER_PLUGIN("throwing_factory", "1.0.0", reg)
