// HKT: the fused multi-level attention op, its row kernels, the `hkt` block, the
// `hybrid_conv` head and the analysis helpers. Oracles: finite differences, a reference built
// from core ops (explicit one-hot upsampling matrices), hand loops, the `mha`
// block with the same weights, and per-sample runs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <growformer/hkt/analysis.hpp>
#include <growformer/hkt/attend.hpp>
#include <growformer/hkt/kernels.hpp>

#include "growformer/attention.hpp"
#include "growformer/config.hpp"
#include "growformer/kernels.hpp"
#include "growformer/parallel.hpp"
#include "growformer/ops.hpp"
#include "growformer/registry.hpp"
#include "growformer/rng.hpp"
#include "growformer/linalg.hpp"
#include "testing.hpp"

namespace {

using gf::Tensor;
using gf::Var;
namespace ops = gf::ops;

// ---------------------------------------------------------------------------
// The fused op against an independent composition of core ops.

struct OpCase {
  size_t B = 2, T = 7, L = 3, stride = 2, dk = 3, dv = 2;
  bool causal = false;
  std::vector<uint8_t> valid;  // empty = all valid
};

// Inputs in the order q_0..q_{L-1}, k_0..k_{L-1}, v, logits.
std::vector<Tensor> op_inputs(const OpCase& c, bool per_sample_logits, uint64_t seed) {
  std::vector<Tensor> in;
  for (int qk = 0; qk < 2; ++qk)
    for (size_t l = 0; l < c.L; ++l)
      in.push_back(gf_test::randn({c.B, gf_hkt::level_length(c.T, c.stride, l), c.dk},
                                  seed + 10 * qk + l, 0.7f));
  in.push_back(gf_test::randn({c.B, c.T, c.dv}, seed + 50));
  in.push_back(per_sample_logits ? gf_test::randn({c.B, c.L}, seed + 60)
                                 : gf_test::randn({c.L}, seed + 60));
  return in;
}

Var run_fused(const OpCase& c, const std::vector<Var>& in) {
  std::vector<Var> q(in.begin(), in.begin() + c.L), k(in.begin() + c.L, in.begin() + 2 * c.L);
  gf_hkt::FusedSpec spec;
  spec.stride = c.stride;
  spec.causal = c.causal;
  spec.key_valid = c.valid.empty() ? nullptr : &c.valid;
  spec.scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
  return gf_hkt::hkt_attend(q, k, in[2 * c.L], in[2 * c.L + 1], spec);
}

// up(S_l) = U S_l U^T with U (T x T_l) one-hot; causal blocks by a 0/1 mask;
// masking by a large negative constant. Static logits only.
Var run_reference(const OpCase& c, const std::vector<Var>& in) {
  const size_t B = c.B, T = c.T;
  Var lam = ops::softmax(in[2 * c.L + 1]);
  Var S;
  size_t bs = 1;
  for (size_t l = 0; l < c.L; ++l, bs *= c.stride) {
    const size_t Tl = gf_hkt::level_length(T, c.stride, l);
    Var sl = ops::matmul(in[l], in[c.L + l], false, true);
    if (l > 0) {
      Tensor U({B, T, Tl}, 0.0f), M({B, T, T}, 0.0f);
      for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < T; ++i) {
          U[(b * T + i) * Tl + i / bs] = 1.0f;
          for (size_t j = 0; j < T; ++j)
            M[(b * T + i) * T + j] = (!c.causal || (j / bs + 1) * bs <= i + 1) ? 1.0f : 0.0f;
        }
      Var u = gf::constant(U);
      sl = ops::matmul(ops::matmul(u, sl), u, false, true);
      sl = ops::mul(sl, gf::constant(M));
    }
    sl = ops::mul(sl, ops::slice_last(lam, l, l + 1));
    S = l == 0 ? sl : ops::add(S, sl);
  }
  S = ops::scale(S, 1.0f / std::sqrt(static_cast<float>(c.dk)));
  Tensor mask({B, T, T}, 0.0f);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T; ++i)
      for (size_t j = 0; j < T; ++j) {
        bool ok = (c.valid.empty() || c.valid[b * T + j]) && (!c.causal || j <= i);
        mask[(b * T + i) * T + j] = ok ? 0.0f : -1e9f;
      }
  return ops::matmul(ops::softmax(ops::add(S, gf::constant(mask))), in[2 * c.L]);
}

void compare_with_reference_once(const OpCase& c) {
  auto inputs = op_inputs(c, false, 3);
  std::vector<Var> a, r;
  for (auto& t : inputs) {
    a.push_back(gf::parameter(t.clone()));
    r.push_back(gf::parameter(t.clone()));
  }
  Var ya = run_fused(c, a);
  gf::backward(gf_test::weighted_sum(ya));
  Var yr = run_reference(c, r);
  gf::backward(gf_test::weighted_sum(yr));
  REQUIRE(ya.shape() == yr.shape());
  for (size_t i = 0; i < ya.size(); ++i)
    CHECK(ya.value()[i] == doctest::Approx(yr.value()[i]).epsilon(1e-4));
  for (size_t n = 0; n < a.size(); ++n) {
    INFO("input " << n);
    REQUIRE(a[n].grad().defined());
    REQUIRE(r[n].grad().defined());
    for (size_t i = 0; i < a[n].size(); ++i)
      CHECK(a[n].grad()[i] == doctest::Approx(r[n].grad()[i]).epsilon(1e-3).scale(1.0));
  }
}

