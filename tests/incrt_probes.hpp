// A constructed validation probe for the INCRT round rules' tests (test_incrt, test_incrt_review).
#pragma once

#include <cstddef>
#include <limits>

#include <growformer/incrt/learning_rounds.hpp>

namespace gf_test {

/// A probe at STEP of TOTAL; with a round waiting, its heads muted cost SHARE of the loss at a
/// paired t of T.
inline gf::incrt::ProbeReading probe_at(size_t step, size_t total, double loss, double share = 0.0,
                                        double t = 0.0) {
  gf::incrt::ProbeReading p;
  p.loss = loss;
  p.step = step;
  p.total = total;
  p.muted_loss = loss * (1.0 + share);
  p.muted_se = t > 0 ? loss * share / t : std::numeric_limits<double>::quiet_NaN();
  return p;
}

}  // namespace gf_test
