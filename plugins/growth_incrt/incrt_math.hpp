// Shared INCRT math (header-only, compiled into each INCRT plugin and the tests):
// token Gram matrix C, the antisymmetric motor M_a of a head, the residual matrix
// A_res = P_perp sym(C M_a) P_perp, Oja / MCA EXIN tracker steps, an exact
// symmetric eigen solver (cyclic Jacobi) and Gram-Schmidt. Dimensions are small
// (d <= 256), so plain loops in double precision; matrices are row-major d x d.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/attention.hpp>
#include <growformer/config.hpp>
#include <growformer/rng.hpp>
#include <growformer/tensor.hpp>

namespace gf {
namespace incrt {

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

/// C = X^T X over the probe's valid tokens. probe (B, T, d); valid (B*T) or null.
/// first_sequence = use only sequence 0 (the reference code's probe).
/// Returns the token count through `count`; divides by it when `normalize`.
inline Mat gram_from_probe(const Tensor& probe, const std::vector<uint8_t>* valid,
                           bool first_sequence, bool normalize_by_count, size_t* count = nullptr) {
  if (probe.ndim() != 3) throw RuntimeError("incrt: probe must be (B, T, d)");
  const size_t b = probe.dim(0), t = probe.dim(1), d = probe.dim(2);
  const size_t nb = first_sequence ? std::min<size_t>(b, 1) : b;
  Mat c(d);
  size_t n = 0;
  const float* x = probe.data();
  for (size_t bi = 0; bi < nb; ++bi)
    for (size_t ti = 0; ti < t; ++ti) {
      const size_t row = bi * t + ti;
      if (valid && row < valid->size() && !(*valid)[row]) continue;
      const float* xr = x + row * d;
      ++n;
      for (size_t i = 0; i < d; ++i) {
        const double xi = xr[i];
        if (xi == 0.0) continue;
        double* cr = &c.a[i * d];
        for (size_t j = i; j < d; ++j) cr[j] += xi * xr[j];
      }
    }
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < i; ++j) c(i, j) = c(j, i);
  if (normalize_by_count && n > 0)
    for (double& v : c.a) v /= static_cast<double>(n);
  if (count) *count = n;
  return c;
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

/// M_a,h = antisymmetric part of the head's level-0 bilinear form; zero (d x d)
/// when the head exposes no query weights.
inline Mat head_motor(const Head& h, size_t d) {
  const Var* q = h.w_q(0);
  if (!q || !q->defined() || q->value().ndim() != 2 || q->value().dim(0) != d) return Mat(d);
  const Var* k = h.w_k(0);
  const Tensor* kt = (k && k->defined()) ? &k->value() : nullptr;
  return antisym(bilinear_form(q->value(), kt));
}

/// sym(C M_a) = (C M_a - M_a C) / 2 for symmetric C and antisymmetric M_a.
inline Mat sym_cm(const Mat& c, const Mat& ma) { return sym(matmul(c, ma)); }

/// P S P for a projector P (identity when q is empty: returns S).
inline Mat project(const Mat& s, const std::vector<Vec>& q) {
  if (q.empty()) return s;
  Mat p = complement_projector(s.n, q);
  return matmul(matmul(p, s), p);
}

/// A_res = P_perp sym(C M_a) P_perp.
inline Mat residual_matrix(const Mat& c, const Mat& ma, const std::vector<Vec>& q) {
  return project(sym_cm(c, ma), q);
}

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
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
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

enum class McaRule { Exin, Reference };

/// One Oja step towards the dominant eigenvector of `a`:
/// u <- normalize(u + eta (A u - (u^T A u) u)).
inline void oja_step(const Mat& a, Vec& u, double eta) {
  const Vec y = matvec(a, u);
  const double r = dot(u, y) / std::max(dot(u, u), 1e-300);
  for (size_t i = 0; i < u.size(); ++i) u[i] += eta * (y[i] - r * u[i]);
  normalize(u);
}

/// One MCA EXIN step towards the minor eigenvector of `a` (matrix form):
/// u <- normalize(u - (eta / |u|^2) (A u - (u^T A u / |u|^2) u)).
/// Reference rule: the same step multiplied by y = u^T A u (drives u to a
/// direction of Rayleigh quotient ~0 when A is indefinite).
inline void mca_step(const Mat& a, Vec& u, double eta, McaRule rule) {
  const double n2 = std::max(dot(u, u), 1e-300);
  const Vec y = matvec(a, u);
  const double uy = dot(u, y);
  const double r = uy / n2;
  const double g = (rule == McaRule::Reference) ? eta * uy / n2 : eta / n2;
  for (size_t i = 0; i < u.size(); ++i) u[i] -= g * (y[i] - r * u[i]);
  normalize(u);
}

/// A random unit vector orthogonal to `basis` (orthonormal).
inline Vec random_unit(size_t d, Rng& rng, const std::vector<Vec>& basis = {}) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    Vec u(d);
    for (double& x : u) x = rng.normal();
    orthogonalize(u, basis);
    if (normalize(u)) return u;
  }
  Vec u(d, 0.0);
  return u;
}

