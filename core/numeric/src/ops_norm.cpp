// Reductions and normalisations: sum, mean, softmax, layer norm.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "growformer/kernels.hpp"
#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

Var sum(const Var& x) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x.value()[i];
  auto grad_fn = [xx = x](const Tensor& g, const Tensor&) mutable {
    float g0 = g[0];
    float* gx = xx.grad_buf().data();
    for (size_t i = 0; i < xx.size(); ++i) gx[i] += g0;
  };
  return finish(Tensor::scalar(static_cast<float>(s)), {&x}, grad_fn);
}

Var mean(const Var& x) { return scale(sum(x), 1.0f / static_cast<float>(x.size())); }

Var softmax(const Var& x) {
  size_t d = last_dim(x), rows = x.size() / d;
  Tensor y = x.value().clone();
  parallel_chunks(rows, 64, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) kernels::softmax_row(y.data() + i * d, d, nullptr);
  });
  auto grad_fn = [xx = x, d, rows](const Tensor& g, const Tensor& res) mutable {
    float* gx = xx.grad_buf().data();
    const float* Y = res.data();
    for (size_t i = 0; i < rows; ++i) {
      double dot = 0;
      for (size_t j = 0; j < d; ++j) dot += static_cast<double>(g[i * d + j]) * Y[i * d + j];
      for (size_t j = 0; j < d; ++j)
        gx[i * d + j] += Y[i * d + j] * (g[i * d + j] - static_cast<float>(dot));
    }
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, float eps) {
  size_t d = last_dim(x), rows = x.size() / d;
  if (gamma.size() != d || beta.size() != d) shape_error("layer_norm", "gamma/beta size");
  Tensor y = Tensor::empty(x.shape());
  Tensor stats = Tensor::empty({rows, 2});  // mean, rstd
  const float* X = x.value().data();
  const float* G = gamma.value().data();
  const float* Bt = beta.value().data();
  parallel_chunks(rows, 256, [&](size_t b, size_t e) {
    kernels::layer_norm_rows(X + b * d, e - b, d, G, Bt, eps, y.data() + b * d,
                             stats.data() + 2 * b);
  });
  auto grad_fn = [xx = x, gg = gamma, bb = beta, stats, d, rows](const Tensor& g,
                                                                 const Tensor&) mutable {
    const float* X = xx.value().data();
    const float* G = gg.value().data();
    if (xx.requires_grad()) {
      float* gx = xx.grad_buf().data();
      parallel_chunks(rows, 256, [&](size_t b, size_t e) {
        kernels::layer_norm_grad_rows(X + b * d, g.data() + b * d, stats.data() + 2 * b, e - b, d,
                                      G, gx + b * d);
      });
    }
    float* ggam = gg.requires_grad() ? gg.grad_buf().data() : nullptr;
    float* gbet = bb.requires_grad() ? bb.grad_buf().data() : nullptr;
    if (ggam || gbet) {  // fixed blocks of rows: the sums do not depend on the split
      const float* Gr = g.data();
      const float* st = stats.data();
      const std::vector<float> sum =
          fixed_row_block_sums(rows, 2 * d, [&](size_t r0, size_t r1, float* part) {
            kernels::layer_norm_param_grad(X + r0 * d, Gr + r0 * d, st + 2 * r0, r1 - r0, d,
                                           ggam ? part : nullptr, gbet ? part + d : nullptr);
          });
      for (size_t j = 0; j < d; ++j) {
        if (ggam) ggam[j] += sum[j];
        if (gbet) gbet[j] += sum[d + j];
      }
    }
  };
  return finish(std::move(y), {&x, &gamma, &beta}, grad_fn);
}

}  // namespace ops
}  // namespace gf