void compare_with_reference(const OpCase& c) {
  // one tile, and tiles of the coarsest block (many tiles, the last one short)
  size_t keep_rows = gf::kernels::attention_block_rows();
  for (size_t rows : {size_t{128}, size_t{1}}) {
    CAPTURE(rows);
    gf::kernels::set_attention_block_rows(rows);
    compare_with_reference_once(c);
  }
  gf::kernels::set_attention_block_rows(keep_rows);
}

}  // namespace

TEST_CASE("hkt fused op: forward and gradients equal a composition of core ops") {
  OpCase c;
  SUBCASE("two-way, T=7 not divisible by 4") { compare_with_reference(c); }
  SUBCASE("causal, T=7") {
    c.causal = true;
    compare_with_reference(c);
  }
  SUBCASE("stride 3, T=10, key padding") {
    c.stride = 3;
    c.T = 10;
    c.valid.assign(c.B * c.T, 1);
    for (size_t t = 6; t < 10; ++t) c.valid[c.T + t] = 0;  // second sample has 6 tokens
    compare_with_reference(c);
  }
  SUBCASE("causal with padding, T=23, tiles of 4 and 8 rows") {
    c.T = 23;
    c.causal = true;
    c.valid.assign(c.B * c.T, 1);
    for (size_t t = 17; t < 23; ++t) c.valid[t] = 0;
    c.valid[c.T + 2] = 0;
    compare_with_reference(c);
    size_t keep_rows = gf::kernels::attention_block_rows();
    gf::kernels::set_attention_block_rows(8);
    compare_with_reference_once(c);
    c.causal = false;
    compare_with_reference_once(c);
    gf::kernels::set_attention_block_rows(keep_rows);
  }
  SUBCASE("causal with padding, stride 2, T=9") {
    c.T = 9;
    c.causal = true;
    c.valid.assign(c.B * c.T, 1);
    for (size_t t = 5; t < 9; ++t) c.valid[t] = 0;
    compare_with_reference(c);
  }
}

TEST_CASE("hkt fused op: finite-difference gradients (T not divisible by s^l)") {
  for (bool per_sample : {false, true})
    for (bool causal : {false, true}) {
      CAPTURE(per_sample);
      CAPTURE(causal);
      OpCase c;
      c.T = 7;
      c.causal = causal;
      c.valid.assign(c.B * c.T, 1);
      c.valid[c.T + 6] = 0;
      c.valid[c.T + 5] = 0;
      size_t keep_rows = gf::kernels::attention_block_rows();
      gf::kernels::set_attention_block_rows(1);  // two tiles of 4 rows
      gf_test::check_gradients(
          [&](const std::vector<Var>& in) { return gf_test::weighted_sum(run_fused(c, in)); },
          op_inputs(c, per_sample, 11), 1e-2, 2e-2);
      gf::kernels::set_attention_block_rows(keep_rows);
    }
}

TEST_CASE("hkt fused op: identical bits with 1 and 2 threads") {
  size_t keep_threads = gf::num_threads(), keep_rows = gf::kernels::attention_block_rows();
  OpCase c;
  c.B = 3;
  c.T = 29;
  c.causal = true;
  c.valid.assign(c.B * c.T, 1);
  for (size_t t = 20; t < 29; ++t) c.valid[c.T + t] = 0;
  for (bool causal : {true, false}) {  // the two-way case sums the levels coarse to fine
    CAPTURE(causal);
    c.causal = causal;
    std::vector<std::vector<float>> runs;
    for (size_t threads : {1, 2}) {
      gf::set_num_threads(threads);
      gf::kernels::set_attention_block_rows(8);
      std::vector<Var> in;
      for (auto& t : op_inputs(c, true, 21)) in.push_back(gf::parameter(t));
      Var y = run_fused(c, in);
      gf::backward(gf_test::weighted_sum(y));
      std::vector<float> all = y.value().to_vector();
      for (auto& x : in)
        for (float g : x.grad().to_vector()) all.push_back(g);
      runs.push_back(all);
    }
    REQUIRE(runs[0].size() == runs[1].size());
    for (size_t i = 0; i < runs[0].size(); ++i) REQUIRE(runs[0][i] == runs[1][i]);
  }
  gf::set_num_threads(keep_threads);
  gf::kernels::set_attention_block_rows(keep_rows);
}

TEST_CASE("hkt fused op: one level is plain scaled dot-product attention") {
  OpCase c;
  c.L = 1;
  c.T = 6;
  auto in = op_inputs(c, false, 5);
  std::vector<Var> v;
  for (auto& t : in) v.push_back(gf::constant(t));
  Var y = run_fused(c, v);
  ops::AttentionMask m;
  Var ref = ops::attention(v[0], v[1], v[2], 1.0f / std::sqrt(3.0f), m);
  for (size_t i = 0; i < y.size(); ++i)
    CHECK(y.value()[i] == doctest::Approx(ref.value()[i]).epsilon(1e-5));
}

// ---------------------------------------------------------------------------
// The block's own row kernels (<growformer/hkt/kernels.hpp>), in every instruction set this CPU
// has.

namespace {

// Restores the core's instruction set when a test ends.
struct IsaSettings {
  std::string simd = gf::kernels::simd_name();
  ~IsaSettings() { gf::kernels::set_simd(simd); }
};

std::vector<float> values(size_t n, uint64_t seed, float std = 2.0f) {
  return gf_test::randn({n}, seed, std).to_vector();
}

}  // namespace

