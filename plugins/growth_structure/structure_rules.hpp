// The structure rules' plugin (structure_rules.cpp): a width rule (mlp_onset.cpp) and a depth
// rule (depth_plateau.cpp), both editing through the structure editor's MLP-unit and block edits.
#pragma once
#include <growformer/registry.hpp>

/// Registers `mlp_onset`: every block's MLP widened by a factor at each check until the training
/// loss starts to fall (the learning onset), within the first part of the budget.
void register_mlp_onset(gf::Registry& r);
/// Registers `depth_plateau`: a block inserted (before the first, by default) when the validation
/// probe's loss has stopped falling, until an inserted block brings no gain.
void register_depth_plateau(gf::Registry& r);
