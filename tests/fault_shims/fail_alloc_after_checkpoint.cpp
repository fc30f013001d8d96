// LD_PRELOAD shim for the out-of-memory tests: with GF_FAIL_ALLOC_AFTER_CHECKPOINTS=N, every
// aligned_alloc of 1 MiB or more (the tensor pool's buffers) fails, as it does when memory runs
// out, once the Nth checkpoint has moved into place (the Nth rename onto a `*.safetensors`).
#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace {
std::atomic<int> g_checkpoints{0};
}

extern "C" int rename(const char* from, const char* to) {
  using Rename = int (*)(const char*, const char*);
  static Rename real = reinterpret_cast<Rename>(dlsym(RTLD_NEXT, "rename"));
  const int rc = real(from, to);
  const size_t n = std::strlen(to), ext = std::strlen(".safetensors");
  if (rc == 0 && n >= ext && std::strcmp(to + n - ext, ".safetensors") == 0) ++g_checkpoints;
  return rc;
}

extern "C" void* aligned_alloc(size_t alignment, size_t size) {
  using Alloc = void* (*)(size_t, size_t);
  static Alloc real = reinterpret_cast<Alloc>(dlsym(RTLD_NEXT, "aligned_alloc"));
  const char* after = std::getenv("GF_FAIL_ALLOC_AFTER_CHECKPOINTS");
  if (after && size >= (size_t(1) << 20) && g_checkpoints.load() >= std::atoi(after))
    return nullptr;
  return real(alignment, size);
}
