// The structure rules' plugin library: mlp_onset and depth_plateau.
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include "structure_rules.hpp"

namespace {

void register_structure_rules(gf::Registry& r) {
  register_mlp_onset(r);
  register_depth_plateau(r);
}

}  // namespace

GROWFORMER_PLUGIN("growth_structure", "0.1.0", register_structure_rules)
