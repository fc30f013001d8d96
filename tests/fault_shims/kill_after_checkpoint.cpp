// LD_PRELOAD shim for the crash-window tests: with GF_KILL_AFTER_CHECKPOINTS=N, the process
// kills itself with SIGKILL (as kill -9 would) right after its Nth rename onto a
// `*.safetensors` file, that is after the Nth checkpoint moved into place.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" int rename(const char* from, const char* to) {
  using Rename = int (*)(const char*, const char*);
  static Rename real = reinterpret_cast<Rename>(dlsym(RTLD_NEXT, "rename"));
  static int written = 0;
  const int rc = real(from, to);
  const char* want = std::getenv("GF_KILL_AFTER_CHECKPOINTS");
  const size_t n = std::strlen(to), ext = std::strlen(".safetensors");
  if (rc == 0 && want && n >= ext && std::strcmp(to + n - ext, ".safetensors") == 0 &&
      ++written == std::atoi(want))
    ::kill(::getpid(), SIGKILL);
  return rc;
}
