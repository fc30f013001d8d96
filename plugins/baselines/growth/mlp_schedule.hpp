// The MLP-width baseline of the growth baselines' plugin (mlp_schedule.cpp).
#pragma once
#include <growformer/registry.hpp>

/// Registers `mlp_schedule` (K units to every block's MLP at the given steps).
void register_mlp_schedule(gf::Registry& r);
