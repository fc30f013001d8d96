// The vectorised row kernels (every instruction set this CPU has) against plain
// double-precision loops, and the streaming attention kernel against a
// composition of core ops, finite differences, many tiles and thread counts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "growformer/kernels.hpp"
#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"
#include "testing.hpp"

using namespace gf;
using gf_test::randn;
using gf_test::weighted_sum;

namespace {

// Restores the instruction set, tile size and thread count when a test ends.
struct KernelSettings {
  std::string simd = kernels::simd_name();
  size_t rows = kernels::attention_block_rows();
  size_t threads = num_threads();
  ~KernelSettings() {
    kernels::set_simd(simd);
    kernels::set_attention_block_rows(rows);
    set_num_threads(threads);
  }
};

std::vector<float> values(size_t n, uint64_t seed, float std = 2.0f) {
  return randn({n}, seed, std).to_vector();
}

}  // namespace

TEST_CASE("row kernels: every instruction set against double loops, odd lengths") {
  KernelSettings keep;
  REQUIRE(!kernels::simd_available().empty());
  CHECK(kernels::set_simd("no-such-set") == false);
  for (const std::string& isa : kernels::simd_available()) {
    REQUIRE(kernels::set_simd(isa));
    CHECK(kernels::simd_name() == isa);
    // the set as kernels compiled outside the core look it up
    const kernels::Isa want = isa == "avx512" ? kernels::Isa::avx512
                              : isa == "avx2" ? kernels::Isa::avx2
                                              : kernels::Isa::sse2;
    CHECK(kernels::active_isa() == want);
    for (size_t n : {0, 1, 3, 7, 8, 15, 16, 17, 33, 100}) {
      CAPTURE(isa);
      CAPTURE(n);
      auto x = values(n, n + 1), y = values(n, n + 2), g = values(n, n + 3);
      double mx = -INFINITY, dt = 0;
      for (size_t j = 0; j < n; ++j) {
        mx = std::max<double>(mx, x[j]);
        dt += static_cast<double>(x[j]) * y[j];
      }
      CHECK(kernels::row_max(x.data(), n) == static_cast<float>(mx));
      CHECK(kernels::dot(x.data(), y.data(), n) == doctest::Approx(dt).epsilon(1e-5).scale(1.0));
      auto e = x;
      float s = kernels::exp_shift_sum(e.data(), n, 0.5f);
      double sref = 0;
      for (size_t j = 0; j < n; ++j) {
        double ej = std::exp(static_cast<double>(x[j]) - 0.5);
        sref += ej;
        CHECK(e[j] == doctest::Approx(ej).epsilon(2e-6));
      }
      CHECK(s == doctest::Approx(sref).epsilon(1e-5));
      auto ds = y;
      kernels::softmax_grad_row(ds.data(), x.data(), n, 0.25f, 3.0f);
      auto ax = y;
      kernels::axpy(ax.data(), x.data(), n, -1.5f);
      std::vector<float> ge(n), gg(y);
      kernels::gelu(x.data(), ge.data(), n);
      kernels::gelu_grad(x.data(), g.data(), gg.data(), n);
      for (size_t j = 0; j < n; ++j) {
        double xj = x[j];
        CHECK(ds[j] == doctest::Approx(xj * (y[j] - 0.25) * 3.0).epsilon(1e-5));
        CHECK(ax[j] == doctest::Approx(y[j] - 1.5 * xj).epsilon(1e-5));
        double cdf = 0.5 * (1.0 + std::erf(xj / std::sqrt(2.0)));
        double pdf = std::exp(-0.5 * xj * xj) / std::sqrt(2.0 * M_PI);
        CHECK(ge[j] == doctest::Approx(xj * cdf).epsilon(1e-5).scale(1e-6));
        CHECK(gg[j] == doctest::Approx(y[j] + g[j] * (cdf + xj * pdf)).epsilon(1e-5).scale(1.0));
      }
    }
    // -inf gives exactly 0, NaN propagates, huge arguments do not overflow to NaN
    std::vector<float> z{-INFINITY, 0.0f, -INFINITY, 1.0f,     -200.0f,
                         -INFINITY, 2.0f, 0.5f,      -INFINITY};
    float s = kernels::exp_shift_sum(z.data(), z.size(), 2.0f);
    CHECK(z[0] == 0.0f);
    CHECK(z[5] == 0.0f);
    CHECK(z[8] == 0.0f);
    CHECK(z[4] == 0.0f);
    CHECK(std::isfinite(s));
    std::vector<float> nan(20, 1.0f);
    nan[3] = std::numeric_limits<float>::quiet_NaN();
    nan[17] = std::numeric_limits<float>::quiet_NaN();
    kernels::exp_shift(nan.data(), nan.size(), 0.0f);
    CHECK(std::isnan(nan[3]));
    CHECK(std::isnan(nan[17]));
    CHECK(nan[0] == doctest::Approx(std::exp(1.0)));
  }
}

TEST_CASE(
    "exp kernel: every set within 1.5 ulp over its whole range; limits; a value's bits do not "
    "depend on its place") {
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    REQUIRE(kernels::set_simd(isa));
    CAPTURE(isa);
    // 400,001 points over [-103.5, 88.7]: normal results within 1.5 ulp of the double exp,
    // subnormal ones within one subnormal step
    const size_t n = 400001;
    std::vector<float> x(n), e(n);
    for (size_t j = 0; j < n; ++j) x[j] = -103.5f + 192.2f * static_cast<float>(j) / (n - 1);
    e = x;
    kernels::exp_shift(e.data(), n, 0.0f);
    double worst_ulp = 0, worst_sub = 0;
    for (size_t j = 0; j < n; ++j) {
      double ref = std::exp(static_cast<double>(x[j]));
      if (ref >= std::numeric_limits<float>::min()) {
        double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
        worst_ulp = std::max(worst_ulp, std::fabs(e[j] - ref) / ulp);
      } else {
        worst_sub =
            std::max(worst_sub, std::fabs(e[j] - ref) / std::numeric_limits<float>::denorm_min());
      }
    }
    CHECK(worst_ulp <= 1.5);  // 0.97..0.99 measured on each set
    CHECK(worst_sub <= 1.0);
    std::vector<float> lim{89.0f, INFINITY, -104.0f, -1e30f, -INFINITY, 0.0f, -0.0f, 1.0f};
    kernels::exp_shift(lim.data(), lim.size(), 0.0f);
    CHECK(lim[0] == INFINITY);
    CHECK(lim[1] == INFINITY);
    CHECK(lim[2] == 0.0f);
    CHECK(lim[3] == 0.0f);
    CHECK(lim[4] == 0.0f);
    CHECK(lim[5] == 1.0f);
    CHECK(lim[6] == 1.0f);
    CHECK(lim[7] == doctest::Approx(std::exp(1.0)).epsilon(3e-7));
    // a row of 37: each value's bits as at the head of a row of its own (vector and tail lanes)
    auto row = values(37, 11);
    auto whole = row;
    float sum = kernels::exp_shift_sum(whole.data(), whole.size(), 0.75f);
    for (size_t j = 0; j < row.size(); ++j) {
      float one = row[j];
      kernels::exp_shift(&one, 1, 0.75f);
      CHECK(one == whole[j]);
    }
    CHECK(std::isfinite(sum));
  }
}