TEST_CASE("hkt row kernels: the core's instruction set, against double loops at odd lengths") {
  // the set chosen at start (the CPU's widest, or GROWFORMER_ISA's) is the core's
  CHECK(std::string(gf_hkt::kernels::isa_name()) == gf::kernels::simd_name());
  IsaSettings keep;
  for (const std::string& isa : gf::kernels::simd_available()) {
    REQUIRE(gf::kernels::set_simd(isa));
    REQUIRE(std::string(gf_hkt::kernels::isa_name()) == isa);
    for (size_t n : {0, 1, 3, 7, 8, 15, 16, 17, 33, 100}) {
      CAPTURE(isa);
      CAPTURE(n);
      auto x = values(n, n + 1), y = values(n, n + 2);
      auto ea = y;
      gf_hkt::kernels::exp_add_shift(ea.data(), x.data(), n, 0.5f);
      for (size_t j = 0; j < n; ++j)
        CHECK(ea[j] ==
              doctest::Approx(std::exp(static_cast<double>(y[j] + x[j]) - 0.5)).epsilon(2e-6));
      // the core's exp (growformer/simd_exp.hpp), bit for bit, the row's tail lanes included
      auto es = y;
      for (size_t j = 0; j < n; ++j) es[j] = y[j] + x[j];
      gf::kernels::exp_shift(es.data(), n, 0.5f);
      for (size_t j = 0; j < n; ++j) CHECK(std::memcmp(&ea[j], &es[j], sizeof(float)) == 0);
      auto am = y;
      const float amax = gf_hkt::kernels::add_max(am.data(), x.data(), n);
      float amax_ref = -INFINITY;
      for (size_t j = 0; j < n; ++j) {
        CHECK(am[j] == y[j] + x[j]);  // one rounding, as the scalar sum
        amax_ref = std::max(amax_ref, y[j] + x[j]);
      }
      CHECK(amax == amax_ref);
      // the max of the summed row is the core's row max of it
      CHECK(amax == gf::kernels::row_max(am.data(), n));
    }
  }
}

TEST_CASE(
    "hkt stride-2 row kernels: the expanded row's results bit for bit, every instruction set") {
  IsaSettings keep;
  for (const std::string& isa : gf::kernels::simd_available()) {
    REQUIRE(gf::kernels::set_simd(isa));
    REQUIRE(std::string(gf_hkt::kernels::isa_name()) == isa);
    for (size_t n : {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 512}) {
      CAPTURE(isa);
      CAPTURE(n);
      const size_t nc = (n + 1) / 2;
      auto y = values(n, n + 31), c = values(nc + 1, n + 32), r0 = values(n, n + 33),
           r1 = values(n, n + 34);
      c[nc] = NAN;  // one past the coarse row: never read
      std::vector<float> up(n);
      for (size_t j = 0; j < n; ++j) up[j] = c[j / 2];
      auto a = y, b = y;
      gf_hkt::kernels::add_up2(a.data(), c.data(), n);
      gf::kernels::axpy(b.data(), up.data(), n, 1.0f);
      for (size_t j = 0; j < n; ++j) REQUIRE(a[j] == b[j]);
      a = y, b = y;
      const float ma = gf_hkt::kernels::add_max_up2(a.data(), c.data(), n);
      const float mb = gf_hkt::kernels::add_max(b.data(), up.data(), n);
      REQUIRE(ma == mb);
      for (size_t j = 0; j < n; ++j) REQUIRE(a[j] == b[j]);
      a = y, b = y;
      gf_hkt::kernels::exp_add_up2_shift(a.data(), c.data(), n, 0.75f);
      gf_hkt::kernels::exp_add_shift(b.data(), up.data(), n, 0.75f);
      for (size_t j = 0; j < n; ++j) REQUIRE(a[j] == b[j]);
      // the fold against its definition; -0 pairs give +0
      for (size_t j = 0; j + 1 < n; j += 4) r0[j] = r1[j] = r0[j + 1] = r1[j + 1] = -0.0f;
      std::vector<float> out(nc + 1, -5.0f);
      gf_hkt::kernels::fold_pairs2(out.data(), r0.data(), r1.data(), n);
      for (size_t J = 0; J < nc; ++J) {
        const float want = 2 * J + 1 < n
                               ? (0.0f + (r0[2 * J] + r1[2 * J])) + (r0[2 * J + 1] + r1[2 * J + 1])
                               : 0.0f + (r0[2 * J] + r1[2 * J]);
        REQUIRE(std::memcmp(&out[J], &want, sizeof want) == 0);
      }
      if (n >= 2) REQUIRE(!std::signbit(out[0]));  // the -0 block
      REQUIRE(out[nc] == -5.0f);
    }
  }
}

