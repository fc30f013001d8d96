// Numerical helpers of the `hkt` analysis (header-only so the tests can check them): excess
// kurtosis. Bilinear forms and eigenvalues come from the core's growformer/linalg.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace gf_hkt {

/// Excess kurtosis m4 / m2^2 - 3 of a sample (0 for a Gaussian; NaN when fewer than 2 values
/// or no spread).
inline double excess_kurtosis(const std::vector<double>& x) {
  if (x.size() < 2) return std::nan("");
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double m2 = 0.0, m4 = 0.0;
  for (double v : x) {
    const double d = (v - mean) * (v - mean);
    m2 += d;
    m4 += d * d;
  }
  m2 /= static_cast<double>(x.size());
  m4 /= static_cast<double>(x.size());
  if (m2 <= 0) return std::nan("");
  return m4 / (m2 * m2) - 3.0;
}

}  // namespace gf_hkt
