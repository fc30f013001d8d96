// An entry point that claims a future ABI version.
#include <growformer/plugin.hpp>

static void reg(gf::Registry&) {}
extern "C" __attribute__((visibility("default"))) const gf::PluginInfo* growformer_plugin_info() {
  static const gf::PluginInfo info{GROWFORMER_ABI_VERSION + 98,
                                   sizeof(gf::PluginInfo),
                                   "wrong_abi",
                                   "9.9.9",
                                   GROWFORMER_FINGERPRINT,
                                   reg};
  return &info;
}
