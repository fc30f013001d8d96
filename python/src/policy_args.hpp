// What the `python` plugin hands the policy bridge (libgrowformer_pypolicy.so) to build one
// policy. Both sides are built together from this tree.
#pragma once

#include <string>
#include <vector>

#include <growformer/config.hpp>
#include <growformer/growth.hpp>

namespace gfpy {

struct PolicyArgs {
  std::string role;                // "growth" or "pruning"
  std::string class_path;          // "module.Class" (module may be dotted)
  std::string class_where;         // file:line:col of `class`, for messages
  std::vector<std::string> paths;  // folders put in front of sys.path (resolved)
  gf::ConfigNode options;          // the mapping passed to the class as keyword arguments
  std::string options_where;
  std::string python_dir;  // the folder holding the package: `import growformer` in a policy
};

/// The bridge's entry point: a policy calling the Python class, or ConfigError/RuntimeError.
using MakePolicyFn = gf::GrowthPolicy* (*)(const PolicyArgs& args);
constexpr const char* kMakePolicySymbol = "growformer_python_policy";

}  // namespace gfpy