TEST_CASE("hkt analysis: Jacobi eigenvalues, antisymmetric share, kurtosis") {
  // tridiag(-1, 2, -1) of size n: eigenvalues 2 - 2 cos(k pi / (n + 1)).
  const size_t n = 9;
  std::vector<double> a(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    a[i * n + i] = 2.0;
    if (i + 1 < n) a[i * n + i + 1] = a[(i + 1) * n + i] = -1.0;
  }
  gf::linalg::Mat m(n);
  m.a = a;
  auto ev = gf::linalg::jacobi_eigen(m, false).values;
  for (size_t k = 1; k <= n; ++k)
    CHECK(ev[k - 1] == doctest::Approx(2.0 - 2.0 * std::cos(k * M_PI / (n + 1))).epsilon(1e-9));

  // W_K = W_Q: M = W W^T is PSD and symmetric.
  const size_t d = 6, dk = 2;
  Tensor w = gf_test::randn({d, dk}, 4);
  auto st = gf::linalg::bilinear_stats(gf::linalg::bilinear_form(w, &w));
  CHECK(st.antisym_ratio == doctest::Approx(0.0));
  CHECK(st.min_eig_sym >= -1e-9);
  CHECK(st.min_eig_sym == doctest::Approx(0.0).scale(1.0));  // rank 2 < 6
  // Hand example: M = [[0, 1], [-1, 0]] purely antisymmetric; W_Q = I, W_K = M^T.
  Tensor wq({2, 2}), wk({2, 2});
  const float q[4] = {1, 0, 0, 1}, k[4] = {0, -1, 1, 0};
  std::copy(q, q + 4, wq.data());
  std::copy(k, k + 4, wk.data());
  auto st2 = gf::linalg::bilinear_stats(gf::linalg::bilinear_form(wq, &wk));
  CHECK(st2.antisym_ratio == doctest::Approx(1.0));
  CHECK(st2.min_eig_sym == doctest::Approx(0.0));

  // Excess kurtosis: symmetric two-point distribution has kurtosis 1 (excess -2).
  CHECK(gf_hkt::excess_kurtosis({-1, 1, -1, 1}) == doctest::Approx(-2.0));
  // Uniform grid on [0, 1]: excess kurtosis -> -1.2.
  std::vector<double> u;
  for (int i = 0; i <= 10000; ++i) u.push_back(i / 10000.0);
  CHECK(gf_hkt::excess_kurtosis(u) == doctest::Approx(-1.2).epsilon(1e-3));
}

TEST_CASE("hkt analysis: Mardia's kurtosis and numerical rank against independent computations") {
  // p = 2 by hand: explicit 2 x 2 inverse of the covariance
  std::vector<std::vector<double>> x = {{1, 2}, {3, 1}, {-2, 0.5}, {0, -4}, {5, 3}, {-1, -1}};
  const double n = x.size();
  double m0 = 0, m1 = 0;
  for (auto& v : x) m0 += v[0] / n, m1 += v[1] / n;
  double c00 = 0, c01 = 0, c11 = 0;
  for (auto& v : x) {
    c00 += (v[0] - m0) * (v[0] - m0) / n;
    c01 += (v[0] - m0) * (v[1] - m1) / n;
    c11 += (v[1] - m1) * (v[1] - m1) / n;
  }
  const double det = c00 * c11 - c01 * c01;
  double b2 = 0;
  for (auto& v : x) {
    const double a = v[0] - m0, b = v[1] - m1;
    const double m = (c11 * a * a - 2 * c01 * a * b + c00 * b * b) / det;
    b2 += m * m / n;
  }
  size_t rank = 0;
  CHECK(gf_hkt::mardia_kurtosis(x, &rank) == doctest::Approx(b2).epsilon(1e-10));
  CHECK(rank == 2);
  // a Gaussian sample of dimension 4: b_2,p near p (p + 2) = 24
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd;
  std::vector<std::vector<double>> g(40000, std::vector<double>(4));
  for (auto& v : g) {
    for (auto& c : v) c = nd(rng);
    v[1] += 0.5 * v[0];  // correlated: the covariance matters
  }
  CHECK(gf_hkt::mardia_kurtosis(g) == doctest::Approx(24.0).epsilon(0.03));
  // a duplicated coordinate: inverted on its support, dimension 3 (expectation 15)
  for (auto& v : g) v[3] = v[2];
  CHECK(gf_hkt::mardia_kurtosis(g, &rank) == doctest::Approx(15.0).epsilon(0.03));
  CHECK(rank == 3);
  // rank of a sum of R random outer products
  for (size_t r : {1u, 3u, 7u}) {
    gf::linalg::Mat a(10);
    for (size_t t = 0; t < r; ++t) {
      std::vector<double> u(10), w(10);
      for (auto& c : u) c = nd(rng);
      for (auto& c : w) c = nd(rng);
      for (size_t i = 0; i < 10; ++i)
        for (size_t j = 0; j < 10; ++j) a(i, j) += u[i] * w[j];
    }
    CHECK(gf_hkt::numerical_rank(a) == r);
  }
}

// ---------------------------------------------------------------------------
// The `hkt` block and the `hybrid_conv` head through the registry.

