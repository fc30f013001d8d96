// The block rule of the pruning baselines' plugin (block_ablation.cpp).
#pragma once
#include <growformer/registry.hpp>

/// Registers `block_ablation` (a block whose leaving-out costs the probe little, removed).
void register_block_ablation(gf::Registry& r);
