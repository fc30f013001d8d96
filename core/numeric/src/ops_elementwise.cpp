// Elementwise ops: add, sub, mul, lerp, the unary activations, scaling, dropout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "growformer/kernels.hpp"
#include "growformer/rng.hpp"
#include "growformer/tensor_xt.hpp"
#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

Var add(const Var& a, const Var& b) {
  bool same = a.size() == b.size();
  size_t d = b.size();
  if (!same && (a.size() % d != 0 || last_dim(a) != d))
    shape_error("add", shape_str(a.shape()) + " + " + shape_str(b.shape()));
  Tensor y = Tensor::empty(a.shape());
  const float* A = a.value().data();
  const float* Bv = b.value().data();
  float* Y = y.data();
  if (same) {
    parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) Y[i] = A[i] + Bv[i];
    });
  } else {  // b over the rows of a
    parallel_chunks(a.size() / d, 256, [&](size_t r0, size_t r1) {
      for (size_t i = r0; i < r1; ++i)
        for (size_t j = 0; j < d; ++j) Y[i * d + j] = A[i * d + j] + Bv[j];
    });
  }
  auto grad_fn = [aa = a, bb = b, same, d](const Tensor& g, const Tensor&) mutable {
    if (aa.requires_grad()) aa.add_grad(g);
    if (bb.requires_grad()) {
      if (same) {
        bb.add_grad(g);
      } else {
        add_column_sums(g.data(), g.size() / d, d, bb.grad_buf().data());
      }
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

Var sub(const Var& a, const Var& b) {
  if (a.size() != b.size()) shape_error("sub", shape_str(a.shape()) + " - " + shape_str(b.shape()));
  Tensor y = a.value().clone();
  auto yx = xflat(y);
  yx -= xflat(b.value());
  auto grad_fn = [aa = a, bb = b](const Tensor& g, const Tensor&) mutable {
    if (aa.requires_grad()) aa.add_grad(g);
    if (bb.requires_grad()) {
      auto gb = xflat(bb.grad_buf());
      gb -= xflat(g);
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

Var mul(const Var& a, const Var& b) {
  bool scalar = b.size() == 1 && a.size() != 1;
  if (!scalar && a.size() != b.size())
    shape_error("mul", shape_str(a.shape()) + " * " + shape_str(b.shape()));
  Tensor y = Tensor::empty(a.shape());
  if (scalar) {
    const float s = b.value()[0];
    const float* A = a.value().data();
    float* Y = y.data();
    parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) Y[i] = A[i] * s;
    });
  } else {
    const float* A = a.value().data();
    const float* Bv = b.value().data();
    float* Y = y.data();
    parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) Y[i] = A[i] * Bv[i];
    });
  }
  auto grad_fn = [aa = a, bb = b, scalar](const Tensor& g, const Tensor&) mutable {
    size_t n = g.size();
    if (scalar) {
      const float s = bb.value()[0];
      if (aa.requires_grad()) {
        float* ga = aa.grad_buf().data();
        const float* G = g.data();
        parallel_elementwise(n, [&](size_t lo, size_t hi) {
          for (size_t i = lo; i < hi; ++i) ga[i] += G[i] * s;
        });
      }
      if (bb.requires_grad()) {
        const float* G = g.data();
        const float* A = aa.value().data();
        bb.grad_buf()[0] += static_cast<float>(
            fixed_block_sum(n, [&](size_t i) { return static_cast<double>(G[i]) * A[i]; }));
      }
      return;
    }
    const float* G = g.data();
    if (aa.requires_grad()) {
      float* ga = aa.grad_buf().data();
      const float* Bv = bb.value().data();
      parallel_elementwise(n, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) ga[i] += G[i] * Bv[i];
      });
    }
    if (bb.requires_grad()) {
      float* gb = bb.grad_buf().data();
      const float* A = aa.value().data();
      parallel_elementwise(n, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) gb[i] += G[i] * A[i];
      });
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

