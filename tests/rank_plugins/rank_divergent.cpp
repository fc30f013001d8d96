// A growth policy that breaks the rule every policy must keep under data-parallel training:
// it decides from the process's rank (OMPI_COMM_WORLD_RANK), growing a head at the first check
// on rank 1 only. The MPI tests use it to see the trainer stop with a clear message when the
// processes' models diverge. Built into this folder, never on the plugin search path.
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

class RankDivergent : public gf::GrowthPolicy {
 public:
  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (done_ || !rank || std::string(rank) != "1") return {};
    done_ = true;
    gf::Edit e;
    e.kind = gf::Edit::Kind::AddHead;
    e.block = 0;
    e.init.mode = "random";
    e.cause.type = "grow";
    e.cause.numbers = {{"step", double(view.step)}};
    return {e};
  }

 private:
  bool done_ = false;
};

void reg(gf::Registry& r) {
  r.add_growth(
      {"rank_divergent", "grows a head on rank 1 only (a test of the divergence check)", {}},
      [](const gf::Options&) { return std::make_unique<RankDivergent>(); });
}

}  // namespace

GROWFORMER_PLUGIN("rank_divergent", "1.0.0", reg)