TEST_CASE(
    "GELU kernels: every set against the double erfc over [-14, 10], the far tail relative; "
    "limits; a value's bits do not depend on its place") {
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    REQUIRE(kernels::set_simd(isa));
    CAPTURE(isa);
    // 96,001 points over [-14, 10]: GELU within 2e-6 relative wherever it is a normal float (the
    // negative tail included, down to 1e-38 at x = -13.2); the derivative within 5e-7 absolute,
    // and within 2e-6 relative below x = -1, where it is small
    const size_t n = 96001;
    std::vector<float> x(n), y(n), gx(n), ones(n, 1.0f);
    for (size_t j = 0; j < n; ++j) x[j] = -14.0f + 24.0f * static_cast<float>(j) / (n - 1);
    kernels::gelu(x.data(), y.data(), n);
    kernels::gelu_grad(x.data(), ones.data(), gx.data(), n, false);
    double worst = 0, worst_g = 0, worst_gt = 0;
    size_t normal = 0;
    for (size_t j = 0; j < n; ++j) {
      const double xj = x[j];
      const double cdf = 0.5 * std::erfc(-xj / std::sqrt(2.0));
      const double ref = xj * cdf;
      const double dref = cdf + xj * std::exp(-0.5 * xj * xj) / std::sqrt(2.0 * M_PI);
      if (std::fabs(ref) >= std::numeric_limits<float>::min()) {
        worst = std::max(worst, std::fabs(y[j] - ref) / std::fabs(ref));
        ++normal;
      }
      worst_g = std::max(worst_g, std::fabs(gx[j] - dref));
      if (xj < -1 && std::fabs(dref) >= std::numeric_limits<float>::min())
        worst_gt = std::max(worst_gt, std::fabs(gx[j] - dref) / std::fabs(dref));
    }
    CHECK(normal > 92000);    // below x = -13.2, GELU is subnormal
    CHECK(worst <= 2e-6);     // 7.8e-7 measured on each set
    CHECK(worst_g <= 5e-7);   // 1.8e-7
    CHECK(worst_gt <= 2e-6);  // 5.5e-7
    // limits: +inf stays, the tails saturate, NaN propagates; a fresh gradient ignores gx
    std::vector<float> lim{INFINITY, 14.5f, -14.5f, 30.0f, -30.0f, 0.0f, NAN};
    std::vector<float> ly(lim.size()), lg(lim.size(), NAN), l1(lim.size(), 1.0f);
    kernels::gelu(lim.data(), ly.data(), lim.size());
    kernels::gelu_grad(lim.data(), l1.data(), lg.data(), lim.size(), false);
    CHECK(ly[0] == INFINITY);
    CHECK(ly[1] == 14.5f);
    CHECK(ly[2] == 0.0f);
    CHECK(ly[3] == 30.0f);
    CHECK(ly[4] == 0.0f);
    CHECK(ly[5] == 0.0f);
    CHECK(std::isnan(ly[6]));
    CHECK(lg[1] == 1.0f);
    CHECK(lg[2] == 0.0f);
    CHECK(lg[3] == 1.0f);
    CHECK(lg[4] == 0.0f);
    CHECK(lg[5] == 0.5f);
    CHECK(std::isnan(lg[6]));
    // rows of 1..70 (the unrolled registers, single registers and the padded tail) against each
    // value's result at the head of a row of its own; the derivative added to a given gx
    auto row = values(70, 21), g = values(70, 22), base = values(70, 23);
    for (float& v : row) v *= 4.0f;
    for (size_t len : {1, 5, 16, 17, 47, 64, 70}) {
      CAPTURE(len);
      std::vector<float> whole(len), dw(base.begin(), base.begin() + len);
      kernels::gelu(row.data(), whole.data(), len);
      kernels::gelu_grad(row.data(), g.data(), dw.data(), len, true);
      for (size_t j = 0; j < len; ++j) {
        float one = 0, d = base[j];
        kernels::gelu(&row[j], &one, 1);
        kernels::gelu_grad(&row[j], &g[j], &d, 1, true);
        CHECK(one == whole[j]);
        CHECK(d == dw[j]);
      }
    }
  }
}

TEST_CASE("layer norm kernels: every instruction set against double loops, odd widths") {
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    REQUIRE(kernels::set_simd(isa));
    for (size_t d : {1, 3, 8, 13, 64, 70}) {
      CAPTURE(isa);
      CAPTURE(d);
      const size_t rows = 5;
      auto x = values(rows * d, d + 11), g = values(rows * d, d + 12);
      auto gamma = values(d, d + 13), beta = values(d, d + 14);
      for (float& v : x) v = 3.0f * v + 1.0f;  // a mean and a scale away from 0 and 1
      std::vector<float> y(rows * d), stats(2 * rows), gx = values(rows * d, d + 15);
      const std::vector<float> gx0 = gx;
      std::vector<float> ggam = values(d, d + 16), gbet = values(d, d + 17);
      const std::vector<float> ggam0 = ggam, gbet0 = gbet;
      const float eps = 1e-5f;
      kernels::layer_norm_rows(x.data(), rows, d, gamma.data(), beta.data(), eps, y.data(),
                               stats.data());
      kernels::layer_norm_grad_rows(x.data(), g.data(), stats.data(), rows, d, gamma.data(),
                                    gx.data());
      kernels::layer_norm_param_grad(x.data(), g.data(), stats.data(), rows, d, ggam.data(),
                                     gbet.data());
      std::vector<double> dgam(d, 0.0), dbet(d, 0.0);
      for (size_t i = 0; i < rows; ++i) {
        const float* xi = x.data() + i * d;
        const float* gi = g.data() + i * d;
        double mu = 0, var = 0;
        for (size_t j = 0; j < d; ++j) mu += xi[j];
        mu /= double(d);
        for (size_t j = 0; j < d; ++j) var += (xi[j] - mu) * (xi[j] - mu);
        var /= double(d);
        const double rs = 1.0 / std::sqrt(var + eps);
        CHECK(stats[2 * i] == doctest::Approx(mu).epsilon(1e-5).scale(1.0));
        CHECK(stats[2 * i + 1] == doctest::Approx(rs).epsilon(1e-4));
        double s1 = 0, s2 = 0;
        for (size_t j = 0; j < d; ++j) {
          const double xh = (xi[j] - mu) * rs;
          CHECK(y[i * d + j] == doctest::Approx(xh * gamma[j] + beta[j]).epsilon(1e-4).scale(1.0));
          s1 += double(gi[j]) * gamma[j];
          s2 += double(gi[j]) * gamma[j] * xh;
          dgam[j] += gi[j] * xh;
          dbet[j] += gi[j];
        }
        s1 /= double(d);
        s2 /= double(d);
        for (size_t j = 0; j < d; ++j) {
          const double xh = (xi[j] - mu) * rs;
          const double ref = gx0[i * d + j] + rs * (double(gi[j]) * gamma[j] - s1 - xh * s2);
          CHECK(gx[i * d + j] == doctest::Approx(ref).epsilon(1e-4).scale(1.0));
        }
      }
      for (size_t j = 0; j < d; ++j) {
        CHECK(ggam[j] == doctest::Approx(ggam0[j] + dgam[j]).epsilon(1e-4).scale(1.0));
        CHECK(gbet[j] == doctest::Approx(gbet0[j] + dbet[j]).epsilon(1e-5).scale(1.0));
      }
      // either parameter gradient may be absent
      std::vector<float> only = ggam0;
      kernels::layer_norm_param_grad(x.data(), g.data(), stats.data(), rows, d, only.data(),
                                     nullptr);
      for (size_t j = 0; j < d; ++j) CHECK(only[j] == ggam[j]);
    }
  }
}

