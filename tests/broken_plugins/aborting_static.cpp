// A library whose static initialiser ends the process while it is being loaded (as an
// exception nothing can catch does, exit status 134): only a child process may meet it.
#include <growformer/plugin.hpp>

#include <cstdio>
#include <cstdlib>

namespace {
struct Aborts {
  Aborts() {
    std::fputs("aborting from a static initialiser\n", stderr);
    std::abort();
  }
};
const Aborts aborts;
void reg(gf::Registry&) {}
}  // namespace
GROWFORMER_PLUGIN("aborting_static", "1.0.0", reg)