Var lerp(const Var& a, const Var& b, const Var& t) {
  if (a.size() != b.size())
    shape_error("lerp", shape_str(a.shape()) + " vs " + shape_str(b.shape()));
  if (t.size() != 1) shape_error("lerp", "t must be a scalar, got " + shape_str(t.shape()));
  Tensor y = Tensor::empty(a.shape());
  const float s = t.value()[0];
  const float* A = a.value().data();
  const float* Bv = b.value().data();
  float* Y = y.data();
  parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) Y[i] = A[i] + (Bv[i] - A[i]) * s;
  });
  auto grad_fn = [aa = a, bb = b, tt = t](const Tensor& g, const Tensor&) mutable {
    const size_t n = g.size();
    const float s = tt.value()[0];
    const float* G = g.data();
    if (aa.requires_grad()) add_grad_terms(aa, n, [&](size_t i) { return G[i] - G[i] * s; });
    if (bb.requires_grad()) add_grad_terms(bb, n, [&](size_t i) { return G[i] * s; });
    if (tt.requires_grad()) {
      const float* A = aa.value().data();
      const float* Bv = bb.value().data();
      tt.grad_buf()[0] += static_cast<float>(
          fixed_block_sum(n, [&](size_t i) { return static_cast<double>(G[i]) * (Bv[i] - A[i]); }));
    }
  };
  return finish(std::move(y), {&a, &b, &t}, grad_fn);
}

namespace {
// y = f(x) elementwise with dy/dx = df(x, y).
template <class F, class DF>
Var unary(const Var& x, F f, DF df) {
  Tensor y = Tensor::empty(x.shape());
  const float* X = x.value().data();
  float* Y = y.data();
  size_t n = x.size();
  parallel_elementwise(n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) Y[i] = f(X[i]);
  });
  auto grad_fn = [xx = x, df, n](const Tensor& g, const Tensor& res) mutable {
    const float* X = xx.value().data();
    const float* Y = res.data();
    const float* G = g.data();
    add_grad_terms(xx, n, [&](size_t i) { return G[i] * df(X[i], Y[i]); });
  };
  return finish(std::move(y), {&x}, grad_fn);
}
}  // namespace

Var scale(const Var& a, float s) {
  return unary(
      a, [s](float x) { return x * s; }, [s](float, float) { return s; });
}

Var add_scalar(const Var& a, float s) {
  return unary(
      a, [s](float x) { return x + s; }, [](float, float) { return 1.0f; });
}

Var gelu(const Var& x) {
  Tensor y = Tensor::empty(x.shape());
  size_t n = x.size();
  const float* X = x.value().data();
  // fixed 16 Ki blocks (an element's bits depend on neither its place nor the thread count)
  parallel_for(fixed_blocks(n), [&](size_t c) {
    size_t b = c * kBlock, e = std::min(n, b + kBlock);
    kernels::gelu(X + b, y.data() + b, e - b);
  });
  auto grad_fn = [xx = x, n](const Tensor& g, const Tensor&) mutable {
    bool fresh = false;
    float* gx = xx.grad_buf_for_write(fresh).data();  // written, not zeroed, when fresh
    const float* X = xx.value().data();
    parallel_for(fixed_blocks(n), [&](size_t c) {
      size_t b = c * kBlock, e = std::min(n, b + kBlock);
      kernels::gelu_grad(X + b, g.data() + b, gx + b, e - b, !fresh);
    });
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var sigmoid(const Var& x) {
  return unary(
      x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); },
      [](float, float y) { return y * (1.0f - y); });
}

Var relu(const Var& x) {
  return unary(
      x, [](float v) { return v > 0.0f ? v : 0.0f; },
      [](float v, float) { return v > 0.0f ? 1.0f : 0.0f; });
}

Var tanh(const Var& x) {
  return unary(
      x, [](float v) { return std::tanh(v); }, [](float, float y) { return 1.0f - y * y; });
}

Var dropout(const Var& x, float p, Rng& rng) { return dropout(x, p, rng, 0, 0); }

Var dropout(const Var& x, float p, Rng& rng, size_t rows_before, size_t rows_after) {
  if (p <= 0.0f) return x;
  if (p >= 1.0f) throw std::invalid_argument("dropout: p must be < 1");
  Tensor mask = Tensor::empty(x.shape());
  size_t per_row = x.shape().empty() || x.dim(0) == 0 ? 0 : x.size() / x.dim(0);
  float keep = 1.0f / (1.0f - p);
  rng.discard(static_cast<uint64_t>(rows_before) * per_row);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = rng.uniform() < p ? 0.0f : keep;
  rng.discard(static_cast<uint64_t>(rows_after) * per_row);
  return mul(x, constant(mask));
}

}  // namespace ops
}  // namespace gf