TEST_CASE("softmax_row: masked entries are 0, a row with nothing valid is all 0") {
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    std::vector<float> row{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    std::vector<uint8_t> valid{1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    REQUIRE(kernels::softmax_row(row.data(), row.size(), valid.data()));
    double z = 0;
    for (size_t j = 0; j < 11; ++j) z += valid[j] ? std::exp(j + 1.0 - 11.0) : 0.0;
    for (size_t j = 0; j < 11; ++j)
      CHECK(row[j] == doctest::Approx(valid[j] ? std::exp(j + 1.0 - 11.0) / z : 0.0).epsilon(1e-5));
    std::vector<uint8_t> none(11, 0);
    CHECK_FALSE(kernels::softmax_row(row.data(), row.size(), none.data()));
    for (float v : row) CHECK(v == 0.0f);
  }
}

namespace {

// softmax(q k^T * s + mask) v from generic ops; the mask is -1e30 (which underflows to
// an exact 0 probability, as the streaming kernel's -inf does).
Var attention_reference(const Var& q, const Var& k, const Var& v, float scale,
                        const std::vector<uint8_t>& valid, bool causal) {
  size_t B = q.dim(0), T = q.dim(1);
  Tensor mask({B, T, T}, 0.0f);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T; ++i)
      for (size_t j = 0; j < T; ++j)
        if (!valid[b * T + j] || (causal && j > i)) mask[(b * T + i) * T + j] = -1e30f;
  Var s = ops::add(ops::scale(ops::matmul(q, k, false, true), scale), constant(mask));
  return ops::matmul(ops::softmax(s), v);
}

}  // namespace

TEST_CASE("streaming attention: many tiles, padding, causal against core ops") {
  KernelSettings keep;
  size_t B = 3, T = 11, dk = 5, dv = 4;
  std::vector<uint8_t> valid(B * T, 1);
  for (size_t t = 7; t < T; ++t) valid[T + t] = 0;  // sample 1 has 7 tokens
  valid[2 * T + 3] = 0;                             // sample 2: a padded key inside
  for (size_t rows : {1, 3, 4, 128})
    for (bool causal : {false, true}) {
      CAPTURE(rows);
      CAPTURE(causal);
      kernels::set_attention_block_rows(rows);
      std::vector<Var> a, r;
      for (uint64_t seed : {1, 2, 3}) {
        Tensor t = randn({B, T, seed == 3 ? dv : dk}, seed);
        a.push_back(parameter(t.clone()));
        r.push_back(parameter(t.clone()));
      }
      std::vector<uint8_t> caller_mask = valid;
      Var ya = ops::attention(a[0], a[1], a[2], 0.6f, {&caller_mask, causal});
      std::fill(caller_mask.begin(), caller_mask.end(), 0);  // the op must have kept its own copy
      backward(weighted_sum(ya));
      Var yr = attention_reference(r[0], r[1], r[2], 0.6f, valid, causal);
      backward(weighted_sum(yr));
      for (size_t i = 0; i < ya.size(); ++i)
        REQUIRE(ya.value()[i] == doctest::Approx(yr.value()[i]).epsilon(1e-5).scale(1e-6));
      for (size_t n = 0; n < 3; ++n)
        for (size_t i = 0; i < a[n].size(); ++i) {
          CAPTURE(n);
          REQUIRE(a[n].grad()[i] == doctest::Approx(r[n].grad()[i]).epsilon(1e-4).scale(1e-2));
        }
    }
}

TEST_CASE("streaming attention: finite differences across tiles; a sample with no valid key") {
  KernelSettings keep;
  kernels::set_attention_block_rows(2);
  size_t B = 2, T = 5, dk = 3, dv = 2;
  std::vector<uint8_t> valid{1, 1, 0, 1, 1, 0, 0, 0, 0, 0};  // sample 1 is all padding
  for (bool causal : {false, true})
    gf_test::check_gradients(
        [&](const std::vector<Var>& v) {
          return weighted_sum(ops::attention(v[0], v[1], v[2], 0.8f, {&valid, causal}));
        },
        {randn({B, T, dk}, 7), randn({B, T, dk}, 8), randn({B, T, dv}, 9)});
  Var q = parameter(randn({B, T, dk}, 1)), k = parameter(randn({B, T, dk}, 2)),
      v = parameter(randn({B, T, dv}, 3));
  Var y = ops::attention(q, k, v, 1.0f, {&valid, false});
  backward(weighted_sum(y));
  for (size_t i = T * dv; i < 2 * T * dv; ++i) CHECK(y.value()[i] == 0.0f);
  for (size_t i = T * dk; i < 2 * T * dk; ++i) {
    CHECK(q.grad()[i] == 0.0f);
    CHECK(k.grad()[i] == 0.0f);
  }
}

TEST_CASE("streaming attention: identical bits with 1 and 2 threads, any tile split") {
  KernelSettings keep;
  size_t B = 3, T = 37, dk = 8, dv = 8;
  std::vector<uint8_t> valid(B * T, 1);
  for (size_t t = 30; t < T; ++t) valid[t] = 0;
  std::vector<std::vector<float>> runs;
  for (size_t threads : {1, 2}) {
    set_num_threads(threads);
    kernels::set_attention_block_rows(8);
    Var q = parameter(randn({B, T, dk}, 1)), k = parameter(randn({B, T, dk}, 2)),
        v = parameter(randn({B, T, dv}, 3));
    Var y = ops::attention(q, k, v, 0.35f, {&valid, true});
    backward(weighted_sum(y));
    std::vector<float> all = y.value().to_vector();
    for (const Var* x : {&q, &k, &v})
      for (float g : x->grad().to_vector()) all.push_back(g);
    runs.push_back(all);
  }
  REQUIRE(runs[0].size() == runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) REQUIRE(runs[0][i] == runs[1][i]);
}

