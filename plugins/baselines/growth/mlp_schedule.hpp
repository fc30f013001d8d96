// The MLP-width and depth baselines of the growth baselines' plugin (mlp_schedule.cpp,
// depth_schedule.cpp).
#pragma once
#include <growformer/registry.hpp>

/// Registers `mlp_schedule` (K units to every block's MLP at the given steps).
void register_mlp_schedule(gf::Registry& r);
/// Registers `depth_schedule` (a block inserted at a given index at the given steps;
/// depth_schedule.cpp).
void register_depth_schedule(gf::Registry& r);
