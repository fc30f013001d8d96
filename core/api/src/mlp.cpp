#include "growformer/mlp.hpp"

#include <algorithm>
#include <cmath>

#include "growformer/errors.hpp"

namespace gf {

Mlp::Mlp(Var fc1_w, Var fc1_b, Var fc2_w, size_t max_width)
    : fc1_w_(std::move(fc1_w)),
      fc1_b_(std::move(fc1_b)),
      fc2_w_(std::move(fc2_w)),
      max_width_(max_width) {}

std::string Mlp::why_not_add(size_t count, const MlpInit& init) const {
  const std::string n = std::to_string(count);
  if (count == 0) return "no units to add (units: 0)";
  if (count > max_width_ || width() > max_width_ - count)
    return "adding " + n + " units to its " + std::to_string(width()) + " would pass the most a " +
           "block's MLP may hold, " + std::to_string(max_width_) + " (64 x d_model)";
  if (!init.fc1_w.empty() && init.fc1_w.size() != d_model() * count)
    return "the new units' input weights hold " + std::to_string(init.fc1_w.size()) +
           " values, not d_model x units = " + std::to_string(d_model() * count);
  if (!init.fc1_b.empty() && init.fc1_b.size() != count)
    return "the new units' input biases hold " + std::to_string(init.fc1_b.size()) +
           " values, not " + n;
  const auto finite = [](float v) { return std::isfinite(v); };
  if (!std::all_of(init.fc1_w.begin(), init.fc1_w.end(), finite) ||
      !std::all_of(init.fc1_b.begin(), init.fc1_b.end(), finite))
    return "the new units' input weights or biases hold a non-finite value";
  return "";
}

std::string Mlp::why_not_remove(const std::vector<size_t>& units) const {
  if (units.empty()) return "no units to remove (unit_indices is empty)";
  std::vector<bool> seen(width(), false);
  for (size_t u : units) {
    if (u >= width())
      return "it has no unit " + std::to_string(u) + " (its units: 0.." +
             std::to_string(width() - 1) + ")";
    if (seen[u]) return "unit " + std::to_string(u) + " is named twice";
    seen[u] = true;
  }
  if (units.size() == width())
    return "removing all " + std::to_string(width()) + " units would leave it none";
  return "";
}

Tensor gather_units(const Tensor& t, size_t axis, const std::vector<long>& source) {
  const size_t rows = t.dim(0);
  const size_t cols = t.shape().size() == 1 ? 1 : t.dim(1);
  Shape s = t.shape();
  s[axis] = source.size();
  Tensor out(s, 0.0f);
  const size_t out_cols = axis == 1 ? source.size() : cols;
  for (size_t j = 0; j < source.size(); ++j) {
    if (source[j] < 0) continue;
    const size_t from = static_cast<size_t>(source[j]);
    if (axis == 0)
      std::copy(t.data() + from * cols, t.data() + (from + 1) * cols, out.data() + j * cols);
    else
      for (size_t r = 0; r < rows; ++r) out.data()[r * out_cols + j] = t.data()[r * cols + from];
  }
  return out;
}

namespace {
// The parameter V with its units (axis AXIS) in the order SOURCE names them; its gradient is
// dropped (an edit comes between steps).
void regather(Var& v, size_t axis, const std::vector<long>& source) {
  v.value() = gather_units(v.value(), axis, source);
  v.zero_grad();
}
}  // namespace

std::vector<long> Mlp::add_units(size_t count, const MlpInit& init, Rng& rng) {
  const std::string why = why_not_add(count, init);
  if (!why.empty()) throw RuntimeError("cannot add MLP units: " + why);
  const size_t h = width(), d = d_model();
  std::vector<long> source(h + count, -1);
  for (size_t u = 0; u < h; ++u) source[u] = static_cast<long>(u);
  Tensor w1(Shape{d, count});
  if (init.fc1_w.empty()) {
    const float b = 1.0f / std::sqrt(static_cast<float>(d));
    rng.fill_uniform(w1, -b, b);
  } else {
    std::copy(init.fc1_w.begin(), init.fc1_w.end(), w1.data());
  }
  regather(fc1_w_, 1, source);
  regather(fc1_b_, 0, source);
  regather(fc2_w_, 0, source);  // the new units' output weights: zero
  for (size_t r = 0; r < d; ++r)
    std::copy(w1.data() + r * count, w1.data() + (r + 1) * count,
              fc1_w_.value().data() + r * (h + count) + h);
  if (!init.fc1_b.empty())
    std::copy(init.fc1_b.begin(), init.fc1_b.end(), fc1_b_.value().data() + h);
  return source;
}

std::vector<long> Mlp::remove_units(const std::vector<size_t>& units) {
  const std::string why = why_not_remove(units);
  if (!why.empty()) throw RuntimeError("cannot remove MLP units: " + why);
  std::vector<bool> drop(width(), false);
  for (size_t u : units) drop[u] = true;
  std::vector<long> source;
  for (size_t u = 0; u < width(); ++u)
    if (!drop[u]) source.push_back(static_cast<long>(u));
  regather(fc1_w_, 1, source);
  regather(fc1_b_, 0, source);
  regather(fc2_w_, 0, source);
  return source;
}

void Mlp::resize(size_t width) {
  if (width == 0 || width > max_width_)
    throw RuntimeError("an MLP of " + std::to_string(width) + " units: a block's MLP holds 1.." +
                       std::to_string(max_width_));
  const std::vector<long> none(width, -1);
  regather(fc1_w_, 1, none);
  regather(fc1_b_, 0, none);
  regather(fc2_w_, 0, none);
}

}  // namespace gf