TEST_CASE("short-dimension products: every instruction set against double loops") {
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (size_t m : {1, 4, 7, 8, 13, 15})
      for (size_t n : {1, 9, 40, 531})
        for (size_t d : {1, 4, 5, 8, 16, 19}) {
          CAPTURE(isa);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(d);
          // float rounding grows with the reduction's length (531 products of size ~4)
          const double tol = 1.0 + double(std::max(n, d)) / 20.0;
          // padded leading dimensions catch stride mistakes
          size_t lda = d + 2, ldb = n + 3, ldc = n + 1, ldx = n + 2, ldy = d + 1, ldcd = d + 3;
          auto a = values(m * lda, 1), bt = values(d * ldb, 2), c0 = values(m * ldc, 3);
          auto x = values(m * ldx, 4), y = values(n * ldy, 5), y2 = values(m * ldy, 6);
          auto cn = values(m * ldcd, 7), ct = values(n * ldcd, 8);
          auto c = c0, cnd = cn, ctd = ct;
          kernels::gemm_short_k(m, n, d, 0.7f, a.data(), lda, bt.data(), ldb, c.data(), ldc);
          kernels::gemm_acc_nd(m, n, d, -1.3f, x.data(), ldx, y.data(), ldy, cnd.data(), ldcd);
          kernels::gemm_acc_tnd(m, n, d, 0.4f, x.data(), ldx, y2.data(), ldy, ctd.data(), ldcd);
          auto alpha_rows = values(m, 9);
          auto cnr = cn;
          kernels::gemm_acc_nd_rows(m, n, d, alpha_rows.data(), x.data(), ldx, y.data(), ldy,
                                    cnr.data(), ldcd);
          for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < n; ++j) {
              double s = 0;
              for (size_t p = 0; p < d; ++p)
                s += static_cast<double>(a[i * lda + p]) * bt[p * ldb + j];
              REQUIRE(c[i * ldc + j] == doctest::Approx(0.7 * s).epsilon(1e-5).scale(tol));
            }
          for (size_t i = 0; i < m; ++i)
            for (size_t j = n; j + 1 < ldc; ++j) REQUIRE(c[i * ldc + j] == c0[i * ldc + j]);
          for (size_t i = 0; i < m; ++i)
            for (size_t e = 0; e < ldcd; ++e) {
              double s = 0;
              if (e < d)
                for (size_t j = 0; j < n; ++j)
                  s += static_cast<double>(x[i * ldx + j]) * y[j * ldy + e];
              REQUIRE(cnd[i * ldcd + e] ==
                      doctest::Approx(cn[i * ldcd + e] - 1.3 * s).epsilon(1e-5).scale(tol));
              REQUIRE(
                  cnr[i * ldcd + e] ==
                  doctest::Approx(cn[i * ldcd + e] + alpha_rows[i] * s).epsilon(1e-5).scale(tol));
            }
          for (size_t j = 0; j < n; ++j)
            for (size_t e = 0; e < ldcd; ++e) {
              double s = 0;
              if (e < d)
                for (size_t i = 0; i < m; ++i)
                  s += static_cast<double>(x[i * ldx + j]) * y2[i * ldy + e];
              REQUIRE(ctd[j * ldcd + e] ==
                      doctest::Approx(ct[j * ldcd + e] + 0.4 * s).epsilon(1e-5).scale(tol));
            }
        }
  }
}

// One output element as the products define it: a chain of multiply-adds over q from 0, fused
// where the set has FMA (a float multiply and add on SSE2; this file is compiled without FMA, so
// the compiler does not fuse them).
float chain(const std::string& isa, size_t len, const float* x, size_t sx, const float* y,
            size_t sy) {
  float s = 0.0f;
  for (size_t q = 0; q < len; ++q) {
    if (isa == "sse2") {
      const float p = x[q * sx] * y[q * sy];
      s = p + s;
    } else {
      s = std::fma(x[q * sx], y[q * sy], s);
    }
  }
  return s;
}
float fused(const std::string& isa, float a, float b, float c) {
  if (isa == "sse2") {
    const float p = a * b;
    return p + c;
  }
  return std::fma(a, b, c);
}

// C (n x k, ldo) += 0.45 X^T Y for X (m x n, ldx), Y (m x k, ldy): the chain runs over the m
// rows; against the scalar chains, bit for bit
void check_acc_tnd(const std::string& isa, size_t m, size_t n, size_t k, const float* x, size_t ldx,
                   size_t ldy, size_t ldo, uint64_t seed) {
  auto y = values(m * ldy, seed), t0 = values(n * ldo, seed + 1);
  auto ct = t0;
  kernels::gemm_acc_tnd(m, n, k, 0.45f, x, ldx, y.data(), ldy, ct.data(), ldo);
  for (size_t j = 0; j < n; ++j)
    for (size_t e = 0; e < k; ++e) {
      const float s = chain(isa, m, x + j, ldx, y.data() + e, ldy);
      REQUIRE(ct[j * ldo + e] == fused(isa, 0.45f, s, t0[j * ldo + e]));
    }
}

// gemm_bias (+ bias) and gemm_short_k (x 0.3) of X (m x k, ldx) W (k x n, ldw) against the
// scalar chains, bit for bit
void check_bias_and_short_k(const std::string& isa, size_t m, size_t n, size_t k, size_t ldx,
                            size_t ldw, size_t ldc, uint64_t seed) {
  auto x = values(m * ldx, seed), w = values(k * ldw, seed + 1), bias = values(n, seed + 2);
  std::vector<float> c(m * ldc, 0.0f), cs(m * ldc, 0.0f);
  kernels::gemm_bias(m, n, k, x.data(), ldx, w.data(), ldw, bias.data(), c.data(), ldc);
  kernels::gemm_short_k(m, n, k, 0.3f, x.data(), ldx, w.data(), ldw, cs.data(), ldc);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      const float s = chain(isa, k, x.data() + i * ldx, 1, w.data() + j, ldw);
      REQUIRE(c[i * ldc + j] == s + bias[j]);
      REQUIRE(cs[i * ldc + j] == 0.3f * s);
    }
}

TEST_CASE("gemm_short_k over a Bt of 1 MiB or more, in column blocks: bit for bit the chains") {
  // d 64 x 4,100 columns (1.05 MB: blocks of 1,024 and a last block of 4, narrower than a
  // vector) and d 16 x 16,400 (blocks of 4,096, a last block of 16); 13 rows: two 6-row tiles
  // and a remainder row; odd leading dimensions
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (const auto& nk : {std::pair<size_t, size_t>{4100, 64}, {16400, 16}}) {
      // named, not bound: doctest's CAPTURE is a lambda (clang 14)
      const size_t n = nk.first, k = nk.second;
      CAPTURE(isa);
      CAPTURE(n);
      CAPTURE(k);
      check_bias_and_short_k(isa, 13, n, k, k + 3, n + 5, n + 1, 71);
    }
  }
}

