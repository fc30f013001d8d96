// Shape ops: reshape, transpose_last2, slice_last, concat_last, sum_all.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

Var reshape(const Var& x, Shape shape) {
  Tensor y = x.value().reshaped(std::move(shape));
  auto grad_fn = [xx = x](const Tensor& g, const Tensor&) mutable { xx.add_grad(g); };
  return finish(y, {&x}, grad_fn);
}

Var transpose_last2(const Var& x) {
  size_t nd = x.shape().size();
  if (nd < 2) shape_error("transpose_last2", "need >= 2 dims");
  size_t m = x.shape()[nd - 2], n = x.shape()[nd - 1], batch = x.size() / (m * n);
  Shape os = x.shape();
  std::swap(os[nd - 2], os[nd - 1]);
  Tensor y = Tensor::empty(os);
  const float* X = x.value().data();
  for (size_t b = 0; b < batch; ++b)
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) y[b * m * n + j * m + i] = X[b * m * n + i * n + j];
  auto grad_fn = [xx = x, m, n, batch](const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t b = 0; b < batch; ++b)
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) gx[b * m * n + i * n + j] += g[b * m * n + j * m + i];
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var slice_last(const Var& x, size_t begin, size_t end) {
  size_t d = last_dim(x), rows = x.size() / d;
  if (begin > end || end > d) shape_error("slice_last", "range out of bounds");
  size_t w = end - begin;
  Shape os = x.shape();
  os.back() = w;
  Tensor y = Tensor::empty(os);
  for (size_t i = 0; i < rows; ++i)
    std::memcpy(y.data() + i * w, x.value().data() + i * d + begin, w * 4);
  auto grad_fn = [xx = x, rows, d, w, begin](const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < w; ++j) gx[i * d + begin + j] += g[i * w + j];
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var concat_last(const std::vector<Var>& xs) {
  if (xs.empty()) shape_error("concat_last", "no inputs");
  size_t rows = xs[0].size() / last_dim(xs[0]);
  size_t total = 0;
  for (auto& x : xs) {
    if (x.size() / last_dim(x) != rows) shape_error("concat_last", "row count mismatch");
    total += last_dim(x);
  }
  Shape os = xs[0].shape();
  os.back() = total;
  Tensor y = Tensor::empty(os);
  size_t off = 0;
  for (auto& x : xs) {
    size_t w = last_dim(x);
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(y.data() + i * total + off, x.value().data() + i * w, w * 4);
    off += w;
  }
  bool req = false;
  for (auto& x : xs) req = req || x.requires_grad();
  auto grad_fn = [ins = std::make_shared<std::vector<Var>>(xs), rows, total](
                     const Tensor& g, const Tensor&) mutable {
    size_t off = 0;
    for (auto& x : *ins) {
      size_t w = last_dim(x);
      if (x.requires_grad()) {
        float* gx = x.grad_buf().data();
        for (size_t i = 0; i < rows; ++i)
          for (size_t j = 0; j < w; ++j) gx[i * w + j] += g[i * total + off + j];
      }
      off += w;
    }
  };
  return finish(std::move(y), req, grad_fn);
}

Var sum_all(const std::vector<Var>& xs) {
  if (xs.empty()) shape_error("sum_all", "no inputs");
  Tensor y = xs[0].value().clone();
  for (size_t i = 1; i < xs.size(); ++i) {
    if (xs[i].size() != y.size()) shape_error("sum_all", "shape mismatch");
    y.add_(xs[i].value());
  }
  bool req = false;
  for (auto& x : xs) req = req || x.requires_grad();
  auto grad_fn = [ins = std::make_shared<std::vector<Var>>(xs)](const Tensor& g,
                                                                const Tensor&) mutable {
    for (auto& x : *ins)
      if (x.requires_grad()) x.add_grad(g);
  };
  return finish(std::move(y), req, grad_fn);
}

}  // namespace ops
}  // namespace gf