namespace {

std::shared_ptr<gf::AttentionBlock> make_block(const std::string& yaml, size_t d, uint64_t seed) {
  gf::Rng rng(seed, "hkt-test");
  gf::AttentionBuild b;
  b.d_model = d;
  b.registry = &gf_test::registry();
  b.rng = &rng;
  return gf_test::registry().create_attention(gf::ConfigNode::load_string(yaml), b);
}

Var param_named(const gf::Module& m, const std::string& name) {
  for (auto& p : m.named_parameters())
    if (p.first == name) return p.second;
  FAIL("no parameter " << name);
  return Var();
}

void set_all(const gf::Module& m, const std::string& suffix, float value) {
  for (auto& p : m.named_parameters())
    if (p.first.size() >= suffix.size() &&
        p.first.compare(p.first.size() - suffix.size(), suffix.size(), suffix) == 0)
      p.second.value().fill(value);
}

// Central differences on a module's own parameters (in place), against backward().
void check_param_gradients(const gf::Module& m, const std::function<Var()>& f, double eps = 1e-2,
                           double tol = 2e-2, size_t per_param = 6) {
  auto params = m.named_parameters();
  for (auto& p : params) p.second.zero_grad();
  gf::backward(f());
  for (auto& p : params) {
    Var v = p.second;
    Tensor g = v.grad().defined() ? v.grad().clone() : Tensor(v.shape());
    const size_t n = v.size(), step = n > per_param ? n / per_param : 1;
    for (size_t j = 0; j < n; j += step) {
      const float orig = v.value()[j];
      auto eval = [&](float x) {
        v.value()[j] = x;
        gf::NoGradGuard ng;
        return static_cast<double>(f().value().item());
      };
      const double num =
          (eval(orig + static_cast<float>(eps)) - eval(orig - static_cast<float>(eps))) / (2 * eps);
      v.value()[j] = orig;
      const double err = std::fabs(g[j] - num) / std::max(1.0, std::fabs(num));
      INFO("parameter " << p.first << "[" << j << "] analytic " << g[j] << " numeric " << num);
      CHECK(err <= tol);
    }
  }
}

std::vector<uint8_t> lengths_mask(const std::vector<size_t>& lens, size_t T) {
  std::vector<uint8_t> m(lens.size() * T, 0);
  for (size_t b = 0; b < lens.size(); ++b)
    for (size_t t = 0; t < lens[b]; ++t) m[b * T + t] = 1;
  return m;
}

const char* kHybrid = "plugin: hkt\nheads: 2\nd_k: 3\nlevels: 3\nhead: {plugin: hybrid_conv}\n";

}  // namespace

TEST_CASE("hkt block: finite-difference gradients of input and every parameter") {
  for (std::string fusion : {"static", "input"}) {
    CAPTURE(fusion);
    const size_t d = 6, B = 2, T = 7;
    auto blk = make_block(std::string(kHybrid) + "fusion: " + fusion + "\n", d, 1);
    set_all(*blk, "beta", 0.4f);             // a generic gate
    for (auto& p : blk->named_parameters())  // generic fusion weights
      if (p.first.rfind("fusion.", 0) == 0)
        p.second.value() = gf_test::randn(p.second.shape(), 8, 0.5f);
    auto valid = lengths_mask({7, 5}, T);
    gf::ForwardContext ctx;
    ctx.key_valid = &valid;
    gf_test::check_gradients(
        [&](const std::vector<Var>& in) { return gf_test::weighted_sum(blk->forward(in[0], ctx)); },
        {gf_test::randn({B, T, d}, 2)});
    Var x = gf::constant(gf_test::randn({B, T, d}, 3));
    check_param_gradients(*blk, [&] { return gf_test::weighted_sum(blk->forward(x, ctx)); });
  }
}

TEST_CASE("hkt block: share_qk gives one W_Q/W_K per head and still differentiates") {
  auto blk = make_block(std::string(kHybrid) + "share_qk: true\n", 6, 4);
  size_t wq = 0;
  for (auto& p : blk->named_parameters()) wq += p.first.find(".w_q") != std::string::npos;
  CHECK(wq == 2);
  auto h = blk->heads();
  CHECK(h[0].head->w_q(2) == h[0].head->w_q(0));
  Var x = gf::constant(gf_test::randn({2, 9, 6}, 3));
  gf::ForwardContext ctx;
  check_param_gradients(*blk, [&] { return gf_test::weighted_sum(blk->forward(x, ctx)); });
}