TEST_CASE("gemm_short_k_max: gemm_short_k's products bit for bit, and each row's maximum") {
  // Rows through the 6-row tiles and a remainder (1, 5, 13, 128), d through the 2-vector tile
  // (3, 16), the 4-vector tile (64) and the long-d path (300 > 256), columns with a tail (531)
  // and in 256 KiB column blocks (64 x 4,100); each row's prior maximum is above its products
  // for some rows and -inf or below for the others, and -1e30 scores beside the products
  // (a masked key in the attention) must not matter.
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (const auto& nd :
         {std::pair<size_t, size_t>{531, 3}, {531, 16}, {40, 64}, {4100, 64}, {33, 300}})
      for (size_t m : {1, 5, 13, 128}) {
        const size_t n = nd.first, d = nd.second;
        CAPTURE(isa);
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(d);
        const size_t lda = d + 1, ldb = n + 2, ldc = n + 3;
        auto a = values(m * lda, 11), bt = values(d * ldb, 12);
        std::vector<float> c(m * ldc, -1e30f), cm(m * ldc, -1e30f), rowmax(m);
        for (size_t i = 0; i < m; ++i)
          rowmax[i] = i % 3 == 0 ? 1e3f : (i % 3 == 1 ? -INFINITY : -1e3f);
        const std::vector<float> prior = rowmax;
        kernels::gemm_short_k(m, n, d, 0.6f, a.data(), lda, bt.data(), ldb, c.data(), ldc);
        kernels::gemm_short_k_max(m, n, d, 0.6f, a.data(), lda, bt.data(), ldb, cm.data(), ldc,
                                  rowmax.data());
        REQUIRE(cm == c);
        for (size_t i = 0; i < m; ++i) {
          float mx = prior[i];
          for (size_t j = 0; j < n; ++j) mx = std::max(mx, c[i * ldc + j]);
          REQUIRE(rowmax[i] == mx);
        }
      }
  }
}

TEST_CASE("gemm_short_k with a power-of-two alpha (folded into the rows): alpha times the chains") {
  // alpha 1, 1/2, 1/4 (the attention's scale at d_k 16), 1/8 go into the copied rows of A, and
  // 0.3 and 2 (not folded: not a power of two, over 1) scale each stored sum; either way each
  // element is alpha times its chain, bit for bit, with and without the row maxima. 13 rows:
  // two 6-row tiles (the folded rows) and a remainder read in place; d through the 2-vector tile
  // (4, 16), the 4-vector tile (64) and past the copied rows (300); 531 columns end in a tail.
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (size_t d : {4, 16, 64, 300})
      for (float alpha : {1.0f, 0.5f, 0.25f, 0.125f, 0.3f, 2.0f}) {
        const size_t m = 13, n = 531, lda = d + 1, ldb = n + 2, ldc = n + 3;
        CAPTURE(isa);
        CAPTURE(d);
        CAPTURE(alpha);
        auto a = values(m * lda, 21), bt = values(d * ldb, 22);
        std::vector<float> c(m * ldc, 0.0f), cm(m * ldc, 0.0f), rowmax(m, -INFINITY);
        kernels::gemm_short_k(m, n, d, alpha, a.data(), lda, bt.data(), ldb, c.data(), ldc);
        kernels::gemm_short_k_max(m, n, d, alpha, a.data(), lda, bt.data(), ldb, cm.data(), ldc,
                                  rowmax.data());
        REQUIRE(cm == c);
        for (size_t i = 0; i < m; ++i) {
          float mx = -INFINITY;
          for (size_t j = 0; j < n; ++j) {
            const float s = alpha * chain(isa, d, a.data() + i * lda, 1, bt.data() + j, ldb);
            REQUIRE(c[i * ldc + j] == s);
            mx = std::max(mx, s);
          }
          REQUIRE(rowmax[i] == mx);
        }
      }
  }
}

TEST_CASE("products at the wide and the row-remainder tiles: bit for bit the scalar chains") {
  // Sizes that reach the 6-row x 4-vector tiles (64 columns and more at AVX-512, a reduction of
  // 32 and more in gemm_short_k), the 12- and 8-row single-vector tiles (a narrow output over
  // 20 to 131 rows) and every remainder after them; odd leading dimensions.
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (size_t m : {6, 20, 29, 131})
      for (size_t n : {16, 24, 64, 67, 97, 130})
        for (size_t k : {16, 32, 45}) {
          CAPTURE(isa);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          const size_t ldx = k + 3, ldw = n + 5, ldc = n + 1;
          check_bias_and_short_k(isa, m, n, k, ldx, ldw, ldc, 31);
          // C (m x k) += alpha X (m x n) Y (n x k): the long n is the chain, k the output width
          const size_t ldy = k + 2, ldo = k + 1;
          auto xn = values(m * ldc, 34), y = values(n * ldy, 35), c0 = values(m * ldo, 36);
          auto rows = values(m, 37);
          auto cn = c0, cr = c0;
          kernels::gemm_acc_nd(m, n, k, -0.7f, xn.data(), ldc, y.data(), ldy, cn.data(), ldo);
          kernels::gemm_acc_nd_rows(m, n, k, rows.data(), xn.data(), ldc, y.data(), ldy, cr.data(),
                                    ldo);
          for (size_t i = 0; i < m; ++i)
            for (size_t e = 0; e < k; ++e) {
              const float s = chain(isa, n, xn.data() + i * ldc, 1, y.data() + e, ldy);
              REQUIRE(cn[i * ldo + e] == fused(isa, -0.7f, s, c0[i * ldo + e]));
              REQUIRE(cr[i * ldo + e] == fused(isa, rows[i], s, c0[i * ldo + e]));
            }
          // C (n x k) += alpha X^T Y, X (m x n), Y (m x k): the chain runs over the m rows
          check_acc_tnd(isa, m, n, k, xn.data(), ldc, ldy, ldo, 38);
        }
  }
}

TEST_CASE(
    "products in packed column panels (a long reduction, a wide output): bit for bit the scalar "
    "chains") {
  // A reduction of 1,100 over 331 columns (1.4 MB of Y) is copied in panels of 64 columns
  // (512 KiB / (1,100 x 4 bytes), whole 4-vector tiles) that every row tile passes over in
  // turn; the last panel is narrow, with a tail. A leading dimension of 2,048 (8 KiB, the
  // stride that packing is for) and one that is not a power of two. Each column keeps its
  // chain, so the values are the scalar chains'.
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available())
    for (size_t ldw : {size_t{334}, size_t{2048}}) {
      kernels::set_simd(isa);
      CAPTURE(isa);
      CAPTURE(ldw);
      check_bias_and_short_k(isa, 13, 331, 1100, 1101, ldw, 333, 41);
    }
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    CAPTURE(isa);
    // C (n2 x e) += alpha X^T Y with the chain over 64 rows (a weight gradient's row block) and
    // Y 64 x 2,048 (512 KiB): packed, in panels of 2,048 columns
    auto xt = values(64 * 13, 44);
    check_acc_tnd(isa, 64, 13, 2048, xt.data(), 13, 2048, 2048, 45);
  }
}

