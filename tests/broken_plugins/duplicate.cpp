// Registers the optimizer name `adamw`, which the optim plugin already owns.
#include <growformer/plugin.hpp>

namespace {
struct Dummy : gf::Optimizer {
  void step(gf::NamedParams&, float) override {}
  void forget(const std::vector<std::string>&) override {}
  std::map<std::string, gf::Tensor> state_tensors() const override { return {}; }
  std::map<std::string, double> state_scalars() const override { return {}; }
  void load_state(const std::map<std::string, gf::Tensor>&, const std::map<std::string, double>&,
                  const gf::NamedParams&) override {}
};
void reg(gf::Registry& r) {
  r.add_optimizer({"adamw", "a second adamw", {}},
                  [](const gf::Options&) { return std::make_unique<Dummy>(); });
}
}  // namespace
GROWFORMER_PLUGIN("duplicate", "1.0.0", reg)
