// Every differentiable op against central finite differences, forward values
// against hand computations, and the BLAS path against a naive product.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "growformer/blas.hpp"
#include "growformer/kernels.hpp"
#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"
#include "growformer/rng.hpp"
#include "testing.hpp"

using namespace gf;
using gf_test::check_gradients;
using gf_test::randn;
using gf_test::weighted_sum;

TEST_CASE("linear: forward by hand and gradients") {
  Var x = constant(Tensor::from({1, 2}, {1, 2}));
  Var w = constant(Tensor::from({2, 3}, {1, 0, -1, 2, 1, 0.5f}));
  Var b = constant(Tensor::from({3}, {0.5f, 0, 0}));
  Var y = ops::linear(x, w, &b);
  CHECK(y.value()[0] == doctest::Approx(5.5));
  CHECK(y.value()[1] == doctest::Approx(2));
  CHECK(y.value()[2] == doctest::Approx(0));
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::linear(v[0], v[1], &v[2])); },
      {randn({3, 5, 4}, 1), randn({4, 6}, 2), randn({6}, 3)});
}

// M rows (300: one 512-row span of the weight gradient and 64-row forward blocks with a
// remainder; 1,100: two spans and a short one), IN -> OUT: output and every gradient bit-identical
// with 1 and 2 threads, and equal to double loops
void check_linear_split(size_t in, size_t out, size_t m = 300) {
  CAPTURE(in);
  CAPTURE(m);
  Tensor x = randn({m, in}, 4), w = randn({in, out}, 5), b = randn({out}, 6);
  struct Result {
    Tensor y, gx, gw, gb;
  };
  auto run = [&](size_t threads) {
    set_num_threads(threads);
    Var xv = parameter(x.clone()), wv = parameter(w.clone()), bv = parameter(b.clone());
    Var y = ops::linear(xv, wv, &bv);
    backward(weighted_sum(y, 7));
    return Result{y.value().clone(), xv.grad().clone(), wv.grad().clone(), bv.grad().clone()};
  };
  const Result r1 = run(1), r2 = run(2);
  set_num_threads(0);
  for (auto [a, c] :
       {std::pair{&r1.y, &r2.y}, {&r1.gx, &r2.gx}, {&r1.gw, &r2.gw}, {&r1.gb, &r2.gb}})
    for (size_t i = 0; i < a->size(); ++i) REQUIRE((*a)[i] == (*c)[i]);
  // double loops: y = x w + b; with upstream gradient G: dx = G w^T, dw = x^T G, db = sum G
  // a float sum over LEN terms strays from the double one in proportion to LEN (the 1e-5 / 1e-4
  // below were set at 300 terms; 1,030 of them strayed by 7e-5 in 5 at 1e-5)
  auto tol = [](double base, size_t len) { return base * std::max(1.0, double(len) / 300.0); };
  Var probe = parameter(Tensor(Shape{m, out}, 0.0f));
  backward(weighted_sum(probe, 7));
  const Tensor& G = probe.grad();
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < out; ++j) {
      double s = b[j];
      for (size_t k = 0; k < in; ++k) s += double(x[i * in + k]) * w[k * out + j];
      REQUIRE(r1.y[i * out + j] == doctest::Approx(s).epsilon(tol(1e-5, in)).scale(4));
    }
  for (size_t i = 0; i < m; ++i)
    for (size_t k = 0; k < in; ++k) {
      double s = 0;
      for (size_t j = 0; j < out; ++j) s += double(G[i * out + j]) * w[k * out + j];
      REQUIRE(r1.gx[i * in + k] == doctest::Approx(s).epsilon(tol(1e-5, out)).scale(4));
    }
  for (size_t k = 0; k < in; ++k)
    for (size_t j = 0; j < out; ++j) {
      double s = 0;
      for (size_t i = 0; i < m; ++i) s += double(x[i * in + k]) * G[i * out + j];
      REQUIRE(r1.gw[k * out + j] == doctest::Approx(s).epsilon(tol(1e-4, m)).scale(4));
    }
  for (size_t j = 0; j < out; ++j) {
    double s = 0;
    for (size_t i = 0; i < m; ++i) s += G[i * out + j];
    REQUIRE(r1.gb[j] == doctest::Approx(s).epsilon(tol(1e-4, m)).scale(4));
  }
}

TEST_CASE("linear splits large products over threads with identical results") {
  // rows split over threads forward and in the input gradient, columns in the weight gradient
  check_linear_split(70, 96);
  // a 387 KiB weight, over the size the kernels copy into column panels
  check_linear_split(300, 330);
  // rows over two of the weight gradient's 512-row spans and a short third
  check_linear_split(70, 96, 1100);
  // long rows (over 1,024 floats) in 512-row spans with the weight packed once, forward (X) and
  // in the input gradient (G); the weight gradient from each span's X^T
  check_linear_split(1030, 40, 1100);
  check_linear_split(40, 1030, 1100);
  // 20 columns: with 2 threads a chunk of 4, which reads X as before
  check_linear_split(1030, 20, 600);
}

