// The MLP-unit rule of the pruning baselines' plugin (mlp_magnitude.cpp).
#pragma once
#include <growformer/registry.hpp>

/// Registers `mlp_magnitude` (MLP units of small ||fc1 column|| x ||fc2 row|| removed).
void register_mlp_magnitude(gf::Registry& r);
