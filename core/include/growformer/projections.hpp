// The query/key/value projections of a head, as one part that head plugins compose: per level
// (one when the block shares them) W_Q, b_Q, W_K, b_K, then W_V, b_V, registered on the owning
// head under the names "w_q", "b_q", "w_k", "b_k" (level l > 0: "w_q_l<l>", ...), "w_v", "b_v".
#pragma once

#include <vector>

#include "growformer/attention.hpp"

namespace gf {

class QkvProjections {
 public:
  /// Registers the parameters on OWNER, initialised uniform(+-1/sqrt(d_model)) from RNG in
  /// registration order (biases zero).
  QkvProjections(Module& owner, const HeadShape& shape, Rng& rng);

  /// Queries and keys of every level the head scores at, values of level 0.
  struct Projected {
    std::vector<Var> q, k;
    Var v;
  };
  Projected project(const std::vector<Var>& levels) const;

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
