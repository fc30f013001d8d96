// The MLP-width and depth baselines of the growth baselines' plugin (mlp_schedule.cpp,
// depth_schedule.cpp).
#pragma once
#include <growformer/registry.hpp>

#include <cstdint>
#include <vector>

/// Registers `mlp_schedule` (K units to every block's MLP at the given steps).
void register_mlp_schedule(gf::Registry& r);
/// Registers `depth_schedule` (a block inserted at a given index at the given steps;
/// depth_schedule.cpp).
void register_depth_schedule(gf::Registry& r);

/// Checks a schedule's `at` (OPTIONS' key): not empty (WHAT names what happens at those steps,
/// for the message), every step >= 1, increasing; Options::fail names the key otherwise.
void check_schedule_steps(const gf::Options& o, const std::vector<int64_t>& at, const char* what);