// 3 parts of N columns from IN inputs; outputs and gradients bit-identical with 1 and 2 threads
// and with one ops::linear per part
void check_linear_parts(size_t m, size_t in, size_t n) {
  CAPTURE(in);
  Tensor x = randn({m, in}, 11);
  std::vector<Tensor> w, b;
  for (int i = 0; i < 3; ++i) {
    w.push_back(randn({in, n}, 12 + i));
    b.push_back(randn({n}, 20 + i));
  }
  auto run = [&](size_t threads, bool joined) {
    set_num_threads(threads);
    Var xv = parameter(x.clone());
    std::vector<Var> wv, bv;
    for (int i = 0; i < 3; ++i) {
      wv.push_back(parameter(w[i].clone()));
      bv.push_back(parameter(b[i].clone()));
    }
    std::vector<Var> ys;
    if (joined)
      ys = ops::linear_parts(xv, wv, bv);
    else
      for (int i = 0; i < 3; ++i) ys.push_back(ops::linear(xv, wv[i], &bv[i]));
    std::vector<Tensor> out;
    Var total = weighted_sum(ys[0], 31);
    for (int i = 1; i < 3; ++i) total = ops::add(total, weighted_sum(ys[i], 31 + i));
    backward(total);
    for (int i = 0; i < 3; ++i) out.push_back(ys[i].value().clone());
    out.push_back(xv.grad().clone());
    for (int i = 0; i < 3; ++i) out.push_back(wv[i].grad().clone());
    for (int i = 0; i < 3; ++i) out.push_back(bv[i].grad().clone());
    return out;
  };
  const auto a = run(1, true), c = run(2, true), d = run(1, false);
  set_num_threads(0);
  for (size_t t = 0; t < a.size(); ++t) {
    CAPTURE(t);
    for (size_t i = 0; i < a[t].size(); ++i) {
      REQUIRE(a[t][i] == c[t][i]);
      if (t != 3) REQUIRE(a[t][i] == d[t][i]);  // dX: one sum over the parts, not three added
    }
  }
}

TEST_CASE("linear_parts at a wide weight: the same bits with 1 and 2 threads, equal to linear's") {
  // a 457 KiB joined weight, over the size the kernels copy into column panels
  check_linear_parts(200, 300, 130);
  // rows of 1,030 inputs: the forward product in 512-row spans, the weight gradients from X^T
  check_linear_parts(600, 1030, 24);
}

TEST_CASE("thread pool: every index once, after any number of resizes") {
  // A resized pool's new workers used to start at generation 0 and could count one finished
  // job twice: the next parallel_for then waited forever (ctest's timeout reports it).
  for (int round = 0; round < 3000; ++round) {
    set_num_threads(1 + round % 2);
    // sweep the moment the new worker starts against the first job
    std::this_thread::sleep_for(std::chrono::microseconds(round % 64));
    const size_t n = 2 + round % 7;
    std::vector<std::atomic<int>> hits(n);
    for (auto& h : hits) h = 0;
    parallel_for(n, [&](size_t i) { hits[i]++; });
    parallel_for(n, [&](size_t i) { hits[i]++; });
    for (auto& h : hits) REQUIRE(h.load() == 2);
  }
  set_num_threads(0);
}

TEST_CASE("matmul with transposes and batches") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Shape sa = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
      Shape sb = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
      check_gradients(
          [ta, tb](const std::vector<Var>& v) {
            return weighted_sum(ops::matmul(v[0], v[1], ta, tb));
          },
          {randn(sa, 10 + ta), randn(sb, 20 + tb)});
    }
  // a shared 2-D right operand
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::matmul(v[0], v[1])); },
                  {randn({3, 2, 4}, 7), randn({4, 3}, 8)});
}

TEST_CASE("elementwise ops") {
  auto one = [](Var (*f)(const Var&)) {
    check_gradients([f](const std::vector<Var>& v) { return weighted_sum(f(v[0])); },
                    {randn({4, 5}, 11)});
  };
  one(ops::gelu);
  one(ops::sigmoid);
  one(ops::tanh);
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::scale(v[0], -1.7f)); },
                  {randn({6}, 1)});
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::add(v[0], v[1])); },
                  {randn({3, 4}, 1), randn({3, 4}, 2)});
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::add(v[0], v[1])); },
                  {randn({3, 4}, 1), randn({4}, 2)});  // broadcast bias
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::sub(v[0], v[1])); },
                  {randn({3, 4}, 1), randn({3, 4}, 2)});
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::mul(v[0], v[1])); },
                  {randn({3, 4}, 1), randn({3, 4}, 2)});
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::mul(v[0], v[1])); },
                  {randn({3, 4}, 1), randn({1}, 2)});  // scalar factor
  // GELU(1) = 0.5 (1 + erf(1/sqrt 2)) = 0.841345
  CHECK(ops::gelu(constant(Tensor::scalar(1.0f))).value()[0] ==
        doctest::Approx(0.841345).epsilon(1e-5));
  // relu's kink: check away from zero
  Tensor r = randn({10}, 3);
  for (size_t i = 0; i < r.size(); ++i) r[i] += r[i] > 0 ? 0.2f : -0.2f;
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::relu(v[0])); }, {r});
}

TEST_CASE("softmax: values and gradient") {
  Var y = ops::softmax(constant(Tensor::from({1, 3}, {1, 2, 3})));
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(y.value()[0] == doctest::Approx(std::exp(1.0) / z).epsilon(1e-6));
  CHECK(y.value()[2] == doctest::Approx(std::exp(3.0) / z).epsilon(1e-6));
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::softmax(v[0])); },
                  {randn({3, 7}, 4)});
  // the fast exp stays within float precision over the range softmax uses
  for (float x = -80.0f; x <= 80.0f; x += 0.37f) {
    double rel = std::fabs(kernels::fast_exp(x) - std::exp(static_cast<double>(x))) /
                 std::exp(static_cast<double>(x));
    REQUIRE(rel < 2e-6);
  }
}

