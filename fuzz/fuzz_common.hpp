// Shared by the harnesses: inputs written to files (the readers take paths), an input split
// into parts, and the rule that only the project's own error types may escape a reader.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/registry.hpp"

namespace gf_fuzz {

/// A per-process scratch folder (tmpfs when there is one), removed at exit. The path lives on
/// the heap, never freed, so that the exit handler can still read it after static destructors.
inline const std::string& scratch() {
  static const std::string* dir = [] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* d = new std::string(base + "/gf_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return *dir;
}

inline std::string put(const std::string& name, const std::string& bytes) {
  std::string path = scratch() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

/// The input cut at every "\n%%\n" into at most `n` parts (missing parts are empty).
inline std::vector<std::string> split(const uint8_t* data, size_t size, size_t n) {
  std::string s(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() + 1 < n) {
    size_t p = s.find("\n%%\n", start);
    if (p == std::string::npos) break;
    parts.push_back(s.substr(start, p - start));
    start = p + 4;
  }
  parts.push_back(s.substr(start));
  parts.resize(n);
  return parts;
}

/// Runs f: ConfigError and RuntimeError are the expected answers to bad input; any other
/// exception (bad_alloc, length_error, out_of_range, ...) is a defect and aborts the run.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const gf::ConfigError&) {
  } catch (const gf::RuntimeError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
}

}  // namespace gf_fuzz

#ifdef GF_FUZZ_LINKED_PLUGIN
#include "growformer/plugin.hpp"
extern "C" const gf::PluginInfo* growformer_plugin_info();
namespace gf_fuzz {
/// A registry holding the components of the plugin compiled into this harness.
inline gf::Registry& linked_plugin_registry() {
  static gf::Registry* r = [] {
    auto* reg = new gf::Registry();
    growformer_plugin_info()->register_components(*reg);
    return reg;
  }();
  return *r;
}
/// Loads the dataset the YAML text describes; only the project's errors may escape.
inline void load_dataset(const std::string& yaml) {
  expect_clean([&] {
    gf::ConfigNode node = gf::ConfigNode::load_string(yaml);
    linked_plugin_registry().create_dataset(node, gf::DatasetBuild{1})->load();
  });
}
}  // namespace gf_fuzz
#endif
