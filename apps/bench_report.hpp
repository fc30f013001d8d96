// The text report of `growformer bench` (without --json), from the JSON it prints with --json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gfapp {

/// Prints OUT (bench's JSON; COMPARE: the --compare attention, or empty) as text.
void print_bench(const nlohmann::json& out, const std::string& compare);

}  // namespace gfapp
