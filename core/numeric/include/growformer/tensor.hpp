// Dense float32 tensors: row-major, shape + shared pooled storage.
//
// Storage comes from a size-bucketed pool so that the training loop, which
// allocates the same shapes every step, does not hit malloc/mmap per op.
// Heavy xtensor expressions live in a few translation units: include
// <growformer/tensor_xt.hpp> there to view a Tensor as an xtensor adaptor.
#pragma once
#include "growformer/export.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

GROWFORMER_API_BEGIN

namespace gf {

using Shape = std::vector<size_t>;

size_t shape_size(const Shape& s);
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  /// A tensor of the given shape filled with `fill`.
  explicit Tensor(Shape shape, float fill = 0.0f);
  /// A tensor of the given shape whose contents are unspecified (pool reuse).
  static Tensor empty(Shape shape);
  static Tensor from(Shape shape, const std::vector<float>& values);
  static Tensor scalar(float v);

  const Shape& shape() const { return shape_; }
  size_t dim(size_t i) const { return shape_.at(i); }
  size_t ndim() const { return shape_.size(); }
  size_t size() const { return size_; }
  bool defined() const { return static_cast<bool>(buf_); }

  float* data() { return buf_.get(); }
  const float* data() const { return buf_.get(); }
  float& operator[](size_t i) { return buf_.get()[i]; }
  float operator[](size_t i) const { return buf_.get()[i]; }
  float item() const { return buf_.get()[0]; }

  /// Deep copy.
  Tensor clone() const;
  /// Same storage, new shape of equal size.
  Tensor reshaped(Shape shape) const;
  void fill(float v);
  void zero() { fill(0.0f); }
  /// this += other (same size).
  void add_(const Tensor& other);
  std::vector<float> to_vector() const;

 private:
  std::shared_ptr<float> buf_;
  Shape shape_;
  size_t size_ = 0;
};

/// Returns pooled float buffers; exposed for statistics and tests.
struct PoolStats {
  size_t allocations = 0;  // fresh allocations from the system
  size_t reuses = 0;       // buffers served from the pool
  size_t bytes_live = 0;
  size_t bytes_peak = 0;
  size_t bytes_cached = 0;  // freed buffers kept for reuse (capped, GROWFORMER_POOL_MAX_MB)
};
PoolStats pool_stats();
/// Frees every cached (unused) buffer.
void pool_release_cached();

}  // namespace gf

GROWFORMER_API_END
