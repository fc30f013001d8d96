#include <cmath>

#include "growformer/optimizer.hpp"

namespace gf {

double clip_gradients(NamedParams& params, double max_norm) {
  if (max_norm <= 0) return 0;
  double sq = 0;
  for (auto& [n, p] : params)
    if (p.grad().defined())
      for (size_t i = 0; i < p.grad().size(); ++i) sq += double(p.grad()[i]) * p.grad()[i];
  double norm = std::sqrt(sq);
  if (norm > max_norm) {
    float f = static_cast<float>(max_norm / norm);
    for (auto& [n, p] : params)
      if (p.grad().defined()) {
        Tensor& g = p.grad_buf();
        for (size_t i = 0; i < g.size(); ++i) g[i] *= f;
      }
  }
  return norm;
}

}  // namespace gf
