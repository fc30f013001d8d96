// Embedding, positions and pooling: embedding, add_positions, prepend, masked_mean_pool,
// select_position.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

Var embedding(const std::vector<int32_t>& ids, size_t batch, size_t seq, const Var& table) {
  if (ids.size() != batch * seq) shape_error("embedding", "ids size != batch * seq");
  size_t vocab = table.dim(0), d = table.dim(1);
  Tensor y = Tensor::empty({batch, seq, d});
  const float* W = table.value().data();
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= vocab)
      shape_error("embedding", "token id " + std::to_string(id) + " outside the vocabulary of " +
                                   std::to_string(vocab));
    std::memcpy(y.data() + i * d, W + static_cast<size_t>(id) * d, d * sizeof(float));
  }
  auto grad_fn = [tt = table, idv = std::make_shared<std::vector<int32_t>>(ids), d](
                     const Tensor& g, const Tensor&) mutable {
    float* gw = tt.grad_buf().data();
    for (size_t i = 0; i < idv->size(); ++i) {
      float* row = gw + static_cast<size_t>((*idv)[i]) * d;
      for (size_t j = 0; j < d; ++j) row[j] += g[i * d + j];
    }
  };
  return finish(std::move(y), {&table}, grad_fn);
}

Var add_positions(const Var& x, const Var& pos) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (pos.dim(0) < T || pos.dim(1) != d)
    shape_error("add_positions", "sequence of " + std::to_string(T) + " positions but only " +
                                     std::to_string(pos.dim(0)) + " learned (model.max_len)");
  Tensor y = x.value().clone();
  const float* P = pos.value().data();
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T * d; ++i) y[b * T * d + i] += P[i];
  auto grad_fn = [xx = x, pp = pos, B, T, d](const Tensor& g, const Tensor&) mutable {
    if (xx.requires_grad()) xx.add_grad(g);
    if (pp.requires_grad()) {
      float* gp = pp.grad_buf().data();
      for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < T * d; ++i) gp[i] += g[b * T * d + i];
    }
  };
  return finish(std::move(y), {&x, &pos}, grad_fn);
}

Var prepend(const Var& x, const Var& v) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (v.size() != d) shape_error("prepend", "vector size != d");
  Tensor y = Tensor::empty({B, T + 1, d});
  for (size_t b = 0; b < B; ++b) {
    std::memcpy(y.data() + b * (T + 1) * d, v.value().data(), d * 4);
    std::memcpy(y.data() + b * (T + 1) * d + d, x.value().data() + b * T * d, T * d * 4);
  }
  auto grad_fn = [xx = x, vv = v, B, T, d](const Tensor& g, const Tensor&) mutable {
    for (size_t b = 0; b < B; ++b) {
      const float* gb = g.data() + b * (T + 1) * d;
      if (vv.requires_grad())
        for (size_t j = 0; j < d; ++j) vv.grad_buf()[j] += gb[j];
      if (xx.requires_grad()) {
        float* gx = xx.grad_buf().data() + b * T * d;
        for (size_t i = 0; i < T * d; ++i) gx[i] += gb[d + i];
      }
    }
  };
  return finish(std::move(y), {&x, &v}, grad_fn);
}

Var masked_mean_pool(const Var& x, const std::vector<uint8_t>& mask) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (!mask.empty() && mask.size() != B * T) shape_error("masked_mean_pool", "mask size");
  Tensor y(Shape{B, d}, 0.0f);
  std::vector<float> inv(B);
  for (size_t b = 0; b < B; ++b) {
    size_t cnt = 0;
    for (size_t t = 0; t < T; ++t) {
      if (!mask.empty() && !mask[b * T + t]) continue;
      cnt++;
      const float* xr = x.value().data() + (b * T + t) * d;
      for (size_t j = 0; j < d; ++j) y[b * d + j] += xr[j];
    }
    inv[b] = cnt ? 1.0f / cnt : 0.0f;
    for (size_t j = 0; j < d; ++j) y[b * d + j] *= inv[b];
  }
  auto grad_fn = [xx = x, m = std::make_shared<std::vector<uint8_t>>(mask), inv, B, T, d](
                     const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T; ++t) {
        if (!m->empty() && !(*m)[b * T + t]) continue;
        for (size_t j = 0; j < d; ++j) gx[(b * T + t) * d + j] += g[b * d + j] * inv[b];
      }
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var select_position(const Var& x, size_t t) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (t >= T) shape_error("select_position", "position out of range");
  Tensor y = Tensor::empty({B, d});
  for (size_t b = 0; b < B; ++b)
    std::memcpy(y.data() + b * d, x.value().data() + (b * T + t) * d, d * 4);
  auto grad_fn = [xx = x, B, T, d, t](const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t b = 0; b < B; ++b)
      for (size_t j = 0; j < d; ++j) gx[(b * T + t) * d + j] += g[b * d + j];
  };
  return finish(std::move(y), {&x}, grad_fn);
}

}  // namespace ops
}  // namespace gf
