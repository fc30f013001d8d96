// INCRT maths (the INCRT library, beside the core) shared by the INCRT growth policy, its gate
// head and the directional-energy pruning rule (shared/spec/INCRT.md): token Gram matrix C of a
// probe, the antisymmetric motor M_a of a head, the residual matrix A_res = P_perp sym(C M_a)
// P_perp and the Oja / MCA EXIN trackers of its extreme eigenvectors. Built on the core's
// growformer/linalg.hpp; state text comes from the core's growformer/state_text.hpp.
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
#include <growformer/growth.hpp>
#include <growformer/linalg.hpp>
#include <growformer/rng.hpp>
#include <growformer/state_text.hpp>
#include <growformer/tensor.hpp>

namespace gf {
namespace incrt {

using namespace gf::linalg;
using namespace gf::state;

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

/// A_res = P_perp sym(C M_a) P_perp.
inline Mat residual_matrix(const Mat& c, const Mat& ma, const std::vector<Vec>& q) {
  return project(sym_cm(c, ma), q);
}

enum class McaRule { Exin, Reference };

/// Default Oja step. On A / ||A||_F (step_scale: frobenius) every eigenvalue lies in
/// [-1, 1], so with eta = 0.5 the step is the shifted power iteration u <- (I + eta A) u
/// (normalised) with I + eta A positive definite: it converges to the top eigenvector
/// at the rate (1 + eta l2) / (1 + eta l1) per step, fast enough to follow a training
/// run. The reference's 1/(10 d) is meant for one token per step; on the normalised
/// matrix it moves u+ by ~1e-3 per step and does not track (docs/INCRT.md). Without
/// normalisation the reference's value is kept.
inline double default_eta_plus(bool frobenius_scaled, size_t d) {
  return frobenius_scaled ? 0.5 : 1.0 / (10.0 * double(d));
}

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
  /// the magnitude of A). Uncoupled (gamma < 0): u- is orthogonalised to u+ after
  /// every step. Coupled (gamma = gamma* in [0, 1]): the reference code's coupling,
  /// see coupled_step(); u- is then not forced orthogonal to u+.
  void update(const Mat& a, const std::vector<Vec>& basis, double eta_plus, double eta_minus,
              McaRule rule, size_t iters, double scale = 1.0, double gamma = -1.0) {
    Mat as = a;
    if (scale > 0 && scale != 1.0)
      for (double& x : as.a) x /= scale;
    for (size_t it = 0; it < iters; ++it) {
      if (gamma >= 0.0) {
        coupled_step(as, up, um, eta_plus, eta_minus, rule, gamma);
        if (!basis.empty()) {
          orthogonalize(up, basis);
          normalize(up);
          orthogonalize(um, basis);
          normalize(um);
        }
        continue;
      }
      oja_step(as, up, eta_plus);
      if (!basis.empty()) {
        orthogonalize(up, basis);
        normalize(up);
      }
      mca_step(as, um, eta_minus, rule);
      if (!basis.empty()) orthogonalize(um, basis);
      const double c = dot(um, up);
      for (size_t i = 0; i < um.size(); ++i) um[i] -= c * up[i];
      normalize(um);
    }
    lambda_max = rayleigh(a, up);
    lambda_min = rayleigh(a, um);
  }

  /// One coupled step (the reference code's bidirectional coupling), c = u+^T u-:
  ///   u+ <- normalize(u+ + eta+ (A u+ - (u+^T A u+) u+) - (1 - gamma) c u-)
  ///   u- <- normalize(u- - mca(A, u-) + eta+ gamma (1 - gamma) c u+)
  /// where mca() is the MCA step of `rule` with eta-. gamma = D+/(D+ + D-) weights
  /// the repulsion of u+ from u- by the bottom gap's share and the attraction of u-
  /// to u+ by the product of both shares.
  static void coupled_step(const Mat& a, Vec& up, Vec& um, double eta_plus, double eta_minus,
                           McaRule rule, double gamma) {
    const double c = dot(up, um);
    const Vec up0 = up, um0 = um;
    const Vec yp = matvec(a, up0);
    const double rp = dot(up0, yp) / std::max(dot(up0, up0), 1e-300);
    const double n2 = std::max(dot(um0, um0), 1e-300);
    const Vec ym = matvec(a, um0);
    const double uy = dot(um0, ym);
    const double rm = uy / n2;
    const double g = (rule == McaRule::Reference) ? eta_minus * uy / n2 : eta_minus / n2;
    for (size_t i = 0; i < up.size(); ++i) {
      up[i] = up0[i] + eta_plus * (yp[i] - rp * up0[i]) - (1.0 - gamma) * c * um0[i];
      um[i] = um0[i] - g * (ym[i] - rm * um0[i]) + eta_plus * gamma * (1.0 - gamma) * c * up0[i];
    }
    normalize(up);
    normalize(um);
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
      if (!in_basis(e.vectors[k])) {
        up = e.vectors[k];
        break;
      }
    for (size_t k = 0; k < n; ++k)
      if (!in_basis(e.vectors[k])) {
        um = e.vectors[k];
        break;
      }
    lambda_max = rayleigh(a, up);
    lambda_min = rayleigh(a, um);
  }
};

}  // namespace incrt
}  // namespace gf