TEST_CASE("gemm_bias: against double loops; a column's value does not depend on its position") {
  KernelSettings keep;
  // part widths that straddle vector boundaries and leave scalar tails at every width
  const std::vector<size_t> widths{5, 16, 11, 3};
  size_t N = 0;
  for (size_t w : widths) N += w;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (size_t m : {1, 5, 8, 9, 10})
      for (size_t k : {1, 16, 64}) {
        CAPTURE(isa);
        CAPTURE(m);
        CAPTURE(k);
        const size_t ldx = k + 1;
        auto x = values(m * ldx, 11), w = values(k * N, 12), bias = values(N, 13);
        std::vector<float> c(m * (N + 2), -7.0f);
        kernels::gemm_bias(m, N, k, x.data(), ldx, w.data(), N, bias.data(), c.data(), N + 2);
        for (size_t i = 0; i < m; ++i) {
          for (size_t j = 0; j < N; ++j) {
            double s = bias[j];
            for (size_t p = 0; p < k; ++p) s += static_cast<double>(x[i * ldx + p]) * w[p * N + j];
            REQUIRE(c[i * (N + 2) + j] == doctest::Approx(s).epsilon(1e-5).scale(1.0));
          }
          REQUIRE(c[i * (N + 2) + N] == -7.0f);  // nothing past n
        }
        // each part on its own, and without a bias: the same bits
        size_t o = 0;
        for (size_t wi : widths) {
          std::vector<float> wp(k * wi), cp(m * wi), cz(m * wi);
          for (size_t p = 0; p < k; ++p)
            for (size_t j = 0; j < wi; ++j) wp[p * wi + j] = w[p * N + o + j];
          kernels::gemm_bias(m, wi, k, x.data(), ldx, wp.data(), wi, bias.data() + o, cp.data(),
                             wi);
          kernels::gemm_bias(m, wi, k, x.data(), ldx, wp.data(), wi, nullptr, cz.data(), wi);
          for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < wi; ++j) {
              REQUIRE(cp[i * wi + j] == c[i * (N + 2) + o + j]);
              REQUIRE(cp[i * wi + j] == cz[i * wi + j] + bias[o + j]);
            }
          o += wi;
        }
      }
  }
}

TEST_CASE("gemm_bias_parts: each part equals gemm_bias's columns bit for bit") {
  KernelSettings keep;
  // straddling widths with scalar tails; head-sized parts; 70 parts of 16 (1,120 columns:
  // more than one table chunk at every width); narrow heads' parts, several in one vector
  // (48 of width 4, 24 of 8), and widths 1, 2 and 3 mixed with wider ones
  const std::vector<std::vector<size_t>> layouts{{5, 16, 11, 3},
                                                 {16, 16, 16},
                                                 {8, 24, 32},
                                                 std::vector<size_t>(70, 16),
                                                 std::vector<size_t>(48, 4),
                                                 std::vector<size_t>(24, 8),
                                                 {1, 2, 3, 1, 9, 1, 1, 2, 17, 4, 3}};
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (const auto& widths : layouts)
      for (size_t m : {1, 7, 13})
        for (bool with_bias : {true, false}) {
          CAPTURE(isa);
          CAPTURE(widths.size());
          CAPTURE(m);
          CAPTURE(with_bias);
          const size_t k = 24, ldx = k + 3;
          std::vector<size_t> off{0};
          for (size_t w : widths) off.push_back(off.back() + w);
          const size_t N = off.back();
          auto x = values(m * ldx, 21), w = values(k * N, 22), bias = values(N, 23);
          const float* bp = with_bias ? bias.data() : nullptr;
          std::vector<float> c(m * N);
          kernels::gemm_bias(m, N, k, x.data(), ldx, w.data(), N, bp, c.data(), N);
          // each part with a guard after it
          std::vector<std::vector<float>> parts;
          std::vector<float*> dst;
          for (size_t wi : widths) parts.emplace_back(m * wi + 1, -9.0f);
          for (auto& p : parts) dst.push_back(p.data());
          kernels::gemm_bias_parts(m, N, k, x.data(), ldx, w.data(), N, bp, off.data(),
                                   widths.size(), dst.data());
          for (size_t p = 0; p < widths.size(); ++p) {
            const size_t wi = widths[p];
            for (size_t i = 0; i < m; ++i)
              for (size_t j = 0; j < wi; ++j)
                REQUIRE(parts[p][i * wi + j] == c[i * N + off[p] + j]);
            REQUIRE(parts[p][m * wi] == -9.0f);
          }
        }
  }
}

TEST_CASE("transpose: every element moved, row counts around the 8-row blocks") {
  for (size_t rows : {1, 7, 8, 9, 17, 512})
    for (size_t cols : {1, 3, 16}) {
      CAPTURE(rows);
      CAPTURE(cols);
      std::vector<float> x(rows * cols), xt(rows * cols, -1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
      kernels::transpose(x.data(), rows, cols, xt.data());
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) REQUIRE(xt[c * rows + r] == x[r * cols + c]);
    }
}

TEST_CASE("transpose_tiled: a block of a wider matrix into a wider one, sizes around the tiles") {
  for (size_t rows : {1, 15, 16, 17, 40})
    for (size_t cols : {1, 16, 33}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const size_t ldx = cols + 5, ldxt = rows + 3;  // strides past the block: untouched
      std::vector<float> x(rows * ldx), xt(cols * ldxt, -1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
      kernels::transpose_tiled(x.data(), rows, cols, ldx, xt.data(), ldxt);
      for (size_t c = 0; c < cols; ++c)
        for (size_t r = 0; r < ldxt; ++r)
          REQUIRE(xt[c * ldxt + r] == (r < rows ? x[r * ldx + c] : -1.0f));
    }
}

TEST_CASE("convolution row kernels: every instruction set against double loops") {
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    REQUIRE(kernels::set_simd(isa));
    for (size_t c : {1, 7, 16, 33, 64, 70, 130})
      for (size_t rows : {0, 1, 5}) {
        CAPTURE(isa);
        CAPTURE(c);
        CAPTURE(rows);
        const size_t ldx = 2 * c + 1, ldy = c + 3;  // rows further apart than c
        auto x = values(rows * ldx + c, c + 1), w = values(c, c + 2),
             y0 = values(rows * ldy + c, c + 3);
        auto acc0 = values(c, c + 4);
        auto y = y0;
        kernels::mul_add_rows(y.data(), ldy, x.data(), ldx, w.data(), rows, c);
        auto acc = acc0;
        kernels::dot_rows(acc.data(), y0.data(), ldy, x.data(), ldx, rows, c);
        for (size_t j = 0; j < c; ++j) {
          double a = acc0[j];
          for (size_t r = 0; r < rows; ++r) {
            CHECK(y[r * ldy + j] ==
                  doctest::Approx(y0[r * ldy + j] + static_cast<double>(w[j]) * x[r * ldx + j])
                      .epsilon(1e-5)
                      .scale(1.0));
            a += static_cast<double>(y0[r * ldy + j]) * x[r * ldx + j];
          }
          CHECK(acc[j] == doctest::Approx(a).epsilon(1e-5).scale(1.0));
        }
        // nothing between the rows is touched
        for (size_t r = 0; r + 1 < rows; ++r)
          for (size_t j = c; j < ldy; ++j) CHECK(y[r * ldy + j] == y0[r * ldy + j]);
      }
  }
}

