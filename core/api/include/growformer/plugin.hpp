// The plugin ABI: one extern "C" entry point per library returning a plain,
// versioned struct. The loader checks abi_version and struct_size first, then
// the build fingerprint, then calls register_components.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>

#include "growformer/registry.hpp"
#include "growformer/version.hpp"

GROWFORMER_API_BEGIN

namespace gf {

struct PluginInfo {
  uint32_t abi_version;     // GROWFORMER_ABI_VERSION of the core the plugin was built against
  uint32_t struct_size;     // sizeof(PluginInfo) as the plugin saw it
  const char* name;         // plugin (library) name
  const char* version;      // plugin version
  const char* fingerprint;  // compiler, standard library, core version
  void (*register_components)(Registry& registry);
};

}  // namespace gf

#define GROWFORMER_ENTRY_POINT growformer_plugin_info
#define GROWFORMER_ENTRY_POINT_NAME "growformer_plugin_info"

/// Declares the library's entry point. Use once per plugin library:
///   GROWFORMER_PLUGIN("my_plugin", "1.0.0", register_my_components)
#define GROWFORMER_PLUGIN(NAME, VERSION, REGISTER_FN)                       \
  extern "C" __attribute__((visibility("default"))) const ::gf::PluginInfo* \
  growformer_plugin_info() {                                                \
    static const ::gf::PluginInfo info{GROWFORMER_ABI_VERSION,              \
                                       sizeof(::gf::PluginInfo),            \
                                       NAME,                                \
                                       VERSION,                             \
                                       GROWFORMER_FINGERPRINT,              \
                                       REGISTER_FN};                        \
    return &info;                                                           \
  }

GROWFORMER_API_END
