// The loss: cross entropy over class logits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

Var cross_entropy(const Var& logits, const std::vector<int32_t>& labels) {
  size_t B = logits.dim(0), C = logits.dim(1);
  if (labels.size() != B) shape_error("cross_entropy", "labels size != batch");
  Tensor p = logits.value().clone();
  double loss = 0;
  for (size_t b = 0; b < B; ++b) {
    float* row = p.data() + b * C;
    int32_t y = labels[b];
    if (y < 0 || static_cast<size_t>(y) >= C)
      shape_error("cross_entropy",
                  "label " + std::to_string(y) + " outside [0, " + std::to_string(C) + ")");
    float mx = *std::max_element(row, row + C);
    double s = 0;
    for (size_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(row[c] - mx));
    double lse = mx + std::log(s);
    loss += lse - row[y];
    for (size_t c = 0; c < C; ++c) row[c] = static_cast<float>(std::exp(row[c] - lse));
  }
  auto grad_fn = [ll = logits, p, lab = std::make_shared<std::vector<int32_t>>(labels), B, C](
                     const Tensor& g, const Tensor&) mutable {
    float g0 = g[0] / B;
    float* gl = ll.grad_buf().data();
    for (size_t b = 0; b < B; ++b)
      for (size_t c = 0; c < C; ++c)
        gl[b * C + c] += g0 * (p[b * C + c] - (static_cast<int32_t>(c) == (*lab)[b] ? 1.0f : 0.0f));
  };
  return finish(Tensor::scalar(static_cast<float>(loss / B)), {&logits}, grad_fn);
}

}  // namespace ops
}  // namespace gf