namespace {

// Independent double-loop attention (masked keys: padding, causal) and its gradients for the
// loss sum(G * y); the kernels' results are checked against it.
struct AttnRef {
  std::vector<double> y, gq, gk, gv;
};

AttnRef attention_double_loops(const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v, const std::vector<float>& g,
                               const std::vector<uint8_t>& valid, size_t B, size_t T, size_t dk,
                               size_t dv, double scale, bool causal) {
  AttnRef r;
  r.y.assign(B * T * dv, 0.0);
  r.gq.assign(B * T * dk, 0.0);
  r.gk.assign(B * T * dk, 0.0);
  r.gv.assign(B * T * dv, 0.0);
  std::vector<double> p(T), dp(T);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T; ++i) {
      const size_t qi = b * T + i;
      double mx = -INFINITY;
      for (size_t j = 0; j < T; ++j) {
        const bool ok = valid[b * T + j] && !(causal && j > i);
        double s = 0;
        for (size_t c = 0; c < dk; ++c) s += double(q[qi * dk + c]) * k[(b * T + j) * dk + c];
        p[j] = ok ? s * scale : -INFINITY;
        mx = std::max(mx, p[j]);
      }
      if (mx == -INFINITY) continue;  // no valid key: y and the gradients are 0
      double sum = 0;
      for (size_t j = 0; j < T; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (size_t j = 0; j < T; ++j) p[j] /= sum;
      double pdp = 0;
      for (size_t j = 0; j < T; ++j) {
        dp[j] = 0;
        for (size_t c = 0; c < dv; ++c) {
          r.y[qi * dv + c] += p[j] * v[(b * T + j) * dv + c];
          r.gv[(b * T + j) * dv + c] += p[j] * g[qi * dv + c];
          dp[j] += double(g[qi * dv + c]) * v[(b * T + j) * dv + c];
        }
        pdp += p[j] * dp[j];
      }
      for (size_t j = 0; j < T; ++j) {
        const double ds = p[j] * (dp[j] - pdp) * scale;
        for (size_t c = 0; c < dk; ++c) {
          r.gq[qi * dk + c] += ds * k[(b * T + j) * dk + c];
          r.gk[(b * T + j) * dk + c] += ds * q[qi * dk + c];
        }
      }
    }
  return r;
}

}  // namespace

TEST_CASE("streaming attention: every head width 1..128 against double loops, every set") {
  KernelSettings keep;
  const size_t B = 2, T = 37;
  std::vector<uint8_t> valid(B * T, 1);
  for (size_t t = 29; t < T; ++t) valid[T + t] = 0;  // sample 1 has 29 tokens
  valid[5] = 0;                                      // sample 0: a padded key inside
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (size_t w : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 64, 128})
      for (size_t rows : {16, 128})
        for (bool causal : {false, true}) {
          CAPTURE(isa);
          CAPTURE(w);
          CAPTURE(rows);
          CAPTURE(causal);
          kernels::set_attention_block_rows(rows);
          const size_t dk = w, dv = w;
          const float scale = 1.0f / std::sqrt(float(dk));
          Var q = parameter(randn({B, T, dk}, 11 + w)), k = parameter(randn({B, T, dk}, 12 + w)),
              v = parameter(randn({B, T, dv}, 13 + w));
          Var y = ops::attention(q, k, v, scale, {&valid, causal});
          backward(weighted_sum(y, 99));
          const std::vector<float> g = randn({B, T, dv}, 99).to_vector();
          AttnRef ref =
              attention_double_loops(q.value().to_vector(), k.value().to_vector(),
                                     v.value().to_vector(), g, valid, B, T, dk, dv, scale, causal);
          auto near = [](float got, double want) {
            return std::fabs(got - want) <= 2e-5 * (1.0 + std::fabs(want)) * 10;
          };
          for (size_t i = 0; i < ref.y.size(); ++i) REQUIRE(near(y.value()[i], ref.y[i]));
          for (size_t i = 0; i < ref.gv.size(); ++i) REQUIRE(near(v.grad()[i], ref.gv[i]));
          for (size_t i = 0; i < ref.gq.size(); ++i) REQUIRE(near(q.grad()[i], ref.gq[i]));
          for (size_t i = 0; i < ref.gk.size(); ++i) REQUIRE(near(k.grad()[i], ref.gk[i]));
        }
  }
}

TEST_CASE("short-dimension products at narrow widths: each column's bits as a product of its own") {
  // A narrow output (fewer columns than a register) runs in padded lanes or turned on its side;
  // either way every element is computed as when its column is computed alone, so a head's
  // results do not depend on its neighbours. C = X Y with d <= W / 2 columns sums the long n
  // in the lanes (its own order, checked against a column alone and, in the double-loop test,
  // against the exact value); wider outputs keep the single chain (checked against it here).
  KernelSettings keep;
  auto lanes = [](const std::string& isa) { return isa == "avx512" ? 16 : isa == "avx2" ? 8 : 4; };
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (size_t d : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 24, 33})
      for (size_t m : {5, 13, 40})
        for (size_t n : {3, 17, 64}) {
          CAPTURE(isa);
          CAPTURE(d);
          CAPTURE(m);
          CAPTURE(n);
          auto x = values(m * n, 21), y = values(n * d, 22), y2 = values(m * d, 23);
          auto cnd = values(m * d, 24), ctd = values(n * d, 25), rows = values(m, 26);
          auto cnr = cnd;
          auto cnd1 = cnd, ctd1 = ctd, cnr1 = cnr;
          kernels::gemm_acc_nd(m, n, d, 0.9f, x.data(), n, y.data(), d, cnd.data(), d);
          kernels::gemm_acc_nd_rows(m, n, d, rows.data(), x.data(), n, y.data(), d, cnr.data(), d);
          kernels::gemm_acc_tnd(m, n, d, -0.6f, x.data(), n, y2.data(), d, ctd.data(), d);
          for (size_t c = 0; c < d; ++c) {
            kernels::gemm_acc_nd(m, n, 1, 0.9f, x.data(), n, y.data() + c, d, cnd1.data() + c, d);
            kernels::gemm_acc_nd_rows(m, n, 1, rows.data(), x.data(), n, y.data() + c, d,
                                      cnr1.data() + c, d);
            kernels::gemm_acc_tnd(m, n, 1, -0.6f, x.data(), n, y2.data() + c, d, ctd1.data() + c,
                                  d);
          }
          if (d <= size_t(lanes(isa)) / 2) {
            for (size_t i = 0; i < cnd.size(); ++i) REQUIRE(cnd[i] == cnd1[i]);
            for (size_t i = 0; i < cnr.size(); ++i) REQUIRE(cnr[i] == cnr1[i]);
          } else {
            const auto c0 = values(m * d, 24);
            for (size_t i = 0; i < m; ++i)
              for (size_t c = 0; c < d; ++c) {
                const float s = chain(isa, n, x.data() + i * n, 1, y.data() + c, d);
                REQUIRE(cnd[i * d + c] == fused(isa, 0.9f, s, c0[i * d + c]));
                REQUIRE(cnr[i * d + c] == fused(isa, rows[i], s, c0[i * d + c]));
              }
          }
          for (size_t i = 0; i < ctd.size(); ++i) REQUIRE(ctd[i] == ctd1[i]);
        }
  }
}