/// The pair of online trackers u+ (Oja, dominant) and u- (MCA, minor), kept in
/// the complement of `basis` with u- orthogonal to u+.
struct TrackerPair {
  Vec up, um;
  double lambda_max = 0.0, lambda_min = 0.0;

  void reset(size_t d, Rng& rng, const std::vector<Vec>& basis) {
    up = random_unit(d, rng, basis);
    std::vector<Vec> b2 = basis;
    if (norm(up) > 0) b2.push_back(up);
    um = random_unit(d, rng, b2);
  }

  /// `iters` steps on A / scale (scale > 0 makes the step size independent of
  /// the magnitude of A). `coupling` in [0, 1] = how strongly u- is
  /// orthogonalised to u+ each step (1 = fully).
  void update(const Mat& a, const std::vector<Vec>& basis, double eta_plus, double eta_minus,
              McaRule rule, size_t iters, double scale = 1.0, double coupling = 1.0) {
    Mat as = a;
    if (scale > 0 && scale != 1.0)
      for (double& x : as.a) x /= scale;
    for (size_t it = 0; it < iters; ++it) {
      oja_step(as, up, eta_plus);
      if (!basis.empty()) {
        orthogonalize(up, basis);
        normalize(up);
      }
      mca_step(as, um, eta_minus, rule);
      if (!basis.empty()) orthogonalize(um, basis);
      const double c = dot(um, up) * coupling;
      for (size_t i = 0; i < um.size(); ++i) um[i] -= c * up[i];
      normalize(um);
    }
    lambda_max = rayleigh(a, up);
    lambda_min = rayleigh(a, um);
  }

  /// Exact: u+ / u- = eigenvectors of the largest / smallest eigenvalue of A
  /// restricted to the complement of `basis` (A = P S P already has the basis in
  /// its null space; the complement restriction matters only for lambda <= 0).
  void exact(const Mat& a, const std::vector<Vec>& basis, const Eigen* given = nullptr) {
    Eigen local;
    if (!given) local = jacobi_eigen(a);
    const Eigen& e = given ? *given : local;
    const size_t n = e.values.size();
    // pick the extreme eigenvectors that do not lie in span(basis)
    auto in_basis = [&](const Vec& v) {
      double s = 0.0;
      for (const Vec& q : basis) s += dot(v, q) * dot(v, q);
      return s > 0.5;
    };
    for (size_t k = n; k-- > 0;)
      if (!in_basis(e.vectors[k])) { up = e.vectors[k]; break; }
    for (size_t k = 0; k < n; ++k)
      if (!in_basis(e.vectors[k])) { um = e.vectors[k]; break; }
    lambda_max = rayleigh(a, up);
    lambda_min = rayleigh(a, um);
  }
};

// ---- exact round-trip text serialisation of doubles --------------------------

inline void put(std::ostringstream& os, double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  os << buf << ' ';
}
inline void put_vec(std::ostringstream& os, const Vec& v) {
  os << v.size() << ' ';
  for (double x : v) put(os, x);
}

/// Token reader over save_state() text.
class Reader {
 public:
  explicit Reader(const std::string& s) : is_(s) {}
  std::string word() {
    std::string w;
    if (!(is_ >> w)) throw RuntimeError("incrt: truncated policy state");
    return w;
  }
  double num() {
    const std::string w = word();
    char* end = nullptr;
    const double v = std::strtod(w.c_str(), &end);
    if (end == w.c_str()) throw RuntimeError("incrt: bad number in policy state: " + w);
    return v;
  }
  uint64_t u64() { return std::strtoull(word().c_str(), nullptr, 10); }
  long i64() { return std::strtol(word().c_str(), nullptr, 10); }
  Vec vec() {
    const size_t n = static_cast<size_t>(u64());
    Vec v(n);
    for (double& x : v) x = num();
    return v;
  }
  void expect(const std::string& tag) {
    const std::string w = word();
    if (w != tag) throw RuntimeError("incrt: policy state: expected '" + tag + "', got '" + w + "'");
  }

 private:
  std::istringstream is_;
};

inline double median(Vec v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace incrt
}  // namespace gf
