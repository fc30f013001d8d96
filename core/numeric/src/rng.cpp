#include "growformer/rng.hpp"

#include <cmath>

namespace gf {

// PCG-XSL-RR-like 64-bit output from a 64-bit LCG state with a per-stream
// increment: small, fast, identical everywhere.
namespace {
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

Rng::Rng(uint64_t seed, uint64_t stream) {
  inc_ = (mix(stream + 0x9e3779b97f4a7c15ULL) << 1) | 1u;
  s_ = mix(seed ^ 0xda3e39cb94b95bdbULL) + inc_;
  next_u64();
}

Rng::Rng(uint64_t seed, const std::string& stream) : Rng(seed, hash_name(stream)) {}

uint64_t Rng::next_u64() {
  s_ = s_ * 6364136223846793005ULL + inc_;
  return mix(s_);
}

void Rng::discard(uint64_t n) {
  // the LCG s -> a s + c applied n times is s -> A s + C, built by squaring (a, c)
  uint64_t a = 6364136223846793005ULL, c = inc_, A = 1, C = 0;
  while (n) {
    if (n & 1) {
      A *= a;
      C = C * a + c;
    }
    c = (a + 1) * c;
    a *= a;
    n >>= 1;
  }
  s_ = A * s_ + C;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

uint64_t Rng::below(uint64_t n) {
  if (n <= 1) return 0;
  // rejection to avoid modulo bias
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

double Rng::normal() {
  double u1, u2;
  do u1 = uniform();
  while (u1 <= 1e-300);
  u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  double th = 6.283185307179586 * u2;
  // no cached second value: the two state words alone restore the stream
  return r * std::cos(th);
}

void Rng::fill_normal(Tensor& t, float std) {
  float* p = t.data();
  for (size_t i = 0; i < t.size(); ++i) p[i] = static_cast<float>(normal() * std);
}

void Rng::fill_uniform(Tensor& t, float lo, float hi) {
  float* p = t.data();
  for (size_t i = 0; i < t.size(); ++i) p[i] = static_cast<float>(lo + (hi - lo) * uniform());
}

}  // namespace gf