TEST_CASE("hkt block: L = 1 with beta -> +inf equals mha with the same weights") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const std::string c = causal ? "causal: true\n" : "";
    const size_t d = 8, B = 2, T = 9;
    auto mha = make_block("plugin: mha\nheads: 2\n" + c, d, 5);
    auto hkt =
        make_block("plugin: hkt\nheads: 2\nlevels: 1\nhead: {plugin: hybrid_conv}\n" + c, d, 6);
    for (auto& p : mha->named_parameters()) {
      Var dst = param_named(*hkt, p.first);
      REQUIRE(dst.shape() == p.second.shape());
      dst.value() = p.second.value().clone();
    }
    set_all(*hkt, "beta", 40.0f);  // sigmoid(40) == 1 in float
    auto valid = lengths_mask({9, 6}, T);
    gf::ForwardContext ctx;
    ctx.key_valid = &valid;
    Var x = gf::constant(gf_test::randn({B, T, d}, 7));
    Var ym = mha->forward(x, ctx), yh = hkt->forward(x, ctx);
    for (size_t i = 0; i < ym.size(); ++i)
      CHECK(yh.value()[i] == doctest::Approx(ym.value()[i]).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE(
    "hybrid_conv head: beta -> -inf is the causal convolution of V alone, +inf is attention") {
  const size_t d = 5, dk = 3, dv = 4, B = 2, T = 6, K = 4;
  gf::Rng rng(3, "head");
  gf::HeadBuild hb{gf::HeadShape{d, dk, dv, 2, false}, &gf_test::registry(), &rng};
  auto head = gf_test::registry().create_head(
      gf::ConfigNode::load_string("plugin: hybrid_conv\nkernel: 4\n"), hb);
  Var conv_b = param_named(*head, "conv_b");
  conv_b.value() = gf_test::randn({dv}, 9);
  Var b_v = param_named(*head, "b_v");
  b_v.value() = gf_test::randn({dv}, 10);
  Tensor x0 = gf_test::randn({B, T, d}, 11);
  std::vector<Var> levels{gf::constant(x0), gf::constant(gf_test::randn({B, 3, d}, 12))};
  Tensor att_out = gf_test::randn({B, T, dv}, 13, 5.0f);
  size_t calls = 0;
  gf::AttendFn attend = [&](const std::vector<Var>& q, const std::vector<Var>& k, const Var& v) {
    ++calls;
    CHECK(q.size() == 2);
    CHECK(k[1].dim(1) == 3);
    CHECK(v.dim(2) == dv);
    return gf::constant(att_out);
  };
  gf::ForwardContext ctx;

  Var beta = param_named(*head, "beta");
  beta.value()[0] = -40.0f;
  Var y = head->forward(gf::HeadInput{levels, attend, ctx});
  // Hand loop: v = x W_V + b_V; conv[t, c] = b[c] + sum_j w[c, j] v[t - (K - 1) + j, c].
  const Tensor& wv = param_named(*head, "w_v").value();
  const Tensor& cw = param_named(*head, "conv_w").value();
  std::vector<double> v(B * T * dv);
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t)
      for (size_t c = 0; c < dv; ++c) {
        double s = b_v.value()[c];
        for (size_t i = 0; i < d; ++i) s += x0[(b * T + t) * d + i] * wv[i * dv + c];
        v[(b * T + t) * dv + c] = s;
      }
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t)
      for (size_t c = 0; c < dv; ++c) {
        double s = conv_b.value()[c];
        for (size_t j = 0; j < K; ++j) {
          long ti = static_cast<long>(t) - static_cast<long>(K - 1) + static_cast<long>(j);
          if (ti >= 0) s += cw[c * K + j] * v[(b * T + ti) * dv + c];
        }
        CHECK(y.value()[(b * T + t) * dv + c] == doctest::Approx(s).epsilon(1e-5));
      }

  beta.value()[0] = 40.0f;
  y = head->forward(gf::HeadInput{levels, attend, ctx});
  for (size_t i = 0; i < y.size(); ++i)
    CHECK(y.value()[i] == doctest::Approx(att_out[i]).epsilon(1e-5).scale(1.0));
  CHECK(calls == 2);
  auto diag = head->diagnostics();
  CHECK(diag.at("beta") == doctest::Approx(40.0));
  CHECK(diag.at("gate") == doctest::Approx(1.0));
}

TEST_CASE("hkt block causal: output i has exactly zero gradient w.r.t. inputs j > i") {
  const size_t d = 6, B = 2, T = 11;
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    auto blk = make_block(std::string(kHybrid) + (causal ? "causal: true\n" : ""), d, 7);
    for (auto& p : blk->named_parameters())
      if (p.first == "fusion.logits") p.second.value() = Tensor::from({3}, {-0.5f, 0.3f, 1.0f});
    gf::ForwardContext ctx;
    size_t future_nonzero = 0;
    for (size_t i : {0, 2, 3, 5, 8}) {
      Var x = gf::parameter(gf_test::randn({B, T, d}, 20 + i));
      gf::backward(gf_test::weighted_sum(ops::select_position(blk->forward(x, ctx), i), 30 + i));
      REQUIRE(x.grad().defined());
      double past = 0.0;
      for (size_t b = 0; b < B; ++b)
        for (size_t j = 0; j < T; ++j)
          for (size_t c = 0; c < d; ++c) {
            const float g = x.grad()[(b * T + j) * d + c];
            if (j <= i)
              past += std::fabs(g);
            else if (g != 0.0f)
              ++future_nonzero;
          }
      CHECK(past > 0.0);
    }
    if (causal)
      CHECK(future_nonzero == 0);
    else
      CHECK(future_nonzero > 0);  // the check can see a leak
  }
}

TEST_CASE("hkt block: fusion weights are a convex combination") {
  const size_t d = 6;
  auto blk = make_block(std::string(kHybrid), d, 8);
  Var logits = param_named(*blk, "fusion.logits");
  logits.value() = Tensor::from({3}, {0.2f, -1.0f, 0.7f});
  gf::ForwardContext ctx;
  blk->forward(gf::constant(gf_test::randn({2, 5, d}, 1)), ctx);
  auto lam = blk->diagnostics().at("lambda");
  REQUIRE(lam.size() == 3);
  double z = std::exp(0.2) + std::exp(-1.0) + std::exp(0.7);
  CHECK(lam[0] == doctest::Approx(std::exp(0.2) / z));
  CHECK(lam[2] == doctest::Approx(std::exp(0.7) / z));
  CHECK(lam[0] + lam[1] + lam[2] == doctest::Approx(1.0));

  auto inp = make_block(std::string(kHybrid) + "fusion: input\n", d, 9);
  for (auto& p : inp->named_parameters())
    if (p.first.rfind("fusion.", 0) == 0) p.second.value() = gf_test::randn(p.second.shape(), 3);
  inp->forward(gf::constant(gf_test::randn({3, 5, d}, 2)), ctx);
  auto lam2 = inp->diagnostics().at("lambda");
  REQUIRE(lam2.size() == 3);
  CHECK(lam2[0] + lam2[1] + lam2[2] == doctest::Approx(1.0));
  for (double l : lam2) CHECK(l > 0.0);
}

