#include "growformer/tensor.hpp"

#include "growformer/parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>

namespace gf {

size_t shape_size(const Shape& s) {
  size_t n = 1;
  for (size_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ")";
  return o.str();
}

namespace {

// Buffers are cached by size class (four classes per doubling, so at most 19% slack):
// training repeats similar shapes every step, so after the first steps almost every request is
// a reuse, also when batches have different sequence lengths. The cache is capped; past the cap
// freed buffers go back to the system.
size_t size_class(size_t n) {
  if (n <= 1024) return (n + 15) & ~static_cast<size_t>(15);
  size_t p = 1024;
  while (p * 2 < n) p *= 2;
  for (size_t q = 1; q <= 4; ++q) {
    size_t c = p + p * q / 4;
    if (c >= n) return (c + 15) & ~static_cast<size_t>(15);
  }
  return p * 2;
}

size_t cache_cap_bytes() {
  static size_t cap = [] {
    const char* env = std::getenv("GROWFORMER_POOL_MAX_MB");
    size_t mb = env ? std::strtoull(env, nullptr, 10) : 1024;
    return mb * 1024 * 1024;
  }();
  return cap;
}

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<float*>> free;
  PoolStats stats;
  size_t cached_bytes = 0;

  float* get(size_t n) {
    n = size_class(n);
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = free.find(n);
      if (it != free.end() && !it->second.empty()) {
        float* p = it->second.back();
        it->second.pop_back();
        stats.reuses++;
        cached_bytes -= n * sizeof(float);
        stats.bytes_live += n * sizeof(float);
        stats.bytes_peak = std::max(stats.bytes_peak, stats.bytes_live);
        return p;
      }
      stats.allocations++;
      stats.bytes_live += n * sizeof(float);
      stats.bytes_peak = std::max(stats.bytes_peak, stats.bytes_live);
    }
    size_t bytes = std::max<size_t>(64, ((n * sizeof(float) + 63) / 64) * 64);
    void* p = std::aligned_alloc(64, bytes);
    if (!p) {  // the cache's buffers of other sizes go back to the system first
      release();
      p = std::aligned_alloc(64, bytes);
    }
    if (!p) {
      std::lock_guard<std::mutex> lock(mu);
      stats.bytes_live -= n * sizeof(float);
      throw std::bad_alloc();
    }
    return static_cast<float*>(p);
  }
  // Every tensor's release (a shared_ptr deleter, so inside destructors) ends here: it must not
  // throw. Caching may allocate (a size class's first list, a longer list); when that fails, as
  // it does when memory runs out, the buffer goes back to the system instead of the cache.
  void put(float* p, size_t n) noexcept {
    n = size_class(n);
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.bytes_live -= n * sizeof(float);
      if (cached_bytes + n * sizeof(float) <= cache_cap_bytes()) {
        try {
          free[n].push_back(p);
          cached_bytes += n * sizeof(float);
          return;
        } catch (...) {  // std::bad_alloc: no room for the list entry, so not cached
        }
      }
    }
    std::free(p);
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& kv : free)
      for (float* p : kv.second) std::free(p);
    free.clear();
    cached_bytes = 0;
  }
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tensors may outlive static destruction
  return *p;
}

std::shared_ptr<float> alloc(size_t n) {
  float* p = pool().get(n);
  return std::shared_ptr<float>(p, [n](float* q) { pool().put(q, n); });
}

}  // namespace

PoolStats pool_stats() {
  std::lock_guard<std::mutex> lock(pool().mu);
  PoolStats s = pool().stats;
  s.bytes_cached = pool().cached_bytes;
  return s;
}
void pool_release_cached() { pool().release(); }

Tensor::Tensor(Shape shape, float fill_value) : shape_(std::move(shape)) {
  size_ = shape_size(shape_);
  buf_ = alloc(size_);
  fill(fill_value);
}

Tensor Tensor::empty(Shape shape) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.size_ = shape_size(t.shape_);
  t.buf_ = alloc(t.size_);
  return t;
}

Tensor Tensor::from(Shape shape, const std::vector<float>& values) {
  Tensor t = empty(std::move(shape));
  if (values.size() != t.size_)
    throw std::invalid_argument("Tensor::from: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(t.shape_));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::scalar(float v) { return Tensor({1}, v); }

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  Tensor t = empty(shape_);
  const float* src = data();
  float* dst = t.data();
  parallel_elementwise(
      size_, [&](size_t b, size_t e) { std::memcpy(dst + b, src + b, (e - b) * sizeof(float)); });
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_size(shape) != size_)
    throw std::invalid_argument("reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::fill(float v) {
  float* p = data();
  parallel_elementwise(size_, [&](size_t b, size_t e) {
    if (v == 0.0f)
      std::memset(p + b, 0, (e - b) * sizeof(float));
    else
      std::fill(p + b, p + e, v);
  });
}

void Tensor::add_(const Tensor& o) {
  if (o.size_ != size_)
    throw std::invalid_argument("add_: " + shape_str(shape_) + " vs " + shape_str(o.shape_));
  float* p = data();
  const float* q = o.data();
  parallel_elementwise(size_, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) p[i] += q[i];
  });
}

std::vector<float> Tensor::to_vector() const { return std::vector<float>(data(), data() + size_); }

}  // namespace gf
