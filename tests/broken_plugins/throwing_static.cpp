// A library whose static initialiser throws while it is being loaded (before any entry point
// runs): uncaught, it would end the process that loads it.
#include <growformer/plugin.hpp>

#include <stdexcept>

namespace {
struct Explodes {
  Explodes() { throw std::runtime_error("boom from a static initialiser"); }
};
const Explodes explodes;
void reg(gf::Registry&) {}
}  // namespace
GROWFORMER_PLUGIN("throwing_static", "1.0.0", reg)
