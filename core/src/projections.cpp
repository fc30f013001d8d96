#include "growformer/projections.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "growformer/ops.hpp"

namespace gf {

QkvProjections::QkvProjections(Module& owner, const HeadShape& shape, Rng& rng) : shape_(shape) {
  const size_t d = shape_.d_model, dk = shape_.d_k, dv = shape_.d_v;
  const size_t nqk = shape_.share_qk ? 1 : std::max<size_t>(1, shape_.levels);
  const float bound = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t l = 0; l < nqk; ++l) {
    const std::string sfx = l == 0 ? "" : "_l" + std::to_string(l);
    Tensor wq({d, dk}), wk({d, dk});
    rng.fill_uniform(wq, -bound, bound);
    rng.fill_uniform(wk, -bound, bound);
    w_q_.push_back(owner.register_parameter("w_q" + sfx, wq));
    b_q_.push_back(owner.register_parameter("b_q" + sfx, Tensor({dk}, 0.0f)));
    w_k_.push_back(owner.register_parameter("w_k" + sfx, wk));
    b_k_.push_back(owner.register_parameter("b_k" + sfx, Tensor({dk}, 0.0f)));
  }
  Tensor wv({d, dv});
  rng.fill_uniform(wv, -bound, bound);
  w_v_ = owner.register_parameter("w_v", wv);
  b_v_ = owner.register_parameter("b_v", Tensor({dv}, 0.0f));
}

QkvProjections::Projected QkvProjections::project(const std::vector<Var>& levels) const {
  const size_t L = std::min(shape_.levels, levels.size());
  Projected p;
  p.q.reserve(L);
  p.k.reserve(L);
  for (size_t l = 0; l < L; ++l) {
    const size_t i = shape_.share_qk ? 0 : l;
    p.q.push_back(ops::linear(levels[l], w_q_[i], &b_q_[i]));
    p.k.push_back(ops::linear(levels[l], w_k_[i], &b_k_[i]));
  }
  p.v = ops::linear(levels[0], w_v_, &b_v_);
  return p;
}

const Var* QkvProjections::w_q(size_t level) const {
  return level < w_q_.size() ? &w_q_[level] : (shape_.share_qk ? &w_q_[0] : nullptr);
}

const Var* QkvProjections::w_k(size_t level) const {
  return level < w_k_.size() ? &w_k_[level] : (shape_.share_qk ? &w_k_[0] : nullptr);
}

void QkvProjections::initialize(const HeadInit& init, Rng& rng) {
  const size_t d = shape_.d_model, dk = shape_.d_k;
  const float qk_std = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t l = 0; l < w_q_.size(); ++l) {
    rng.fill_normal(w_q_[l].value(), qk_std);
    rng.fill_normal(w_k_[l].value(), qk_std);
    b_q_[l].value().zero();
    b_k_[l].value().zero();
  }
  if (init.mode == "directed" && init.direction.size() == d) {
    // the new head looks first along the direction it was grown for
    double norm = 0;
    for (float x : init.direction) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    if (norm > 0)
      for (size_t i = 0; i < d; ++i)
        w_q_[0].value()[i * dk] = static_cast<float>(init.direction[i] / norm);
  }
  if (init.value_variance >= 0)
    rng.fill_normal(w_v_.value(), static_cast<float>(std::sqrt(init.value_variance)));
  b_v_.value().zero();
}

}  // namespace gf
