// Numerical helpers of the `hkt` analysis (in the plugin's library gf_hkt, so the tests can
// check them): excess kurtosis, Mardia's multivariate kurtosis and the numerical rank of a
// square matrix. Bilinear forms and eigenvalues come from the core's growformer/linalg.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include <growformer/linalg.hpp>

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

/// Mardia's multivariate kurtosis b_2,p = (1/n) sum_i ((x_i - mean)^T S^-1 (x_i - mean))^2 with
/// S the covariance (divided by n) of the n samples X (each of dimension p). Under a
/// multivariate normal distribution its expectation is p (p + 2). A singular S is inverted on its
/// support (eigenvalues above 1e-12 of the largest); *rank receives the dimension used. NaN when
/// there are fewer than 2 samples or no spread.
inline double mardia_kurtosis(const std::vector<std::vector<double>>& x, size_t* rank = nullptr) {
  namespace la = gf::linalg;
  if (rank) *rank = 0;
  if (x.size() < 2 || x[0].empty()) return std::nan("");
  const size_t n = x.size(), p = x[0].size();
  la::Vec mean(p, 0.0);
  for (const auto& v : x)
    for (size_t k = 0; k < p; ++k) mean[k] += v[k] / static_cast<double>(n);
  la::Mat cov(p);
  for (const auto& v : x)
    for (size_t a = 0; a < p; ++a)
      for (size_t b = 0; b < p; ++b)
        cov(a, b) += (v[a] - mean[a]) * (v[b] - mean[b]) / static_cast<double>(n);
  const la::Eigen e = la::jacobi_eigen(cov);
  const double top = e.values.empty() ? 0.0 : e.values.back();
  if (!(top > 0.0)) return std::nan("");
  std::vector<size_t> keep;
  for (size_t k = 0; k < p; ++k)
    if (e.values[k] > 1e-12 * top) keep.push_back(k);
  if (rank) *rank = keep.size();
  double b2 = 0.0;
  for (const auto& v : x) {
    double m = 0.0;  // Mahalanobis distance squared: sum_k (u_k . (x - mean))^2 / lambda_k
    for (size_t k : keep) {
      double proj = 0.0;
      for (size_t a = 0; a < p; ++a) proj += e.vectors[k][a] * (v[a] - mean[a]);
      m += proj * proj / e.values[k];
    }
    b2 += m * m / static_cast<double>(n);
  }
  return b2;
}

/// Numerical rank of a square matrix A: the number of singular values above REL_TOL times the
/// largest (singular values from the eigenvalues of A^T A).
inline size_t numerical_rank(const gf::linalg::Mat& a, double rel_tol = 1e-5) {
  namespace la = gf::linalg;
  const la::Eigen e = la::jacobi_eigen(la::matmul(la::transpose(a), a), false);
  if (e.values.empty() || !(e.values.back() > 0.0)) return 0;
  const double cut = rel_tol * rel_tol * e.values.back();
  size_t r = 0;
  for (double v : e.values) r += v > cut ? 1 : 0;
  return r;
}

}  // namespace gf_hkt