TEST_CASE("GROWFORMER_ISA: a cap, capped to the CPU with a note, a bad value named") {
  const std::string best = kernels::simd_available().back();
  std::string note;
  CHECK(kernels::resolve_isa("GROWFORMER_ISA", nullptr, &note) == best);
  CHECK(kernels::resolve_isa("GROWFORMER_ISA", "", &note) == best);
  CHECK(kernels::resolve_isa("GROWFORMER_ISA", "sse2", &note) == "sse2");
  CHECK(note.find("GROWFORMER_ISA=sse2") != std::string::npos);
  CHECK(kernels::resolve_isa("GROWFORMER_ISA", "SSE2", &note) == "sse2");
  // avx512 where the CPU has it, else capped to the widest it has, saying so
  CHECK(kernels::resolve_isa("GROWFORMER_ISA", "avx512", &note) == best);
  if (best != "avx512") CHECK(note.find("capped") != std::string::npos);
  try {
    kernels::resolve_isa("GROWFORMER_ISA", "avx9", &note);
    FAIL("a bad value was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("GROWFORMER_ISA=avx9") != std::string::npos);
  }
  // the peak loop runs on the set in use and gives a positive rate
  CHECK(kernels::fma_peak_gflops(1, 0.01) > 0.0);
}

TEST_CASE(
    "pack_panels: a weight packed once, read by row blocks, equals the products that pack "
    "their own, bit for bit") {
  // Sizes over the 256 KiB the kernels pack from: 600 x 331 (the last panel narrower, scalar
  // tail columns), 300 x 1,100 (several panels), and a long d of gemm_short_k (300 > 256);
  // the rows in blocks as a split product calls them (64, and a last block of 35).
  KernelSettings keep;
  for (const std::string& isa : kernels::simd_available()) {
    kernels::set_simd(isa);
    for (const auto& ln : {std::pair<size_t, size_t>{600, 331}, {300, 1100}}) {
      // named, not bound: doctest's CAPTURE is a lambda (clang 14)
      const size_t len = ln.first, n = ln.second;
      CAPTURE(isa);
      CAPTURE(len);
      CAPTURE(n);
      const size_t m = 163, ldy = n + 3, ldx = len + 1;
      auto x = values(m * ldx, 41), y = values(len * ldy, 42), bias = values(n, 43);
      const kernels::Panels p = kernels::pack_panels(m, len, n, y.data(), ldy);
      REQUIRE(!p.empty());  // else nothing below reads panels
      REQUIRE(p.nb < n);    // more than one panel
      REQUIRE(kernels::pack_panels(m, 16, 16, y.data(), ldy).empty());  // small: read in place
      REQUIRE(kernels::pack_panels(m, 200, n, y.data(), ldy, true).empty());  // short d
      // the packed copy is independent of Y afterwards
      auto y2 = y;
      const kernels::Panels p2 = kernels::pack_panels(m, len, n, y2.data(), ldy, true);
      REQUIRE(!p2.empty());
      std::fill(y2.begin(), y2.end(), 1e9f);
      std::vector<float> ref(m * n), got(m * n, -1.0f), sref(m * n), sgot(m * n, -1.0f);
      kernels::gemm_bias(m, n, len, x.data(), ldx, y.data(), ldy, bias.data(), ref.data(), n);
      kernels::gemm_short_k(m, n, len, 0.3f, x.data(), ldx, y.data(), ldy, sref.data(), n);
      auto aref = values(m * n, 44), agot = aref;
      // gemm_acc_nd: C (m x n) += X (m x len) Y (len x n), Y as packed
      kernels::gemm_acc_nd(m, len, n, -0.7f, x.data(), ldx, y.data(), ldy, aref.data(), n);
      for (size_t r0 = 0; r0 < m; r0 += 64) {
        const size_t rows = std::min<size_t>(64, m - r0);
        kernels::gemm_bias(rows, n, len, x.data() + r0 * ldx, ldx, y.data(), ldy, bias.data(),
                           got.data() + r0 * n, n, &p);
        kernels::gemm_short_k(rows, n, len, 0.3f, x.data() + r0 * ldx, ldx, y2.data(), ldy,
                              sgot.data() + r0 * n, n, &p2);
        kernels::gemm_acc_nd(rows, len, n, -0.7f, x.data() + r0 * ldx, ldx, y.data(), ldy,
                             agot.data() + r0 * n, n, &p);
      }
      for (size_t i = 0; i < m * n; ++i) {
        REQUIRE(got[i] == ref[i]);
        REQUIRE(sgot[i] == sref[i]);
        REQUIRE(agot[i] == aref[i]);
      }
      // gemm_bias_parts (column chunks of the kernel's table beside the panels)
      const std::vector<size_t> off{0, 100, 101, 250, n};
      std::vector<std::vector<float>> parts;
      std::vector<float*> dst;
      for (size_t i = 0; i + 1 < off.size(); ++i) parts.emplace_back(m * (off[i + 1] - off[i]));
      for (auto& q : parts) dst.push_back(q.data());
      kernels::gemm_bias_parts(m, n, len, x.data(), ldx, y.data(), ldy, bias.data(), off.data(),
                               parts.size(), dst.data(), &p);
      for (size_t q = 0; q + 1 < off.size(); ++q) {
        const size_t wq = off[q + 1] - off[q];
        for (size_t i = 0; i < m; ++i)
          for (size_t j = 0; j < wq; ++j) REQUIRE(parts[q][i * wq + j] == ref[i * n + off[q] + j]);
      }
    }
  }
}
