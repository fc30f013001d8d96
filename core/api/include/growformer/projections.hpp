// The query/key/value projections of a head, as one part that head plugins compose: per level
// (one when the block shares them) W_Q, b_Q, W_K, b_K, then W_V, b_V, registered on the owning
// head under the names "w_q", "b_q", "w_k", "b_k" (level l > 0: "w_q_l<l>", ...), "w_v", "b_v".
#pragma once
#include "growformer/export.hpp"

#include <vector>

#include "growformer/attention.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// Queries and keys of every level a head scores at, values of level 0.
struct QkvProjected {
  std::vector<Var> q, k;
  Var v;
};

/// Whether MultiHeadBlock computes the projections of all its heads at once when every head
/// exposes them (default on; tests compare the two paths).
void set_fused_projections(bool on);
bool fused_projections();

class QkvProjections {
 public:
  /// Registers the parameters on OWNER, initialised uniform(+-1/sqrt(d_model)) from RNG in
  /// registration order (biases zero).
  QkvProjections(Module& owner, const HeadShape& shape, Rng& rng);

  using Projected = QkvProjected;
  /// Queries and keys of every level the head scores at, values of level 0: per level one
  /// ops::linear_parts product of that level's weights side by side.
  Projected project(const std::vector<Var>& levels) const;
  /// in.projected when the block computed it (project_all), else project(in.levels).
  Projected project(const HeadInput& in) const;

  /// The projections of several heads of one shape with one ops::linear_parts product per
  /// level for all of them. Every value equals the head's own project(levels) bit for bit,
  /// and so does each weight's gradient (ops::linear_parts); the levels' gradients differ
  /// only by float rounding (one product over all heads instead of one per head).
  static std::vector<Projected> project_all(const std::vector<const QkvProjections*>& heads,
                                            const std::vector<Var>& levels);
  bool same_shape(const QkvProjections& other) const;

  /// Weights of a level, (d_model, d_k) / (d_model, d_v); null past the last level.
  const Var* w_q(size_t level) const;
  const Var* w_k(size_t level) const;
  const Var* w_v() const { return &w_v_; }

  /// Growth initialisation: W_Q, W_K ~ N(0, 1/d_model), biases zero; "directed" puts the unit
  /// direction into the first query column; W_V ~ N(0, value_variance) when one is given.
  void initialize(const HeadInit& init, Rng& rng);

 private:
  HeadShape shape_;
  std::vector<Var> w_q_, b_q_, w_k_, b_k_;
  Var w_v_, b_v_;
};

}  // namespace gf

GROWFORMER_API_END