TEST_CASE("hkt block: a padded batch equals its samples run one by one") {
  const size_t d = 6, T = 11;
  const std::vector<size_t> lens{11, 8, 3};
  for (std::string extra : {"", "fusion: input\n", "causal: true\n", "stride: 3\n"}) {
    CAPTURE(extra);
    auto blk = make_block(std::string(kHybrid) + extra, d, 10);
    for (auto& p : blk->named_parameters())
      if (p.first.rfind("fusion.", 0) == 0) p.second.value() = gf_test::randn(p.second.shape(), 4);
    Tensor xb = gf_test::randn({lens.size(), T, d}, 5);
    auto valid = lengths_mask(lens, T);
    gf::ForwardContext ctx;
    ctx.key_valid = &valid;
    Var yb = blk->forward(gf::constant(xb), ctx);
    for (size_t b = 0; b < lens.size(); ++b) {
      const size_t n = lens[b];
      Tensor xs({1, n, d});
      for (size_t i = 0; i < n * d; ++i) xs[i] = xb[b * T * d + i];
      gf::ForwardContext c1;
      Var ys = blk->forward(gf::constant(xs), c1);
      for (size_t i = 0; i < n * d; ++i)
        CHECK(ys.value()[i] == doctest::Approx(yb.value()[b * T * d + i]).epsilon(1e-4).scale(1.0));
    }
  }
}

TEST_CASE("hkt block: option errors") {
  CHECK_THROWS_AS(make_block(std::string(kHybrid) + "fusion: input\ncausal: true\n", 6, 1),
                  gf::ConfigError);
  CHECK_THROWS_AS(make_block(std::string(kHybrid) + "levls: 2\n", 6, 1), gf::ConfigError);
  CHECK_THROWS_AS(make_block(std::string(kHybrid) + "fusion: dynamic\n", 6, 1), gf::ConfigError);
  CHECK_THROWS_AS(make_block(std::string(kHybrid) + "stride: 1\n", 6, 1), gf::ConfigError);
}

TEST_CASE("hkt block: works with the dot_product head") {
  auto blk = make_block("plugin: hkt\nheads: 2\nd_k: 3\nlevels: 2\n", 6, 12);
  Var x = gf::constant(gf_test::randn({2, 5, 6}, 3));
  gf::ForwardContext ctx;
  check_param_gradients(*blk, [&] { return gf_test::weighted_sum(blk->forward(x, ctx)); });
}

TEST_CASE("hkt analyze_json: bilinear forms, PSD condition, lambda, beta, kurtosis") {
  using nlohmann::json;
  const size_t d = 6, B = 2, T = 9;
  auto blk =
      make_block("plugin: hkt\nheads: 1\nd_k: 3\nlevels: 3\nhead: {plugin: hybrid_conv}\n", d, 13);
  Tensor probe = gf_test::randn({B, T, d}, 14);
  auto valid = lengths_mask({9, 6}, T);
  json j = json::parse(blk->analyze_json(&probe, &valid));
  REQUIRE(j["levels"].get<size_t>() == 3);
  REQUIRE(j["bilinear"].size() == 3);
  double lam_sum = 0;
  for (auto& l : j["lambda"]) lam_sum += l.get<double>();
  CHECK(lam_sum == doctest::Approx(1.0));
  // Random W_Q, W_K of rank 3 < d: the symmetric part is indefinite.
  CHECK(j["psd_condition"]["holds"].get<bool>() == false);
  CHECK(j["heads"][0]["beta"].get<double>() == doctest::Approx(0.0));
  REQUIRE(j["score_kurtosis"].size() == 3);

  // Level-0 kurtosis by hand: scores (x W_Q + b_Q)(x W_K + b_K)^T / sqrt(d_k) over valid pairs.
  auto head = blk->heads()[0].head;
  const Tensor& wq = head->w_q(0)->value();
  const Tensor& wk = head->w_k(0)->value();
  std::vector<double> s;
  for (size_t b = 0; b < B; ++b) {
    const size_t n = b == 0 ? 9 : 6;
    std::vector<double> q(n * 3, 0.0), k(n * 3, 0.0);  // biases are zero at initialisation
    for (size_t t = 0; t < n; ++t)
      for (size_t c = 0; c < 3; ++c)
        for (size_t i = 0; i < d; ++i) {
          q[t * 3 + c] += probe[(b * T + t) * d + i] * wq[i * 3 + c];
          k[t * 3 + c] += probe[(b * T + t) * d + i] * wk[i * 3 + c];
        }
    for (size_t a = 0; a < n; ++a)
      for (size_t c = 0; c < n; ++c)
        s.push_back(
            (q[a * 3] * k[c * 3] + q[a * 3 + 1] * k[c * 3 + 1] + q[a * 3 + 2] * k[c * 3 + 2]) /
            std::sqrt(3.0));
  }
  CHECK(j["score_kurtosis"][0]["scores"].get<size_t>() == s.size());
  CHECK(j["score_kurtosis"][0]["pearson_kurtosis"].get<double>() ==
        doctest::Approx(j["score_kurtosis"][0]["excess_kurtosis"].get<double>() + 3.0));
  CHECK(!j["score_kurtosis"][0].contains("mardia_kurtosis"));  // one head: no multivariate form
  // Gram rank: levels of 9, 5, 3 tokens, d_k 3: the fused matrix has rank <= 3 + 3 + 3 = 9
  CHECK(j["gram_rank"]["bound"].get<size_t>() == 9);
  CHECK(j["gram_rank"]["rank_per_head"][0].get<size_t>() <= 9);
  CHECK(j["score_kurtosis"][0]["excess_kurtosis"].get<double>() ==
        doctest::Approx(gf_hkt::excess_kurtosis(s)).epsilon(1e-4));

  // W_K = W_Q at every level: M = W W^T is symmetric PSD, the condition holds.
  for (size_t l = 0; l < 3; ++l)
    const_cast<Var*>(head->w_k(l))->value() = head->w_q(l)->value().clone();
  json j2 = json::parse(blk->analyze_json(&probe, &valid));
  CHECK(j2["psd_condition"]["holds"].get<bool>() == true);
  for (auto& l : j2["bilinear"])
    CHECK(l["antisym_ratio_mean"].get<double>() == doctest::Approx(0.0));
  // Without a probe the static lambda still comes back.
  json j3 = json::parse(blk->analyze_json(nullptr, nullptr));
  CHECK(j3["lambda"].size() == 3);
  CHECK(j3["score_kurtosis"].is_null());
}

