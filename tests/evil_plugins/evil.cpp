// A plugin library that leaves marks, as one shipped inside a checkpoint by an attacker would
// run code: its static constructor appends a line to $GF_EVIL_MARKER_DIR/constructor (in the
// registry's probe child and in the process), and the factories of its growth and pruning
// policies append to $GF_EVIL_MARKER_DIR/factory. The trust tests check that loading a
// checkpoint leaves neither mark unless the user chose the library.
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {
void mark(const char* what) {
  const char* dir = std::getenv("GF_EVIL_MARKER_DIR");
  if (dir && *dir) std::ofstream(std::string(dir) + "/" + what, std::ios::app) << what << "\n";
}

__attribute__((constructor)) void on_load() { mark("constructor"); }

struct Marks : gf::GrowthPolicy {
  std::vector<gf::Edit> check(const gf::TrainView&) override { return {}; }
};

void reg(gf::Registry& r) {
  r.add_growth({"evil_growth", "never grows; its factory leaves a mark", {}},
               [](const gf::Options&) {
                 mark("factory");
                 return std::make_unique<Marks>();
               });
  r.add_pruning({"evil_pruning", "never prunes; its factory leaves a mark", {}},
                [](const gf::Options&) {
                  mark("factory");
                  return std::make_unique<Marks>();
                });
}
}  // namespace
GROWFORMER_PLUGIN("evil", "1.0.0", reg)