TEST_CASE("reductions, layer norm, cross-entropy") {
  check_gradients([](const std::vector<Var>& v) { return ops::sum(v[0]); }, {randn({5}, 1)});
  check_gradients([](const std::vector<Var>& v) { return ops::mean(ops::mul(v[0], v[0])); },
                  {randn({5}, 1)});
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::layer_norm(v[0], v[1], v[2])); },
      {randn({2, 3, 8}, 1), randn({8}, 2), randn({8}, 3)});
  // layer norm output has zero mean and unit variance before the affine part
  Var ln = ops::layer_norm(constant(randn({1, 16}, 5, 3.0f)), constant(Tensor({16}, 1.0f)),
                           constant(Tensor({16}, 0.0f)));
  double m = 0, s = 0;
  for (size_t i = 0; i < 16; ++i) m += ln.value()[i];
  for (size_t i = 0; i < 16; ++i) s += ln.value()[i] * ln.value()[i];
  CHECK(m / 16 == doctest::Approx(0).epsilon(1e-5));
  CHECK(s / 16 == doctest::Approx(1).epsilon(1e-3));
  std::vector<int32_t> labels{2, 0, 1};
  check_gradients([&](const std::vector<Var>& v) { return ops::cross_entropy(v[0], labels); },
                  {randn({3, 4}, 6)});
  // cross-entropy of uniform logits is log(C)
  Var ce = ops::cross_entropy(constant(Tensor({2, 5}, 0.0f)), {1, 3});
  CHECK(ce.value()[0] == doctest::Approx(std::log(5.0)).epsilon(1e-6));
}

TEST_CASE("embedding, positions, prepend, pooling, select") {
  std::vector<int32_t> ids{0, 2, 2, 1, 3, 0};
  check_gradients(
      [&](const std::vector<Var>& v) { return weighted_sum(ops::embedding(ids, 2, 3, v[0])); },
      {randn({4, 5}, 1)});
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::add_positions(v[0], v[1])); },
      {randn({2, 3, 4}, 1), randn({6, 4}, 2)});
  check_gradients([](const std::vector<Var>& v) { return weighted_sum(ops::prepend(v[0], v[1])); },
                  {randn({2, 3, 4}, 1), randn({4}, 2)});
  std::vector<uint8_t> mask{1, 1, 0, 1, 0, 0};
  check_gradients(
      [&](const std::vector<Var>& v) { return weighted_sum(ops::masked_mean_pool(v[0], mask)); },
      {randn({2, 3, 4}, 3)});
  // pooling ignores padded positions: (x0 + x1) / 2 for the first sequence
  Tensor x = randn({2, 3, 4}, 3);
  Var p = ops::masked_mean_pool(constant(x), mask);
  CHECK(p.value()[0] == doctest::Approx((x[0] + x[4]) / 2));
  CHECK(p.value()[4] == doctest::Approx(x[12]));
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::select_position(v[0], 1)); },
      {randn({2, 3, 4}, 4)});
}

TEST_CASE("lerp: the composition of add, mul and sub, and finite differences") {
  Tensor a = randn({3, 5}, 1), b = randn({3, 5}, 2), t = randn({1}, 3);
  Var y = ops::lerp(constant(a), constant(b), constant(t));
  Var r = ops::add(constant(a), ops::mul(ops::sub(constant(b), constant(a)), constant(t)));
  for (size_t i = 0; i < y.size(); ++i) CHECK(y.value()[i] == r.value()[i]);
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::lerp(v[0], v[1], v[2])); },
      {a, b, t});
  // the scalar's gradient over several fixed blocks (100,003 elements): a double loop, and
  // the same bits with 1 and 2 threads (for mul by a scalar too)
  {
    const size_t keep = gf::num_threads(), n = 100003;
    Tensor xa = randn({n}, 6), xb = randn({n}, 7), gw = randn({n}, 8);
    double ref_lerp = 0, ref_mul = 0;
    for (size_t i = 0; i < n; ++i) {
      ref_lerp += static_cast<double>(gw[i]) * (xb[i] - xa[i]);
      ref_mul += static_cast<double>(gw[i]) * xa[i];
    }
    std::vector<float> got;
    for (size_t threads : {1, 2}) {
      gf::set_num_threads(threads);
      Var tl = parameter(Tensor::scalar(0.3f)), tm = parameter(Tensor::scalar(0.3f));
      Var w = constant(gw);
      backward(ops::sum(ops::mul(ops::lerp(constant(xa), constant(xb), tl), w)));
      backward(ops::sum(ops::mul(ops::mul(constant(xa), tm), w)));
      CHECK(tl.grad()[0] == doctest::Approx(ref_lerp).epsilon(1e-6));
      CHECK(tm.grad()[0] == doctest::Approx(ref_mul).epsilon(1e-6));
      got.push_back(tl.grad()[0]);
      got.push_back(tm.grad()[0]);
    }
    gf::set_num_threads(keep);
    CHECK(got[0] == got[2]);
    CHECK(got[1] == got[3]);
  }
  CHECK_THROWS(ops::lerp(constant(a), constant(randn({3, 4}, 4)), constant(t)));
  CHECK_THROWS(ops::lerp(constant(a), constant(b), constant(randn({2}, 5))));
}

