#include "growformer/projections.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
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

namespace {
bool g_fused_projections = true;
}  // namespace

void set_fused_projections(bool on) { g_fused_projections = on; }
bool fused_projections() { return g_fused_projections; }

QkvProjections::Projected QkvProjections::project(const std::vector<Var>& levels) const {
  return project_all({this}, levels)[0];
}

QkvProjections::Projected QkvProjections::project(const HeadInput& in) const {
  return in.projected ? *in.projected : project(in.levels);
}

bool QkvProjections::same_shape(const QkvProjections& o) const {
  return o.shape_.d_model == shape_.d_model && o.shape_.d_k == shape_.d_k &&
         o.shape_.d_v == shape_.d_v && o.shape_.levels == shape_.levels &&
         o.shape_.share_qk == shape_.share_qk;
}

std::vector<QkvProjections::Projected> QkvProjections::project_all(
    const std::vector<const QkvProjections*>& heads, const std::vector<Var>& levels) {
  std::vector<Projected> out(heads.size());
  if (heads.empty()) return out;
  for (const QkvProjections* h : heads)
    if (!h->same_shape(*heads[0]))
      throw std::invalid_argument("QkvProjections::project_all: heads of different shapes");
  const HeadShape& sh = heads[0]->shape_;
  const size_t L = std::min(sh.levels, levels.size());
  for (size_t l = 0; l < L; ++l) {
    const size_t i = sh.share_qk ? 0 : l;
    std::vector<Var> w, b;
    for (const QkvProjections* h : heads) {
      w.insert(w.end(), {h->w_q_[i], h->w_k_[i]});
      b.insert(b.end(), {h->b_q_[i], h->b_k_[i]});
      if (l == 0) {
        w.push_back(h->w_v_);
        b.push_back(h->b_v_);
      }
    }
    std::vector<Var> y = ops::linear_parts(levels[l], w, b);
    size_t c = 0;
    for (Projected& p : out) {
      p.q.push_back(y[c++]);
      p.k.push_back(y[c++]);
      if (l == 0) p.v = y[c++];
    }
  }
  return out;
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
