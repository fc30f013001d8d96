// Right ABI, but built by "another compiler".
#include <growformer/plugin.hpp>

static void reg(gf::Registry&) {}
extern "C" __attribute__((visibility("default"))) const gf::PluginInfo* growformer_plugin_info() {
  static const gf::PluginInfo info{GROWFORMER_ABI_VERSION,
                                   sizeof(gf::PluginInfo),
                                   "bad_fp",
                                   "1.0.0",
                                   "othercc-1/otherlib-1/core-0.0.0",
                                   reg};
  return &info;
}