TEST_CASE("depthwise causal convolution with stride") {
  for (size_t stride : {1, 2, 3}) {
    check_gradients(
        [stride](const std::vector<Var>& v) {
          return weighted_sum(ops::depthwise_conv1d_causal(v[0], v[1], &v[2], stride));
        },
        {randn({2, 7, 3}, 1), randn({3, 3}, 2), randn({3}, 3)});
  }
  // more channels than one thread's chunk of 8 (19: a short last chunk), a longer kernel
  for (size_t stride : {1, 2})
    check_gradients(
        [stride](const std::vector<Var>& v) {
          return weighted_sum(ops::depthwise_conv1d_causal(v[0], v[1], &v[2], stride));
        },
        {randn({2, 9, 19}, 4), randn({19, 4}, 5), randn({19}, 6)});
  // the same bits with 1 and 2 threads, and gradients that accumulate onto earlier ones
  {
    const size_t keep = gf::num_threads();
    std::vector<std::vector<float>> runs;
    for (size_t threads : {1, 2}) {
      gf::set_num_threads(threads);
      std::vector<Var> v{parameter(randn({3, 11, 19}, 7)), parameter(randn({19, 4}, 8)),
                         parameter(randn({19}, 9))};
      for (int rep = 0; rep < 2; ++rep)
        backward(weighted_sum(ops::depthwise_conv1d_causal(v[0], v[1], &v[2], 1)));
      std::vector<float> all =
          ops::depthwise_conv1d_causal(v[0], v[1], &v[2], 2).value().to_vector();
      for (auto& t : v)
        for (float g : t.grad().to_vector()) all.push_back(g);
      runs.push_back(all);
    }
    gf::set_num_threads(keep);
    REQUIRE(runs[0].size() == runs[1].size());
    for (size_t i = 0; i < runs[0].size(); ++i) REQUIRE(runs[0][i] == runs[1][i]);
  }
  // hand computation: channel 0, kernel [a b c], out[t] = a x[t-2] + b x[t-1] + c x[t]
  Tensor x = Tensor::from({1, 4, 1}, {1, 2, 3, 4});
  Tensor w = Tensor::from({1, 3}, {0.5f, -1, 2});
  Var y = ops::depthwise_conv1d_causal(constant(x), constant(w), nullptr, 2);
  REQUIRE(y.dim(1) == 2);                                       // ceil(4 / 2)
  CHECK(y.value()[0] == doctest::Approx(2 * 1));                // t = 0
  CHECK(y.value()[1] == doctest::Approx(0.5 * 1 - 2 + 2 * 3));  // t = 2
}

TEST_CASE("shape ops") {
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::transpose_last2(v[0])); },
      {randn({2, 3, 4}, 1)});
  check_gradients(
      [](const std::vector<Var>& v) { return weighted_sum(ops::slice_last(v[0], 1, 3)); },
      {randn({2, 5}, 1)});
  check_gradients(
      [](const std::vector<Var>& v) {
        return weighted_sum(ops::concat_last({v[0], v[1]}));
      },
      {randn({2, 3}, 1), randn({2, 2}, 2)});
  check_gradients(
      [](const std::vector<Var>& v) {
        return weighted_sum(ops::reshape(v[0], {3, 2}));
      },
      {randn({2, 3}, 1)});
  check_gradients(
      [](const std::vector<Var>& v) {
        return weighted_sum(ops::sum_all({v[0], v[1], v[0]}));
      },
      {randn({2, 3}, 1), randn({2, 3}, 2)});
}

TEST_CASE("dropout keeps the expectation and drops a fraction p") {
  Rng rng(3, "dropout");
  Var x = parameter(Tensor({10000}, 1.0f));
  Var y = ops::dropout(x, 0.25f, rng);
  double s = 0;
  size_t zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    s += y.value()[i];
    zeros += y.value()[i] == 0.0f;
  }
  CHECK(s / 10000 == doctest::Approx(1.0).epsilon(0.03));
  CHECK(zeros / 10000.0 == doctest::Approx(0.25).epsilon(0.03));
  clear_tape();
}

TEST_CASE("fused attention: against an unfused composition and finite differences") {
  size_t B = 2, T = 5, dk = 3, dv = 4;
  std::vector<uint8_t> valid{1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
  for (bool causal : {false, true}) {
    ops::AttentionMask m{&valid, causal};
    check_gradients(
        [&](const std::vector<Var>& v) {
          return weighted_sum(ops::attention(v[0], v[1], v[2], 0.7f, m));
        },
        {randn({B, T, dk}, 1), randn({B, T, dk}, 2), randn({B, T, dv}, 3)});
  }
  // reference: softmax(q k^T * s + mask) v from the generic ops
  Tensor q = randn({B, T, dk}, 4), k = randn({B, T, dk}, 5), v = randn({B, T, dv}, 6);
  Var fused = ops::attention(constant(q), constant(k), constant(v), 0.5f, {&valid, false});
  Var s = ops::scale(ops::matmul(constant(q), constant(k), false, true), 0.5f);
  Tensor sv = s.value().clone();
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T; ++i)
      for (size_t j = 0; j < T; ++j)
        if (!valid[b * T + j]) sv[(b * T + i) * T + j] = -1e30f;
  Var ref = ops::matmul(ops::softmax(constant(sv)), constant(v));
  for (size_t i = 0; i < ref.size(); ++i)
    REQUIRE(fused.value()[i] == doctest::Approx(ref.value()[i]).epsilon(1e-5));
}

// softmax(q k^T scale + mask) v through the generic ops, for q, k, v = QKV (B x T x d): the
// padded keys (VALID, B x T) and, when causal, the later keys get -1e30.
Var unfused_attention(const std::vector<Var>& qkv, const std::vector<uint8_t>& valid, bool causal,
                      float scale) {
  const size_t B = qkv[0].dim(0), T = qkv[0].dim(1);
  Tensor bias({B, T, T}, 0.0f);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T; ++i)
      for (size_t j = 0; j < T; ++j)
        if (!valid[b * T + j] || (causal && j > i)) bias[(b * T + i) * T + j] = -1e30f;
  Var s = ops::add(ops::scale(ops::matmul(qkv[0], qkv[1], false, true), scale), constant(bias));
  return ops::matmul(ops::softmax(s), qkv[2]);
}

