// precision: bf16 (growformer/precision.hpp, docs/NUMERICS.md): the rounding, every bf16
// product against float64 (of the rounded inputs: exact up to float32 accumulation; of the
// inputs as given: within what rounding each factor to bf16 allows), the gradients of the ops
// that use them, determinism, a small training run against float32's, and the refusal where
// the CPU (or GROWFORMER_ISA) has no AVX512_BF16. The tests that run bf16 products skip, saying
// so, on a CPU without it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include "growformer/checkpoint.hpp"
#include "growformer/kernels.hpp"
#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"
#include "growformer/precision.hpp"
#include "growformer/trainer.hpp"
#include "testing.hpp"

using namespace gf;
using gf_test::randn;
using kernels::Precision;
namespace fs = std::filesystem;

namespace {

const double kU32 = std::ldexp(1.0, -24);  // float32's unit roundoff
const double kU16 = std::ldexp(1.0, -8);   // bf16's (8 significant bits)

// False, with a message naming why, where bf16 products cannot run (the test then checks
// nothing more: an AVX2-only CI machine, or GROWFORMER_ISA below avx512).
bool bf16_here() {
  const std::string why = kernels::bf16_unavailable_reason();
  if (why.empty()) return true;
  MESSAGE("skipped: bf16 products cannot run here: " << why);
  return false;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

std::vector<float> values(size_t n, uint64_t seed, float std = 1.0f) {
  return randn({n}, seed, std).to_vector();
}

// One output element's reference: the sum over the contraction of a_q b_q in float64, of the
// inputs rounded to bf16 (exact) and as given (unrounded), and sum |a_q b_q|.
struct Ref {
  double rounded = 0, given = 0, abs = 0;
  void add(float a, float b) {
    rounded += static_cast<double>(kernels::bf16_round(a)) * kernels::bf16_round(b);
    given += static_cast<double>(a) * b;
    abs += std::fabs(static_cast<double>(a) * b);
  }
};

// Checks GOT = base + alpha * sum against REF: within float32 accumulation of the rounded
// inputs' sum ((len + 3) u32 of everything added: the chain's len roundings, alpha's, the
// add onto base), and within that plus (2 u16 + u16^2) |alpha| sum |a b| of the unrounded
// inputs' sum (each factor rounded by at most u16 relatively). Returns whether the element
// differs from the unrounded sum by more than float32 accumulation alone would allow (the
// rounding to bf16 is visible).
bool check_element(float got, double base, double alpha, const Ref& r, size_t len) {
  const double acc =
      (static_cast<double>(len) + 3) * kU32 * (std::fabs(alpha) * r.abs + std::fabs(base)) + 1e-30;
  const double want_r = base + alpha * r.rounded, want_g = base + alpha * r.given;
  const double bound_g = acc + (2 * kU16 + kU16 * kU16) * std::fabs(alpha) * r.abs;
  INFO("got " << got << " rounded-input sum " << want_r << " input sum " << want_g << " len "
              << len);
  CHECK(std::fabs(got - want_r) <= acc);
  CHECK(std::fabs(got - want_g) <= bound_g);
  return std::fabs(got - want_g) > acc;
}

// A product's shape: M x N outputs over a contraction of LEN.
struct Shape3 {
  size_t m, n, len;
};
const Shape3 kShapes[] = {{1, 1, 1},    {3, 5, 2},     {8, 16, 16},  {13, 17, 33},
                          {9, 4, 7},    {16, 64, 64},  {5, 100, 3},  {64, 48, 300},
                          {17, 8, 129}, {40, 192, 64}, {2, 33, 513}, {128, 16, 512}};

}  // namespace

TEST_CASE("bf16: the rounding, portable and by the instruction, on ties, subnormals and limits") {
  // 8 significant bits: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (ties to even: 1);
  // 1 + 3 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6)
  CHECK(kernels::bf16_round(1.0f) == 1.0f);
  CHECK(kernels::bf16_round(1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  CHECK(kernels::bf16_round(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(kernels::bf16_round(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) ==
        1.0f + std::ldexp(1.0f, -7));
  CHECK(kernels::bf16_round(-3.0f) == -3.0f);
  // subnormals go to a zero of their sign; the smallest normal stays
  CHECK(bits(kernels::bf16_round(1e-40f)) == 0u);
  CHECK(bits(kernels::bf16_round(-1e-40f)) == 0x80000000u);
  CHECK(kernels::bf16_round(std::numeric_limits<float>::min()) ==
        std::numeric_limits<float>::min());
  // the largest floats round up to infinity; infinities and NaN stay
  CHECK(std::isinf(kernels::bf16_round(std::numeric_limits<float>::max())));
  CHECK(kernels::bf16_round(INFINITY) == INFINITY);
  CHECK(std::isnan(kernels::bf16_round(NAN)));
  // relative error at most 2^-8 on normal values
  for (float x : values(1000, 3, 100.0f)) {
    const float r = kernels::bf16_round(x);
    CHECK(std::fabs(static_cast<double>(r) - x) <= kU16 * std::fabs(x));
    CHECK((bits(r) & 0xffffu) == 0u);
  }
  if (!bf16_here()) return;
  // the instruction's rounding is the portable one, bit for bit
  std::vector<float> x = values(997, 5, 10.0f);
  for (float e : {0.0f, -0.0f, 1e-40f, -1e-40f, INFINITY, -INFINITY, NAN,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)})
    x.push_back(e);
  std::vector<float> y(x.size());
  REQUIRE(kernels::bf16_round_simd(x.data(), y.data(), x.size()));
  for (size_t j = 0; j < x.size(); ++j) {
    const float r = kernels::bf16_round(x[j]);
    INFO("x = " << x[j]);
    if (std::isnan(r))
      CHECK(std::isnan(y[j]));
    else
      CHECK(bits(y[j]) == bits(r));
  }
}

TEST_CASE("bf16: precision switch, its scope, and the kernel set below avx512 turning it off") {
  CHECK(kernels::product_precision() == Precision::float32);
  CHECK(std::string(kernels::precision_name(Precision::bf16)) == "bf16");
  if (!kernels::bf16_available()) {
    // refused, naming why
    try {
      kernels::set_product_precision(Precision::bf16);
      FAIL("bf16 was set where it cannot run");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find(kernels::bf16_unavailable_reason()) != std::string::npos);
    }
    CHECK(kernels::product_precision() == Precision::float32);
    CHECK(kernels::bf16_peak_gflops(1, 0.01) == 0.0);
    return;
  }
  {
    kernels::PrecisionScope s(Precision::bf16);
    CHECK(kernels::product_precision() == Precision::bf16);
    CHECK(kernels::bf16_peak_gflops(1, 0.02) > 0.0);
    const std::string isa = kernels::simd_name();
    if (kernels::set_simd("avx2")) {
      CHECK(kernels::product_precision() == Precision::float32);
      CHECK(!kernels::bf16_available());
      CHECK(kernels::bf16_unavailable_reason().find("avx2") != std::string::npos);
      kernels::set_simd(isa);
    }
  }
  CHECK(kernels::product_precision() == Precision::float32);
}

namespace {
// The bf16 kernel sets this machine runs ("avx512_bf16", and "amx" where it can), each set in
// turn while F runs; the one in use before is restored.
void each_bf16_set(const std::function<void(const std::string&)>& f) {
  const std::string before = kernels::bf16_kernels_name();
  for (const char* set : {"avx512_bf16", "amx"}) {
    if (!kernels::set_bf16_kernels(set)) {
      MESSAGE("bf16 kernels " << set << ": not on this machine");
      continue;
    }
    CHECK(kernels::bf16_kernels_name() == set);
    f(set);
  }
  kernels::set_bf16_kernels(before);
}
}  // namespace

TEST_CASE("bf16: every product against float64 of its rounded and of its given inputs") {
  if (!bf16_here()) return;
  kernels::PrecisionScope bf16(Precision::bf16);
  each_bf16_set([](const std::string& set) {
    CAPTURE(set);
    size_t visible = 0, total = 0;
    uint64_t seed = 100;
    for (const Shape3& s : kShapes) {
      const size_t m = s.m, n = s.n, len = s.len;
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(len);
      const std::vector<float> a = values(m * len, ++seed), b = values(len * n, ++seed),
                               c0 = values(m * n, ++seed), bias = values(n, ++seed);
      const float alpha = 0.37f;
      auto ref = [&](size_t i, size_t j) {  // (A B)[i, j], A m x len, B len x n
        Ref r;
        for (size_t q = 0; q < len; ++q) r.add(a[i * len + q], b[q * n + j]);
        return r;
      };
      std::vector<float> c(m * n), cmax(m * n), rowmax(m, -INFINITY);
      kernels::gemm_short_k(m, n, len, alpha, a.data(), len, b.data(), n, c.data(), n);
      kernels::gemm_short_k_max(m, n, len, alpha, a.data(), len, b.data(), n, cmax.data(), n,
                                rowmax.data());
      std::vector<float> acc = c0, rows = c0, bia(m * n), alphas = values(m, ++seed);
      kernels::gemm_acc_nd(m, len, n, alpha, a.data(), len, b.data(), n, acc.data(), n);
      kernels::gemm_acc_nd_rows(m, len, n, alphas.data(), a.data(), len, b.data(), n, rows.data(),
                                n);
      kernels::gemm_bias(m, n, len, a.data(), len, b.data(), n, bias.data(), bia.data(), n);
      // the columns in three parts, each stored dense: the same bits as gemm_bias's
      const size_t off[4] = {0, n / 3, n / 3 + (n - n / 3) / 2, n};
      std::vector<std::vector<float>> part(3);
      float* dst[3];
      for (size_t p = 0; p < 3; ++p) {
        part[p].assign(m * (off[p + 1] - off[p]) + 1, 0.0f);
        dst[p] = part[p].data();
      }
      kernels::gemm_bias_parts(m, n, len, a.data(), len, b.data(), n, bias.data(), off, 3, dst);
      for (size_t i = 0; i < m; ++i) {
        float mx = -INFINITY;
        for (size_t j = 0; j < n; ++j) {
          const Ref r = ref(i, j);
          const size_t e = i * n + j;
          visible += check_element(c[e], 0, alpha, r, len);
          check_element(acc[e], c0[e], alpha, r, len);
          check_element(rows[e], c0[e], alphas[i], r, len);
          check_element(bia[e], bias[j], 1.0, r, len);
          ++total;
          CHECK(bits(cmax[e]) == bits(c[e]));
          mx = std::max(mx, c[e]);
          const size_t p = j < off[1] ? 0 : j < off[2] ? 1 : 2;
          CHECK(bits(part[p][i * (off[p + 1] - off[p]) + j - off[p]]) == bits(bia[e]));
        }
        CHECK(rowmax[i] == mx);
      }
      // C (len x n) += alpha X^T Y with X = A^T laid out m x len ... here X (m x len), Y (m x n)
      const std::vector<float> y = values(m * n, ++seed), t0 = values(len * n, ++seed);
      std::vector<float> t = t0;
      kernels::gemm_acc_tnd(m, len, n, alpha, a.data(), len, y.data(), n, t.data(), n);
      for (size_t i = 0; i < len; ++i)
        for (size_t j = 0; j < n; ++j) {
          Ref r;
          for (size_t q = 0; q < m; ++q) r.add(a[q * len + i], y[q * n + j]);
          check_element(t[i * n + j], t0[i * n + j], alpha, r, m);
        }
    }
    // the rounding is there: most elements are further from the unrounded sum than float32
    // accumulation alone allows (float32 products would put none there)
    INFO(visible << " of " << total);
    CHECK(visible > total / 2);
  });
}

namespace {
// The gradients of sum(w o f(inputs)) with respect to INPUTS, at the precision in use.
std::vector<Tensor> grads_of(const std::function<Var(const std::vector<Var>&)>& f,
                             const std::vector<Tensor>& inputs) {
  std::vector<Var> vars;
  for (const Tensor& t : inputs) vars.push_back(parameter(t.clone()));
  Var out = gf_test::weighted_sum(f(vars));
  backward(out);
  std::vector<Tensor> g;
  for (Var& v : vars) g.push_back(v.grad().clone());
  return g;
}

// max |a - b| / max |b| over the elements.
double normwise(const Tensor& a, const Tensor& b) {
  double d = 0, s = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    d = std::max(d, std::fabs(static_cast<double>(a[j]) - b[j]));
    s = std::max(s, std::fabs(static_cast<double>(b[j])));
  }
  return d / std::max(s, 1e-30);
}

Var linear_fn(const std::vector<Var>& in) { return ops::linear(in[0], in[1], &in[2]); }
Var attention_fn(const std::vector<Var>& in) {
  return ops::attention(in[0], in[1], in[2], 0.25f, ops::AttentionMask{});
}
}  // namespace

TEST_CASE("bf16: a linear layer's and the attention's gradients against float64 with the bound") {
  if (!bf16_here()) return;
  each_bf16_set([](const std::string& set) {
    CAPTURE(set);
    // linear: dX = G W^T, dW = X^T G, db = sum G (G: the weighted sum's weights): dX and dW
    // are one bf16 product each, db a float32 sum
    const size_t m = 37, in = 24, out = 20;
    const std::vector<Tensor> lin = {randn({m, in}, 1), randn({in, out}, 2), randn({out}, 3)};
    std::vector<Tensor> g32, g16;
    {
      kernels::PrecisionScope s(Precision::float32);
      g32 = grads_of(linear_fn, lin);
    }
    {
      kernels::PrecisionScope s(Precision::bf16);
      g16 = grads_of(linear_fn, lin);
    }
    // each gradient element is a sum of m (dW) or out (dX) products of two factors rounded to
    // bf16: within 2 u16 + u16^2 of their sum |.|; float32's gradient is exact to far less
    for (size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      const double nw = normwise(g16[k], g32[k]);
      CHECK(nw <= (k == 2 ? 1e-6 : 3 * kU16));
      if (k < 2) CHECK(nw > 0.0);  // rounded: not the float32 gradient
    }
    // the attention (scores, softmax, P V and their backward): each product rounds its two
    // inputs, the softmax's inputs carry the scores' rounding; a chain of three products
    // each way, so within a few times the one-product bound, normwise
    const size_t B = 2, T = 40, d = 16;
    const std::vector<Tensor> att = {randn({B, T, d}, 4), randn({B, T, d}, 5), randn({B, T, d}, 6)};
    {
      kernels::PrecisionScope s(Precision::float32);
      g32 = grads_of(attention_fn, att);
    }
    {
      kernels::PrecisionScope s(Precision::bf16);
      g16 = grads_of(attention_fn, att);
    }
    for (size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      const double nw = normwise(g16[k], g32[k]);
      MESSAGE(set << ": attention gradient " << k << ": normwise difference from float32 " << nw);
      CHECK(nw <= 8 * kU16);
      CHECK(nw > 0.0);
    }
  });
}

TEST_CASE("bf16: the ops give the same bits on 1 and 2 threads and on a second call") {
  if (!bf16_here()) return;
  kernels::PrecisionScope s(Precision::bf16);
  each_bf16_set([](const std::string& set) {
    CAPTURE(set);
    const size_t threads = num_threads();
    const std::vector<Tensor> lin = {randn({300, 64}, 11), randn({64, 96}, 12), randn({96}, 13)};
    const std::vector<Tensor> att = {randn({3, 200, 16}, 14), randn({3, 200, 16}, 15),
                                     randn({3, 200, 16}, 16)};
    std::vector<std::vector<Tensor>> runs;
    for (size_t t : {1, 2, 2}) {
      set_num_threads(t);
      std::vector<Tensor> r = grads_of(linear_fn, lin);
      for (Tensor& g : grads_of(attention_fn, att)) r.push_back(g);
      runs.push_back(r);
    }
    set_num_threads(threads);
    for (size_t k = 0; k < runs[0].size(); ++k) {
      CAPTURE(k);
      CHECK(std::memcmp(runs[0][k].data(), runs[1][k].data(), runs[0][k].size() * 4) == 0);
      CHECK(std::memcmp(runs[1][k].data(), runs[2][k].data(), runs[1][k].size() * 4) == 0);
    }
  });
}

namespace {
const char* kRun = R"(name: bf16
seed: 3
threads: 2
data:
  plugin: listops
  train_size: 512
  val_size: 64
  test_size: 64
  min_length: 4
  max_length: 24
  max_depth: 2
  max_args: 4
model:
  d_model: 32
  layers: 1
  max_len: 32
  dropout: 0.0
  attention:
    plugin: mha
    heads: 2
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 120
  batch_size: 32
  warmup: 10
  eval_every: 0
  log_every: 10
  check_every: 200
)";

// The training losses logged by a run of kRun with SETS; the run directory under TMP.
std::vector<double> train_losses(const gf_test::TempDir& tmp, const std::string& name,
                                 const std::vector<std::string>& sets) {
  ConfigNode cfg = ConfigNode::load_string(kRun, "bf16.yaml");
  for (const std::string& s : sets) cfg.apply_override(s);
  Experiment ex(cfg, {GF_PLUGIN_DIR});
  RunFlags f;
  f.run_dir = tmp.file(name);
  f.quiet = true;
  REQUIRE(ex.train(f) == 0);
  std::vector<double> out;
  for (const auto& j : gf_test::metrics_without_timing(f.run_dir))
    if (j["split"] == "train") out.push_back(j["loss"].get<double>());
  return out;
}
}  // namespace

TEST_CASE("bf16: a small run's loss falls and stays near float32's; the same seed, the same bits") {
  if (!bf16_here()) return;
  gf_test::TempDir tmp;
  const std::vector<double> f32 = train_losses(tmp, "f32", {});
  const std::vector<double> b16 = train_losses(tmp, "b16", {"precision=bf16"});
  kernels::set_product_precision(Precision::float32);
  REQUIRE(f32.size() == 12);
  REQUIRE(b16.size() == f32.size());
  // falls: the last three logs' mean well under the first's (listops' 10 classes start at
  // ln 10 = 2.3)
  const double first = b16.front(), last = (b16[9] + b16[10] + b16[11]) / 3;
  const double last32 = (f32[9] + f32[10] + f32[11]) / 3;
  MESSAGE("training loss, float32: " << f32.front() << " -> " << last32 << "; bf16: " << first
                                     << " -> " << last);
  CHECK(last < first - 0.3);
  // near float32's all the way: every logged loss within 0.05 (the runs share data and
  // initialisation; only the products' rounding differs)
  for (size_t k = 0; k < f32.size(); ++k) {
    CAPTURE(k);
    CHECK(std::fabs(b16[k] - f32[k]) <= 0.05);
  }
  bool differs = false;
  for (size_t k = 0; k < f32.size(); ++k) differs = differs || b16[k] != f32[k];
  CHECK(differs);  // bf16 ran
  // the same seed on 2 threads and on 1: the same losses, bit for bit
  CHECK(train_losses(tmp, "b16_again", {"precision=bf16"}) == b16);
  CHECK(train_losses(tmp, "b16_one", {"precision=bf16", "threads=1"}) == b16);
  // bf16_if_available here: bf16
  CHECK(train_losses(tmp, "b16_if", {"precision=bf16_if_available"}) == b16);
  kernels::set_product_precision(Precision::float32);
  // eval: the model's precision by default, --precision to choose; where bf16 cannot run
  // (GROWFORMER_ISA=avx2) the bf16 model is refused unless --precision float32
  const std::string b16_ck = tmp.file("b16") + "/checkpoints/last.safetensors";
  auto eval_loss = [&](const std::string& env, const std::string& flags, int* status) {
    const gf_test::Shell sh = gf_test::run_shell(env + " " + GF_BIN + " eval " + b16_ck +
                                                 " --split val --json " + flags + " 2>/dev/null");
    *status = sh.status;
    if (sh.status != 0) return "status " + std::to_string(sh.status);
    return nlohmann::json::parse(sh.output)["loss"].dump();
  };
  int st = 0;
  const std::string own = eval_loss("", "", &st);
  CHECK(st == 0);
  CHECK(eval_loss("", "--precision bf16", &st) == own);
  const std::string f32_loss = eval_loss("", "--precision float32", &st);
  CHECK(st == 0);
  CHECK(f32_loss != own);
  CHECK(eval_loss("GROWFORMER_ISA=avx2", "--precision float32", &st) != own);
  CHECK(st == 0);
  const gf_test::Shell refused = gf_test::run_shell("GROWFORMER_ISA=avx2 " + std::string(GF_BIN) +
                                                    " eval " + b16_ck + " --split val");
  INFO(refused.output);
  CHECK(refused.status == 2);
  CHECK(refused.output.find("AVX512_BF16") != std::string::npos);
  // the checkpoint's config carries the precision: a model built from it for eval or predict
  // uses bf16, and one from the float32 run float32
  for (const char* run : {"b16", "f32"}) {
    const std::string ck = tmp.file(run) + "/checkpoints/last.safetensors";
    REQUIRE(fs::exists(ck));
    auto ex = inference_from_checkpoint(load_checkpoint(ck), ck, {GF_PLUGIN_DIR}, "none");
    CHECK(ex->precision() == (std::string(run) == "b16" ? Precision::bf16 : Precision::float32));
    CHECK(kernels::product_precision() == ex->precision());
  }
  kernels::set_product_precision(Precision::float32);
}

TEST_CASE("bf16: refused with one message where AVX512_BF16 is absent (GROWFORMER_ISA=avx2)") {
  const std::string isa = kernels::simd_name();
  const bool capped = kernels::set_simd("avx2");  // the kernel set below avx512, if the CPU has it
  if (!capped && kernels::bf16_available()) {
    MESSAGE("skipped: this CPU has no AVX2 set to cap to");
    return;
  }
  ConfigNode cfg = ConfigNode::load_string(kRun, "bf16.yaml");
  cfg.apply_override("precision=bf16");
  const std::string msg =
      gf_test::error_of([&] { Experiment ex(cfg, {GF_PLUGIN_DIR}, "", "check"); });
  INFO(msg);
  CHECK(msg.find("precision") != std::string::npos);
  CHECK(msg.find("AVX512_BF16") != std::string::npos);
  CHECK(msg.find("bf16_if_available") != std::string::npos);
  // bf16_if_available falls back to float32 and says why
  ConfigNode fall = ConfigNode::load_string(kRun, "bf16.yaml");
  fall.apply_override("precision=bf16_if_available");
  {
    Experiment ex(fall, {GF_PLUGIN_DIR}, "", "check");
    CHECK(ex.precision() == Precision::float32);
    REQUIRE(!ex.notes().empty());
    CHECK(ex.notes().front().find("fell back") != std::string::npos);
  }
  CHECK(kernels::product_precision() == Precision::float32);
  if (capped) kernels::set_simd(isa);
  // the program under GROWFORMER_ISA=avx2 (the CPU's own check where it has no AVX-512):
  // status 2 and the message naming the key
  gf_test::TempDir tmp;
  std::ofstream(tmp.file("c.yaml")) << kRun << "precision: bf16\n";
  const gf_test::Shell sh = gf_test::run_shell("GROWFORMER_ISA=avx2 " + std::string(GF_BIN) +
                                               " config check " + tmp.file("c.yaml"));
  INFO(sh.output);
  CHECK(sh.status == 2);
  CHECK(sh.output.find("precision") != std::string::npos);
  CHECK(sh.output.find("AVX512_BF16") != std::string::npos);
  // a GROWFORMER_BF16 that names no bf16 kernel set stops the program at start, on any CPU
  const gf_test::Shell bad =
      gf_test::run_shell("GROWFORMER_BF16=amx2 " + std::string(GF_BIN) + " --version");
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK(bad.output.find("GROWFORMER_BF16=amx2 is not a bf16 kernel set") != std::string::npos);
}
