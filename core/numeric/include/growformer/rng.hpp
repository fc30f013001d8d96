// The core's own random numbers: identical on every standard library.
// One stream per component: Rng(seed, "component-name").
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <string>

#include "growformer/tensor.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0);
  Rng(uint64_t seed, const std::string& stream);

  uint64_t next_u64();
  uint32_t next_u32() { return static_cast<uint32_t>(next_u64() >> 32); }
  /// Uniform in [0, 1).
  double uniform();
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n);
  /// Standard normal (Box-Muller on our own uniforms).
  double normal();

  /// Fills with N(0, std^2).
  void fill_normal(Tensor& t, float std);
  void fill_uniform(Tensor& t, float lo, float hi);

  /// Skips N draws of next_u64 (as many uniform() calls) in O(log N): what N draws would
  /// leave behind, without drawing them.
  void discard(uint64_t n);

  /// Two words that restore the stream exactly.
  uint64_t state() const { return s_; }
  uint64_t increment() const { return inc_; }
  void restore(uint64_t state, uint64_t inc) {
    s_ = state;
    inc_ = inc;
  }

 private:
  uint64_t s_ = 0, inc_ = 1;
};

/// 64-bit FNV-1a, for deriving stream ids from names.
uint64_t hash_name(const std::string& s);

}  // namespace gf

GROWFORMER_API_END
