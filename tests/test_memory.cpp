// Out of memory: the tensor pool's release path (inside every tensor's destructor) while
// allocations fail, and a training step that runs out of memory (its allocations made to fail):
// exit 1 with a message naming the step, and the last checkpoint kept. This file replaces the
// global operator new (so it is a test program of its own) to make allocations fail on demand.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "growformer/checkpoint.hpp"
#include "growformer/tensor.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;

// An address-space limit and a replaced operator new do not mix with AddressSanitizer.
#if defined(__SANITIZE_ADDRESS__)
#define GF_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GF_TEST_SANITIZED 1
#endif
#endif

#ifndef GF_TEST_SANITIZED
#if defined(__GNUC__) && !defined(__clang__)
// the replacements below pair malloc with free; GCC sees free under an inlined `delete`
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
// While set, every operator new in this process fails: memory running out at a chosen moment.
// (The pool's buffers themselves come from aligned_alloc.)
std::atomic<bool> g_new_fails{false};
}  // namespace

void* operator new(std::size_t n) {
  if (g_new_fails.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("tensor pool: a buffer released while allocations fail goes back to the system") {
#ifdef GF_TEST_SANITIZED
  MESSAGE("sanitizer build: operator new is not replaced; skipped");
#else
  // a size class no other buffer of this program has: caching it needs a new list, an allocation
  const gf::Shape shape{4999999};
  const gf::PoolStats before = gf::pool_stats();
  {
    gf::Tensor t = gf::Tensor::empty(shape);
    g_new_fails = true;
  }  // released here, in the destructor, where a throw ends the process (std::terminate)
  g_new_fails = false;
  const gf::PoolStats after = gf::pool_stats();
  CHECK(after.bytes_live == before.bytes_live);
  CHECK(after.bytes_cached == before.bytes_cached);  // not cached: freed
  { gf::Tensor t = gf::Tensor::empty(shape); }       // with memory to spare, cached as before
  CHECK(gf::pool_stats().bytes_cached >= before.bytes_cached + shape[0] * sizeof(float));
  gf::pool_release_cached();
#endif
}

TEST_CASE(
    "training: out of memory in a step is exit 1 with a message, and the last checkpoint is kept") {
#ifdef GF_TEST_SANITIZED
  MESSAGE("sanitizer build: a preloaded allocator shim ahead of the sanitizer's runtime; skipped");
#else
  gf_test::TempDir d;
  // every step adds a head of d_k 1024, so every step asks for buffers of new sizes; once the
  // third checkpoint is in place every such allocation fails (an LD_PRELOAD shim), as when memory
  // runs out (a growth that would not fit is refused before it runs: test_train)
  std::ofstream(d.file("oom.yaml"))
      << "name: oom\nseed: 3\nthreads: 1\n"
         "data: {plugin: listops, train_size: 64, val_size: 16, test_size: 16, min_length: 4, "
         "max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 4, d_k: "
         "1024, "
         "max_heads: 64}}\n"
         "optimizer: {plugin: adamw, lr: 0.003}\n"
         "train: {steps: 60, batch_size: 64, warmup: 1, eval_every: 0, log_every: 1, check_every: "
         "1, "
         "checkpoint_every: 1}\n"
         "growth: {plugin: random, probability: 1, max_heads: 64}\n";
  const std::string run = d.file("run");
  gf_test::Shell r = gf_test::run_shell(
      "OPENBLAS_NUM_THREADS=1 GF_FAIL_ALLOC_AFTER_CHECKPOINTS=3 LD_PRELOAD=" +
      std::string(GF_FAIL_ALLOC_SHIM) + " timeout -s KILL 60 " + std::string(GF_BIN) + " train " +
      d.file("oom.yaml") + " --run-dir " + run + " --quiet");
  INFO(r.output);
  CHECK(r.status == 1);  // not 134 (an abort) nor 137
  CHECK(!has(r.output, "terminate called"));
  CHECK(has(r.output, "growformer train: error: out of memory at step "));
  CHECK(has(r.output, "lower train.batch_size"));
  CHECK(has(r.output, "The last checkpoint " + run +
                          "/checkpoints/last.safetensors is kept: continue with "
                          "`growformer resume " +
                          run + "`"));
  long failed = 0;
  std::sscanf(r.output.c_str() + r.output.find("at step ") + 8, "%ld", &failed);
  // the checkpoint is whole (it loads, its checksum holds) and from a step before the failing one
  gf::Checkpoint ck = gf::load_checkpoint(run + "/checkpoints/last.safetensors");
  const long saved = nlohmann::json::parse(ck.metadata.at("trainer")).at("step").get<long>();
  CHECK(saved == 3);
  CHECK(failed == 4);
  for (auto& e : fs::directory_iterator(run + "/checkpoints"))
    CHECK(!has(e.path().filename().string(), ".tmp"));
#endif
}