TEST_CASE("hkt analyze_json: one level has Gram rank d_k; Mardia's kurtosis over heads") {
  using nlohmann::json;
  const size_t d = 6, B = 2, T = 9;
  auto one = make_block("plugin: hkt\nheads: 2\nd_k: 2\nlevels: 1\n", d, 21);
  Tensor probe = gf_test::randn({B, T, d}, 22);
  auto valid = lengths_mask({9, 6}, T);
  json j = json::parse(one->analyze_json(&probe, &valid));
  // one level: S = Q K^T / sqrt(d_k) with d_k = 2 < 9 tokens
  CHECK(j["gram_rank"]["bound"].get<size_t>() == 2);
  CHECK(j["gram_rank"]["rank_per_head"][0].get<size_t>() == 2);
  CHECK(j["gram_rank"]["rank_per_head"][1].get<size_t>() == 2);
  // two heads: a 2-dimensional Mardia statistic over the 81 + 36 pairs
  const json& k0 = j["score_kurtosis"][0];
  CHECK(k0["scores"].get<size_t>() == 2 * (81 + 36));
  CHECK(k0["mardia_dimension"].get<size_t>() == 2);
  CHECK(k0["mardia_normal_expectation"].get<size_t>() == 8);
  CHECK(k0["mardia_kurtosis"].get<double>() > 0.0);
  // three levels at stride 2 on 9 tokens: 9, 5, 3 level tokens, bound 2 + 2 + 2 = 6
  auto three = make_block("plugin: hkt\nheads: 2\nd_k: 2\nlevels: 3\n", d, 23);
  json j3 = json::parse(three->analyze_json(&probe, &valid));
  CHECK(j3["gram_rank"]["bound"].get<size_t>() == 6);
  CHECK(j3["gram_rank"]["rank_per_head"][0].get<size_t>() > 2);  // levels add rank
  CHECK(j3["gram_rank"]["rank_per_head"][0].get<size_t>() <= 6);
}

TEST_CASE("blocks answer shape questions: score levels and the analytic score-cost ratio") {
  auto hkt = make_block("plugin: hkt\nheads: 2\nlevels: 3\nstride: 2\n", 8, 1);
  CHECK(hkt->score_levels() == 3);
  CHECK(hkt->score_cost_ratio() == doctest::Approx(1.0 + 1.0 / 4 + 1.0 / 16));
  auto hkt4 = make_block("plugin: hkt\nheads: 2\nlevels: 2\nstride: 4\n", 8, 1);
  CHECK(hkt4->score_cost_ratio() == doctest::Approx(1.0 + 1.0 / 16));
  auto mha = make_block("plugin: mha\nheads: 2\n", 8, 1);
  CHECK(mha->score_levels() == 1);
  CHECK(mha->score_cost_ratio() == 1.0);
}

TEST_CASE("hybrid_conv and dot_product share their projections: same names, same initial bits") {
  gf::HeadShape shape{6, 3, 4, 2, false};
  auto make = [&](const char* yaml) {
    gf::Rng rng(5, "head");
    gf::HeadBuild hb{shape, &gf_test::registry(), &rng};
    return gf_test::registry().create_head(gf::ConfigNode::load_string(yaml), hb);
  };
  auto dot = make("plugin: dot_product\n");
  auto hyb = make("plugin: hybrid_conv\n");
  auto dp = dot->named_parameters(), hp = hyb->named_parameters();
  REQUIRE(dp.size() == 10);             // w_q, b_q, w_k, b_k per level, w_v, b_v
  REQUIRE(hp.size() == dp.size() + 3);  // conv_w, conv_b, beta after them
  for (size_t i = 0; i < dp.size(); ++i) {
    CHECK(dp[i].first == hp[i].first);
    const Tensor& a = dp[i].second.value();
    const Tensor& b = hp[i].second.value();
    REQUIRE(a.size() == b.size());
    CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  }
  CHECK(dp[4].first == "w_q_l1");
  CHECK(hyb->w_q(1) != nullptr);
  CHECK(hyb->w_q(2) == nullptr);
  CHECK(hyb->w_v()->value().shape() == gf::Shape{6, 4});
}
