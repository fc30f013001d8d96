// Small dense linear algebra for structure decisions and analysis (d <= a few hundred): square
// row-major matrices in double precision, projectors, a cyclic Jacobi symmetric eigen solver, and
// the bilinear form M = W_Q W_K^T of a head with its symmetric/antisymmetric split. Header-only;
// plain loops, so results do not depend on BLAS or threads.
#pragma once
#include "growformer/export.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "growformer/tensor.hpp"

GROWFORMER_API_BEGIN

namespace gf {
namespace linalg {

using Vec = std::vector<double>;

/// Dense square matrix, row-major.
struct Mat {
  size_t n = 0;
  std::vector<double> a;
  Mat() = default;
  explicit Mat(size_t n_, double fill = 0.0) : n(n_), a(n_ * n_, fill) {}
  double& operator()(size_t i, size_t j) { return a[i * n + j]; }
  double operator()(size_t i, size_t j) const { return a[i * n + j]; }
  static Mat identity(size_t n) {
    Mat m(n);
    for (size_t i = 0; i < n; ++i) m(i, i) = 1.0;
    return m;
  }
};

inline Mat matmul(const Mat& x, const Mat& y) {
  const size_t n = x.n;
  Mat z(n);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k) {
      const double xik = x(i, k);
      if (xik == 0.0) continue;
      const double* yr = &y.a[k * n];
      double* zr = &z.a[i * n];
      for (size_t j = 0; j < n; ++j) zr[j] += xik * yr[j];
    }
  return z;
}

inline Mat transpose(const Mat& x) {
  Mat t(x.n);
  for (size_t i = 0; i < x.n; ++i)
    for (size_t j = 0; j < x.n; ++j) t(j, i) = x(i, j);
  return t;
}

/// (Z + Z^T) / 2.
inline Mat sym(const Mat& z) {
  Mat s(z.n);
  for (size_t i = 0; i < z.n; ++i)
    for (size_t j = 0; j < z.n; ++j) s(i, j) = 0.5 * (z(i, j) + z(j, i));
  return s;
}

/// (Z - Z^T) / 2.
inline Mat antisym(const Mat& z) {
  Mat s(z.n);
  for (size_t i = 0; i < z.n; ++i)
    for (size_t j = 0; j < z.n; ++j) s(i, j) = 0.5 * (z(i, j) - z(j, i));
  return s;
}

inline double frobenius(const Mat& m) {
  double s = 0.0;
  for (double v : m.a) s += v * v;
  return std::sqrt(s);
}

inline double trace(const Mat& m) {
  double s = 0.0;
  for (size_t i = 0; i < m.n; ++i) s += m(i, i);
  return s;
}

inline Vec matvec(const Mat& m, const Vec& u) {
  Vec y(m.n, 0.0);
  for (size_t i = 0; i < m.n; ++i) {
    const double* r = &m.a[i * m.n];
    double s = 0.0;
    for (size_t j = 0; j < m.n; ++j) s += r[j] * u[j];
    y[i] = s;
  }
  return y;
}

inline double dot(const Vec& x, const Vec& y) {
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

inline double norm(const Vec& x) { return std::sqrt(dot(x, x)); }

/// Normalises in place; returns false (and leaves x) when its norm is ~0.
inline bool normalize(Vec& x) {
  const double n = norm(x);
  if (!(n > 1e-300)) return false;
  for (double& v : x) v /= n;
  return true;
}

inline double rayleigh(const Mat& a, const Vec& u) {
  return dot(u, matvec(a, u)) / std::max(dot(u, u), 1e-300);
}

/// Removes from x its components along the orthonormal vectors in `basis`
/// (modified Gram-Schmidt, applied twice for stability).
inline void orthogonalize(Vec& x, const std::vector<Vec>& basis) {
  for (int pass = 0; pass < 2; ++pass)
    for (const Vec& q : basis) {
      const double c = dot(x, q);
      for (size_t i = 0; i < x.size(); ++i) x[i] -= c * q[i];
    }
}

/// P_perp = I - Q Q^T for orthonormal Q columns.
inline Mat complement_projector(size_t d, const std::vector<Vec>& q) {
  Mat p = Mat::identity(d);
  for (const Vec& v : q)
    for (size_t i = 0; i < d; ++i)
      for (size_t j = 0; j < d; ++j) p(i, j) -= v[i] * v[j];
  return p;
}

/// P S P for a projector P (identity when q is empty: returns S).
inline Mat project(const Mat& s, const std::vector<Vec>& q) {
  if (q.empty()) return s;
  Mat p = complement_projector(s.n, q);
  return matmul(matmul(p, s), p);
}

/// M_h = W_Q W_K^T (d x d) from (d, dk) weights; W_K = W_Q when wk is null (shared q/k).
inline Mat bilinear_form(const Tensor& wq, const Tensor* wk) {
  const size_t d = wq.dim(0), dk = wq.dim(1);
  const Tensor& k = wk ? *wk : wq;
  Mat m(d);
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < d; ++j) {
      double s = 0.0;
      for (size_t r = 0; r < dk; ++r) s += static_cast<double>(wq[i * dk + r]) * k[j * dk + r];
      m(i, j) = s;
    }
  return m;
}

/// Facts about one bilinear form M (e.g. W_Q W_K^T).
struct BilinearStats {
  double antisym_ratio = 0.0;  // ||M_a||_F / ||M||_F, M_a = (M - M^T) / 2
  double min_eig_sym = 0.0;    // smallest eigenvalue of M_s = (M + M^T) / 2
  double norm = 0.0;           // ||M||_F
};

/// Eigen-decomposition of a symmetric matrix: values ascending, vectors[i] the
/// unit eigenvector of values[i]. Cyclic Jacobi; exact to ~1e-12 relative.
struct Eigen {
  Vec values;
  std::vector<Vec> vectors;
};

inline Eigen jacobi_eigen(const Mat& m, bool want_vectors = true, int max_sweeps = 60) {
  const size_t n = m.n;
  Mat a = m;
  Mat v = want_vectors ? Mat::identity(n) : Mat();
  double total = 0.0;
  for (double x : a.a) total += x * x;
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    double off = 0.0;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) off += a(p, q) * a(p, q);
    if (off <= 1e-30 * total || off == 0.0) break;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = a(p, q);
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (a(q, q) - a(p, p)) / (2.0 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        // A <- J^T A J with J the rotation in the (p, q) plane.
        for (size_t k = 0; k < n; ++k) {
          const double akp = a(k, p), akq = a(k, q);
          a(k, p) = c * akp - s * akq;
          a(k, q) = s * akp + c * akq;
        }
        for (size_t k = 0; k < n; ++k) {
          const double apk = a(p, k), aqk = a(q, k);
          a(p, k) = c * apk - s * aqk;
          a(q, k) = s * apk + c * aqk;
        }
        if (want_vectors)
          for (size_t k = 0; k < n; ++k) {
            const double vkp = v(k, p), vkq = v(k, q);
            v(k, p) = c * vkp - s * vkq;
            v(k, q) = s * vkp + c * vkq;
          }
      }
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return a(x, x) < a(y, y); });
  Eigen e;
  for (size_t i : order) {
    e.values.push_back(a(i, i));
    if (want_vectors) {
      Vec col(n);
      for (size_t k = 0; k < n; ++k) col[k] = v(k, i);
      e.vectors.push_back(std::move(col));
    }
  }
  return e;
}

/// Norm, antisymmetric share and smallest symmetric eigenvalue of M; WITH_EIGEN = false skips
/// the eigen solve (min_eig_sym stays 0).
inline BilinearStats bilinear_stats(const Mat& m, bool with_eigen = true) {
  BilinearStats st;
  st.norm = frobenius(m);
  st.antisym_ratio = st.norm > 0 ? frobenius(antisym(m)) / st.norm : 0.0;
  if (with_eigen && m.n) st.min_eig_sym = jacobi_eigen(sym(m), false).values.front();
  return st;
}

inline double median(Vec v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace linalg
}  // namespace gf

GROWFORMER_API_END
