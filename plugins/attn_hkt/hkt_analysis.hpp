// Numerical helpers of the `hkt` analysis (header-only so the tests can check
// them): a cyclic Jacobi eigen solver for small symmetric matrices, the
// symmetric/antisymmetric split of a bilinear form, and excess kurtosis.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace gf_hkt {

/// Eigenvalues (ascending) of a symmetric n x n matrix `a` (row-major, copied) by
/// cyclic Jacobi rotations; accurate to ~1e-6 relative for the d_model sizes used here.
inline std::vector<double> symmetric_eigenvalues(std::vector<double> a, size_t n,
                                                 int max_sweeps = 60) {
  auto at = [&](size_t i, size_t j) -> double& { return a[i * n + j]; };
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (size_t i = 0; i < n; ++i) {
      diag += at(i, i) * at(i, i);
      for (size_t j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    }
    if (off <= 1e-24 * std::max(diag, 1e-300)) break;
    for (size_t p = 0; p < n; ++p) {
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (std::fabs(apq) < 1e-300) continue;
        // Rotation angle that zeroes a_pq (Golub & Van Loan, Alg. 8.4.1).
        const double theta = (at(q, q) - at(p, p)) / (2.0 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1.0 / std::sqrt(t * t + 1), s = t * c;
        for (size_t r = 0; r < n; ++r) {  // columns p, q
          const double arp = at(r, p), arq = at(r, q);
          at(r, p) = c * arp - s * arq;
          at(r, q) = s * arp + c * arq;
        }
        for (size_t r = 0; r < n; ++r) {  // rows p, q
          const double apr = at(p, r), aqr = at(q, r);
          at(p, r) = c * apr - s * aqr;
          at(q, r) = s * apr + c * aqr;
        }
      }
    }
  }
  std::vector<double> ev(n);
  for (size_t i = 0; i < n; ++i) ev[i] = at(i, i);
  std::sort(ev.begin(), ev.end());
  return ev;
}

/// Facts about one bilinear form M = W_Q W_K^T (W_Q, W_K: d x dk, row-major).
struct BilinearStats {
  double antisym_ratio = 0.0;  // ||M_a||_F / ||M||_F, M_a = (M - M^T) / 2
  double min_eig_sym = 0.0;    // smallest eigenvalue of M_s = (M + M^T) / 2
  double norm = 0.0;           // ||M||_F
};

inline BilinearStats bilinear_stats(const float* wq, const float* wk, size_t d, size_t dk) {
  std::vector<double> m(d * d, 0.0);
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < d; ++j) {
      double s = 0.0;
      for (size_t c = 0; c < dk; ++c) s += static_cast<double>(wq[i * dk + c]) * wk[j * dk + c];
      m[i * d + j] = s;
    }
  BilinearStats st;
  double n2 = 0.0, a2 = 0.0;
  std::vector<double> sym(d * d);
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < d; ++j) {
      const double x = m[i * d + j], y = m[j * d + i];
      n2 += x * x;
      a2 += 0.25 * (x - y) * (x - y);
      sym[i * d + j] = 0.5 * (x + y);
    }
  st.norm = std::sqrt(n2);
  st.antisym_ratio = n2 > 0 ? std::sqrt(a2 / n2) : 0.0;
  st.min_eig_sym = d ? symmetric_eigenvalues(std::move(sym), d).front() : 0.0;
  return st;
}

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