TEST_CASE(
    "fused attention backward at small batches: tile groups against the unfused ops, any thread "
    "count") {
  // 2-row tiles at T 9 give 5 tiles a sample: batch 1 splits them into 5 groups of one tile,
  // batch 3 into 3 groups (2, 2, 1), batch 8 keeps one group a sample (the per-sample pass)
  const size_t keep_rows = gf::kernels::attention_block_rows(), keep_threads = gf::num_threads();
  gf::kernels::set_attention_block_rows(2);
  const size_t T = 9, dk = 3, dv = 4;
  for (size_t B : {1, 3, 8}) {
    std::vector<uint8_t> valid(B * T, 1);
    valid[T - 1] = 0;  // the first sample's last key is padded
    for (bool causal : {false, true}) {
      CAPTURE(B);
      CAPTURE(causal);
      ops::AttentionMask m{&valid, causal};
      Tensor q = randn({B, T, dk}, 11), k = randn({B, T, dk}, 12), v = randn({B, T, dv}, 13);
      check_gradients(
          [&](const std::vector<Var>& x) {
            return weighted_sum(ops::attention(x[0], x[1], x[2], 0.6f, m));
          },
          {q, k, v});
      // the unfused composition: softmax(q k^T s + mask) v through the generic ops
      std::vector<Var> ref{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
      backward(weighted_sum(unfused_attention(ref, valid, causal, 0.6f)));
      std::vector<std::vector<float>> runs;
      for (size_t threads : {1, 2}) {
        gf::set_num_threads(threads);
        std::vector<Var> x{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
        backward(weighted_sum(ops::attention(x[0], x[1], x[2], 0.6f, m)));
        std::vector<float> all;
        for (size_t i = 0; i < 3; ++i)
          for (size_t j = 0; j < x[i].size(); ++j) {
            REQUIRE(x[i].grad()[j] == doctest::Approx(ref[i].grad()[j]).epsilon(1e-4).scale(1.0));
            all.push_back(x[i].grad()[j]);
          }
        runs.push_back(all);
      }
      gf::set_num_threads(keep_threads);
      REQUIRE(runs[0] == runs[1]);  // bit for bit: the groups follow from the shape alone
    }
  }
  gf::kernels::set_attention_block_rows(keep_rows);
}

TEST_CASE(
    "fused attention in key blocks (online softmax forward, blocked backward): against the "
    "unfused ops and the one-block form, any thread count") {
  // 8-row tiles at T 40 with 512 bytes of scores a tile take the keys 16 at a time: blocks of
  // 16, 16 and 8 keys. The second sample's padded keys (0..17 and 32..39) leave its rows no
  // valid key in the first block and none in the last; the first sample's (9, 30) and the
  // causal diagonal cross the blocks' edges; a random q makes the running maximum rise in
  // later blocks.
  const size_t keep_rows = gf::kernels::attention_block_rows(), keep_threads = gf::num_threads();
  gf::kernels::set_attention_block_rows(8);
  const size_t B = 2, T = 40, blocks16 = 8 * 16 * sizeof(float);
  std::vector<uint8_t> valid(B * T, 1);
  valid[9] = valid[30] = 0;
  for (size_t j = 0; j < T; ++j)
    if (j < 18 || j >= 32) valid[T + j] = 0;
  for (size_t dk : {16, 3}) {
    const size_t dv = dk == 16 ? 16 : 4;
    for (bool causal : {false, true}) {
      CAPTURE(dk);
      CAPTURE(causal);
      ops::AttentionMask m{&valid, causal};
      Tensor q = randn({B, T, dk}, 21), k = randn({B, T, dk}, 22), v = randn({B, T, dv}, 23);
      for (size_t i = 0; i < q.size(); ++i) q[i] *= 3.0f;  // peaked rows: M moves by several
      std::vector<Var> ref{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
      Var ref_out = unfused_attention(ref, valid, causal, 0.6f);
      backward(weighted_sum(ref_out));
      // output, then dQ, dK, dV
      auto run = [&](size_t bytes, size_t threads) {
        gf::kernels::set_attention_key_block_bytes(bytes);
        gf::set_num_threads(threads);
        std::vector<Var> x{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
        Var out = ops::attention(x[0], x[1], x[2], 0.6f, m);
        backward(weighted_sum(out));
        gf::kernels::set_attention_key_block_bytes(0);
        std::vector<std::vector<float>> r{{out.value().data(), out.value().data() + out.size()}};
        for (const Var& xi : x) r.emplace_back(xi.grad().data(), xi.grad().data() + xi.size());
        return r;
      };
      const auto whole = run(0, 1), blocks = run(blocks16, 1);
      for (size_t j = 0; j < ref_out.size(); ++j) {
        // causal, the second sample's rows 0..17 have no valid key: output 0 (the unfused
        // softmax spreads them evenly over the padded keys instead)
        const size_t row = j / dv, b = row / T, i = row % T;
        if (causal && b == 1 && i < 18) {
          REQUIRE(blocks[0][j] == 0.0f);
          REQUIRE(whole[0][j] == 0.0f);
          continue;
        }
        REQUIRE(blocks[0][j] == doctest::Approx(ref_out.value()[j]).epsilon(1e-5).scale(1.0));
        REQUIRE(blocks[0][j] == doctest::Approx(whole[0][j]).epsilon(1e-6).scale(1.0));
      }
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < ref[i].size(); ++j) {
          if (!causal || j < ref[i].size() / B)  // (causal: the second sample differs, above)
            REQUIRE(blocks[i + 1][j] == doctest::Approx(ref[i].grad()[j]).epsilon(1e-4).scale(1.0));
          REQUIRE(blocks[i + 1][j] == doctest::Approx(whole[i + 1][j]).epsilon(1e-5).scale(1.0));
        }
      CHECK(blocks != whole);  // the blocks did run: other rounding than the one-block form
      CHECK(run(blocks16, 2) == blocks);  // bit for bit: the blocks follow from the shape
    }
  }
  // a sample with no valid key: every row's output and every gradient 0, as one block gives
  std::vector<uint8_t> none(T, 0);
  Tensor q = randn({1, T, 16}, 24), k = randn({1, T, 16}, 25), v = randn({1, T, 16}, 26);
  gf::kernels::set_attention_key_block_bytes(blocks16);
  std::vector<Var> x{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
  Var out = ops::attention(x[0], x[1], x[2], 0.6f, {&none, false});
  backward(weighted_sum(out));
  gf::kernels::set_attention_key_block_bytes(0);
  for (size_t j = 0; j < out.size(); ++j) REQUIRE(out.value()[j] == 0.0f);
  for (const Var& xi : x)
    for (size_t j = 0; j < xi.size(); ++j) REQUIRE(xi.grad()[j] == 0.0f);
  gf::set_num_threads(keep_threads);
  gf::kernels::set_attention_block_rows(keep_rows);
}

TEST_CASE(
    "fused attention in key blocks: K^T and V^T in layout blocks, a product split across them") {
  // 8-row tiles with 512 bytes of scores a tile: K^T and V^T are laid out in blocks of 16 keys
  // (a full tile's key block). At T 44 the last tile has 4 rows and takes 32 keys at a time, so
  // its score products, forward and backward, and dP span two layout blocks; the causal
  // diagonal and padded keys (5, 43) fall inside them.
  const size_t keep_rows = gf::kernels::attention_block_rows(), keep_threads = gf::num_threads();
  gf::kernels::set_attention_block_rows(8);
  const size_t B = 2, T = 44, dk = 16, dv = 16;
  std::vector<uint8_t> valid(B * T, 1);
  valid[5] = valid[T + 43] = 0;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor q = randn({B, T, dk}, 31), k = randn({B, T, dk}, 32), v = randn({B, T, dv}, 33);
    std::vector<Var> ref{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
    Var ref_out = unfused_attention(ref, valid, causal, 0.5f);
    backward(weighted_sum(ref_out));
    auto run = [&](size_t threads) {
      gf::kernels::set_attention_key_block_bytes(8 * 16 * sizeof(float));
      gf::set_num_threads(threads);
      std::vector<Var> x{parameter(q.clone()), parameter(k.clone()), parameter(v.clone())};
      Var out = ops::attention(x[0], x[1], x[2], 0.5f, {&valid, causal});
      backward(weighted_sum(out));
      gf::kernels::set_attention_key_block_bytes(0);
      std::vector<std::vector<float>> r{{out.value().data(), out.value().data() + out.size()}};
      for (const Var& xi : x) r.emplace_back(xi.grad().data(), xi.grad().data() + xi.size());
      return r;
    };
    const auto got = run(1);
    for (size_t j = 0; j < ref_out.size(); ++j)
      REQUIRE(got[0][j] == doctest::Approx(ref_out.value()[j]).epsilon(1e-5).scale(1.0));
    for (size_t i = 0; i < 3; ++i)
      for (size_t j = 0; j < ref[i].size(); ++j)
        REQUIRE(got[i + 1][j] == doctest::Approx(ref[i].grad()[j]).epsilon(1e-4).scale(1.0));
    CHECK(run(2) == got);
  }
  gf::set_num_threads(keep_threads);
  gf::kernels::set_attention_block_rows(keep_rows);
}

TEST_CASE("BLAS: sgemm against a naive product, self-test, kernel name") {
  CHECK(blas_self_test_error() < 1e-3);
  CHECK(!blas_kernel_name().empty());
  Tensor a = randn({7, 9}, 1), b = randn({9, 5}, 2);
  Tensor c({7, 5});
  sgemm(false, false, 7, 5, 9, 1.0f, a.data(), 9, b.data(), 5, 0.0f, c.data(), 5);
  for (size_t i = 0; i < 7; ++i)
    for (size_t j = 0; j < 5; ++j) {
      double r = 0;
      for (size_t p = 0; p < 9; ++p) r += a[i * 9 + p] * b[p * 5 + j];
      CHECK(c[i * 5 + j] == doctest::Approx(r).epsilon(1e-5));
    }
}

TEST_CASE("the tensor pool reuses buffers of repeated shapes") {
  { Tensor warm({123457}); }
  PoolStats before = pool_stats();
  for (int i = 0; i < 10; ++i) Tensor t({123457});
  PoolStats after = pool_stats();
  CHECK(after.allocations == before.allocations);
  CHECK(after.reuses >= before.reuses + 10);
}

TEST_CASE("the tensor pool stays bounded when shapes keep changing") {
  // variable sequence lengths give many distinct sizes; the cache must not grow without bound
  for (size_t i = 0; i < 3000; ++i) Tensor t = Tensor::empty({1000000 + 977 * i});
  CHECK(pool_stats().bytes_cached <= size_t(1024) * 1024 * 1024);
  // nearby sizes share a size class, so they are reused
  { Tensor a = Tensor::empty({500000}); }
  PoolStats before = pool_stats();
  { Tensor b = Tensor::empty({500100}); }
  CHECK(pool_stats().allocations == before.allocations);
}

TEST_CASE("rng: streams are reproducible and distinct") {
  Rng a(5, "x"), b(5, "x"), c(5, "y");
  for (int i = 0; i < 100; ++i) REQUIRE(a.next_u64() == b.next_u64());
  CHECK(a.next_u64() != c.next_u64());
  Rng d(5, "x");
  d.next_u64();
  Rng e(0, 0);
  e.restore(d.state(), d.increment());
  CHECK(e.next_u64() == d.next_u64());
  // moments of the normal generator
  Rng n(1, "n");
  double m = 0, v = 0;
  for (int i = 0; i < 20000; ++i) {
    double x = n.normal();
    m += x;
    v += x * x;
  }
  CHECK(m / 20000 == doctest::Approx(0).epsilon(0.03));
  CHECK(v / 20000 == doctest::Approx(1).epsilon(0.03));
}

TEST_CASE(
    "layer norm parameters and a broadcast bias: gradients over many row blocks, any thread "
    "count") {
  // 1,000 rows: four blocks of the fixed row split, the last one short
  const size_t rows = 1000, d = 24, keep = gf::num_threads();
  Tensor x = randn({rows, d}, 1), w = randn({rows, d}, 2), gam = randn({d}, 3), bet = randn({d}, 4);
  // reference: d loss / d gamma_j = sum_i w_ij xhat_ij, d / d beta_j = sum_i w_ij, and the
  // broadcast bias's gradient is the column sum of the incoming gradient
  std::vector<double> rg(d, 0.0), rb(d, 0.0);
  for (size_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (size_t j = 0; j < d; ++j) mu += x[i * d + j];
    mu /= d;
    for (size_t j = 0; j < d; ++j) var += (x[i * d + j] - mu) * (x[i * d + j] - mu);
    var /= d;
    for (size_t j = 0; j < d; ++j) {
      rg[j] += w[i * d + j] * (x[i * d + j] - mu) / std::sqrt(var + 1e-5);
      rb[j] += w[i * d + j];
    }
  }
  std::vector<std::vector<float>> runs;
  for (size_t threads : {1, 2}) {
    gf::set_num_threads(threads);
    Var g = parameter(gam.clone()), b = parameter(bet.clone()), c = parameter(Tensor({d}, 0.5f));
    Var y = ops::layer_norm(constant(x), g, b, 1e-5f);
    backward(ops::sum(ops::mul(y, constant(w))));
    Var z = ops::add(constant(x), c);
    backward(ops::sum(ops::mul(z, constant(w))));
    for (size_t j = 0; j < d; ++j) {
      CHECK(g.grad()[j] == doctest::Approx(rg[j]).epsilon(1e-4).scale(1.0));
      CHECK(b.grad()[j] == doctest::Approx(rb[j]).epsilon(1e-4).scale(1.0));
      CHECK(c.grad()[j] == doctest::Approx(rb[j]).epsilon(1e-4).scale(1.0));
      CHECK(z.value()[3 * d + j] == x[3 * d + j] + 0.5f);
    }
    std::vector<float> all = g.grad().to_vector();
    for (float v : b.grad().to_vector()) all.push_back(v);
    for (float v : c.grad().to_vector()) all.push_back(v);
    runs.push_back(all);
  }
  gf::set_num_threads(keep);
  for (size_t i = 0; i < runs[0].size(); ++i) REQUIRE(runs[0][i] == runs[1][i]);
}

TEST_CASE(
    "first gradients written as 0 + g: the bits of adding onto zeros (add, lerp, sum_all, unary)") {
  // each graph gives x and y one gradient each, so the first write is what is seen
  Tensor x = randn({300, 7}, 31), y = randn({300, 7}, 32), wt = randn({300, 7}, 33);
  for (size_t i = 0; i < wt.size(); i += 3) wt[i] = -0.0f;
  {  // the contract itself: a -0 gradient lands as +0, as on a zeroed buffer
    Tensor g({4}, 0.0f);
    for (size_t i = 0; i < 4; ++i) g[i] = -0.0f;  // (a fill with 0 would write +0)
    g[1] = 2.5f;
    Var fresh = parameter(Tensor({4}, 1.0f)), zeroed = parameter(Tensor({4}, 1.0f));
    zeroed.grad_buf();
    fresh.add_grad(g);
    zeroed.add_grad(g);
    for (size_t i = 0; i < 4; ++i)
      REQUIRE(std::memcmp(fresh.grad().data() + i, zeroed.grad().data() + i, sizeof(float)) == 0);
    REQUIRE(!std::signbit(fresh.grad()[0]));
    REQUIRE(fresh.grad()[1] == 2.5f);
  }
  Var t = parameter(Tensor({1}, 0.3f));
  const std::vector<std::function<Var(const Var&, const Var&)>> graphs{
      [](const Var& a, const Var& b) { return ops::add(a, b); },
      [&](const Var& a, const Var& b) { return ops::lerp(a, b, t); },
      [](const Var& a, const Var& b) {
        return ops::sum_all({a, ops::reshape(b, {300, 7})});
      },
      [](const Var& a, const Var& b) { return ops::add(ops::sigmoid(a), ops::scale(b, 0.5f)); }};
  for (size_t k = 0; k < graphs.size(); ++k) {
    CAPTURE(k);
    auto loss = [&](const Var& xv, const Var& yv) {
      return weighted_sum(ops::mul(graphs[k](xv, yv), constant(wt)), 7);
    };
    Var xf = parameter(x.clone()), yf = parameter(y.clone());
    Var xz = parameter(x.clone()), yz = parameter(y.clone());
    xz.grad_buf();
    yz.grad_buf();
    for (int pass = 0; pass < 2; ++pass) {  // the second pass adds to the first
      backward(loss(xf, yf));
      backward(loss(xz, yz));
      for (size_t i = 0; i < x.size(); ++i) {
        REQUIRE(std::memcmp(xf.grad().data() + i, xz.grad().data() + i, sizeof(float)) == 0);
        REQUIRE(std::memcmp(yf.grad().data() + i, yz.grad().data() + i, sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("linear_sum: against double loops and finite differences; threads change no bit") {
  // three inputs of widths 5, 16, 3 and 130 rows (more than two 64-row blocks)
  const std::vector<size_t> k{5, 16, 3};
  std::vector<Tensor> xt, wt;
  for (size_t i = 0; i < k.size(); ++i) {
    xt.push_back(randn({2, 65, k[i]}, 40 + i));
    wt.push_back(randn({k[i], 7}, 50 + i));
  }
  Tensor bt = randn({7}, 60);
  auto run = [&](size_t threads) {
    gf::set_num_threads(threads);
    std::vector<Var> xs, ws;
    for (size_t i = 0; i < k.size(); ++i) {
      xs.push_back(parameter(xt[i].clone()));
      ws.push_back(parameter(wt[i].clone()));
    }
    Var b = parameter(bt.clone());
    Var y = ops::linear_sum(xs, ws, &b);
    backward(weighted_sum(y, 3));
    std::vector<float> all = y.value().to_vector();
    for (auto* vs : {&xs, &ws})
      for (const Var& v : *vs)
        for (float g : v.grad().to_vector()) all.push_back(g);
    for (float g : b.grad().to_vector()) all.push_back(g);
    return std::make_pair(y.value().to_vector(), all);
  };
  const size_t keep = gf::num_threads();
  auto one = run(1), two = run(2);
  gf::set_num_threads(keep);
  REQUIRE(one.second == two.second);
  for (size_t r = 0; r < 130; ++r)
    for (size_t j = 0; j < 7; ++j) {
      double ref = bt[j];
      for (size_t i = 0; i < k.size(); ++i)
        for (size_t c = 0; c < k[i]; ++c)
          ref += static_cast<double>(xt[i][r * k[i] + c]) * wt[i][c * 7 + j];
      REQUIRE(one.first[r * 7 + j] == doctest::Approx(ref).epsilon(1e-5).scale(1.0));
    }
  check_gradients(
      [](const std::vector<Var>& v) {
        return weighted_sum(ops::linear_sum({v[0], v[1]}, {v[2], v[3]}, &v[4]), 5);
      },
      {randn({4, 3}, 61), randn({4, 2}, 62), randn({3, 5}, 63), randn({2, 5}, 64), randn({5}, 65)});
  // a fresh input gradient equals one added to zeros, bit for bit
  Var xf = parameter(xt[1].clone()), xz = parameter(xt[1].clone());
  xz.grad_buf();
  Var w1 = constant(wt[1]);
  backward(weighted_sum(ops::linear_sum({xf}, {w1}), 6));
  backward(weighted_sum(ops::linear_sum({xz}, {w1}), 6));
  REQUIRE(xf.grad().to_vector() == xz.grad().to_vector());
}

TEST_CASE("linear_parts: a weight passed twice, an unused part, against finite differences") {
  // parts 0 and 1 share W and b (their gradients are added by one task after the other);
  // part 2 is never used (no gradient reaches it); 130 rows: more than two 64-row blocks
  check_gradients(
      [](const std::vector<Var>& v) {
        std::vector<Var> parts = ops::linear_parts(v[0], {v[1], v[1], v[2]}, {v[3], v[3], v[4]});
        return ops::add(weighted_sum(parts[0], 4), weighted_sum(parts[1], 5));
      },
      {randn({130, 6}, 16), randn({6, 5}, 17), randn({6, 3}, 18), randn({5}, 19), randn({3}, 20)});
}

TEST_CASE("a fresh input gradient is written, a later one added (linear, linear_parts, gelu)") {
  // x's gradient starts undefined (ops write it without zeroing it first) or defined and zero
  // (ops add to it): the same values, before and after a second backward pass that adds
  Tensor x = randn({70, 33}, 1), w = randn({33, 40}, 2), w2 = randn({33, 24}, 3);
  Var wv = parameter(w.clone()), w2v = parameter(w2.clone());
  auto loss = [&](const Var& xv) {
    std::vector<Var> parts = ops::linear_parts(xv, {wv, w2v}, {});
    return ops::add(
        ops::add(weighted_sum(ops::gelu(ops::linear(xv, wv)), 3), weighted_sum(parts[0], 4)),
        weighted_sum(parts[1], 5));
  };
  Var fresh = parameter(x.clone()), zeroed = parameter(x.clone());
  zeroed.grad_buf();
  for (int pass = 0; pass < 2; ++pass) {
    backward(loss(fresh));
    backward(loss(zeroed));
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(fresh.grad()[i] == zeroed.grad()[i]);
  }
  // a layer wider than the short-dimension kernels' 256 (their long-d path)
  Tensor ww = randn({33, 300}, 9);
  Var wide_fresh = parameter(x.clone()), wide_zeroed = parameter(x.clone());
  wide_zeroed.grad_buf();
  backward(weighted_sum(ops::linear(wide_fresh, constant(ww)), 10));
  backward(weighted_sum(ops::linear(wide_zeroed, constant(ww)), 10));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(wide_fresh.grad()[i] == wide_zeroed.grad()[i]);
  // and against finite differences (the fresh path)
  check_gradients(
      [](const std::vector<Var>& v) {
        std::vector<Var> parts = ops::linear_parts(v[0], {v[1], v[2]}, {});
        return ops::add(ops::add(weighted_sum(ops::gelu(ops::linear(v[0], v[1])), 3),
                                 weighted_sum(parts[0], 4)),
                        weighted_sum(parts[1], 5));
      },
      {randn({5, 6}, 6), randn({6, 7}, 7), randn({6, 3}, 8)});
}
