// The oneDNN peer of `bench --peer onednn` (tools/onednn_peer): its step computes growformer's
// loss, gradients and AdamW update from the same parameters and batch (the gate), the gate fails
// when one weight of the peer is perturbed, models the peer does not compute are refused, and
// the bench command runs the two steps interleaved; under bf16 the peer's products are oneDNN's
// bf16 matmuls, near growformer's bf16 step and away from its float32 one. No timing is
// asserted.
#include <cmath>
#include <map>
#include <memory>

#include "growformer/model.hpp"
#include "growformer/ops.hpp"
#include "growformer/precision.hpp"
#include "growformer/rng.hpp"
#include "onednn_peer.hpp"
#include "testing.hpp"

using gf::ConfigNode;

namespace {

// two layers, two heads of d_k 8, MLP hidden 64; T below max_len, so rows of the position
// table past T get a zero gradient in both
const char* kModel =
    "{d_model: 16, layers: 2, max_len: 12, pool: mean, attention: {plugin: mha, heads: 2}}";
const char* kAdamW = "{plugin: adamw, lr: 0.001, weight_decay: 0.01, decay: all}";
constexpr size_t kVocab = 7, kClasses = 3, kBatch = 3, kSeq = 10;

gf::Batch random_batch(uint64_t seed, size_t seq = kSeq) {
  gf::Rng rng(seed, "test.onednn");
  gf::Batch b;
  b.batch = kBatch, b.seq = seq;
  b.ids.resize(kBatch * seq);
  b.valid.assign(kBatch * seq, 1);
  b.labels.resize(kBatch);
  for (auto& id : b.ids) id = static_cast<int32_t>(rng.below(kVocab));
  for (auto& l : b.labels) l = static_cast<int32_t>(rng.below(kClasses));
  return b;
}

struct Setup {
  ConfigNode model_node, opt_node;
  gf::Model model;
  std::unique_ptr<gf_onednn::ModelPeer> peer;
  explicit Setup(const char* model_yaml = kModel, const char* opt_yaml = kAdamW)
      : model_node(ConfigNode::load_string(model_yaml)),
        opt_node(ConfigNode::load_string(opt_yaml)),
        model(model_node, kVocab, kClasses, gf_test::registry(), 5) {}
  void build(size_t threads = 2, size_t chunk_bytes = 0, size_t seq = kSeq) {
    peer = std::make_unique<gf_onednn::ModelPeer>(model_node, opt_node, gf_test::registry(), model,
                                                  kBatch, seq, threads, chunk_bytes);
  }
};

// growformer's gradients of every parameter on B at the products' precision in effect (the
// model's gradients are cleared after)
std::map<std::string, gf::Tensor> growformer_gradients(gf::Model& model, const gf::Batch& b) {
  auto params = model.named_parameters();
  for (auto& [n, p] : params) p.zero_grad();
  gf::Var loss = gf::ops::cross_entropy(model.forward(b, true, nullptr), b.labels);
  gf::backward(loss);
  std::map<std::string, gf::Tensor> out;
  for (auto& [n, p] : params) {
    out.emplace(n, p.grad().defined() ? p.grad().clone() : gf::Tensor(p.shape()));
    p.zero_grad();
  }
  return out;
}

// |a - b| / |b| over every gradient but the key biases' (zero in exact arithmetic: noise)
double distance(const std::map<std::string, gf::Tensor>& a,
                const std::map<std::string, gf::Tensor>& b) {
  double diff = 0, norm = 0;
  for (const auto& [name, t] : b) {
    if (name.find(".b_k") != std::string::npos) continue;
    for (size_t i = 0; i < t.size(); ++i) {
      diff += std::pow(static_cast<double>(a.at(name)[i]) - t[i], 2);
      norm += std::pow(static_cast<double>(t[i]), 2);
    }
  }
  return std::sqrt(diff / norm);
}

float* peer_param(gf_onednn::ModelPeer& peer, const std::string& name) {
  for (auto& p : peer.step().parameters())
    if (p.name == name) return p.value;
  FAIL("the peer has no parameter " << name);
  return nullptr;
}

}  // namespace

TEST_CASE("onednn peer: its copy of the model's parameters is exact, heads packed side by side") {
  Setup s;
  s.build();
  const auto values = s.peer->values();
  for (const auto& [name, p] : s.model.named_parameters()) {
    INFO(name);
    const gf::Tensor& v = values.at(name);
    REQUIRE(v.shape() == p.shape());
    CHECK(std::equal(v.data(), v.data() + v.size(), p.value().data()));
  }
  // head 1's W_Q is columns 8..15 of the layer's W_Q (16 x 16)
  const float* wq = peer_param(*s.peer, "layers.0.attn.w_q");
  const gf::Tensor& h1 = values.at("layers.0.attn.heads.1.w_q");
  CHECK(wq[3 * 16 + 8 + 5] == h1[3 * 8 + 5]);
}

TEST_CASE("onednn peer: the gate: loss, every gradient and AdamW's update agree to 1e-4") {
  // the attention in chunks of one head of one sample, of one sample (both heads), and of the
  // whole batch (the default at this size)
  struct Run {
    size_t threads, chunk_bytes, samples, heads;
  };
  const size_t pair = kSeq * kSeq * sizeof(float);
  for (const Run& run :
       {Run{1, 1, 1, 1}, Run{2, 2 * pair, 1, 2}, Run{2, 0, kBatch, 2}, Run{1, 0, kBatch, 2}}) {
    Setup s;
    s.build(run.threads, run.chunk_bytes);
    CHECK(s.peer->step().attention_chunk() == std::make_pair(run.samples, run.heads));
    const auto before = s.peer->values();
    const gf_onednn::GateResult r = gf_onednn::run_gate(s.model, gf_test::registry(), s.opt_node,
                                                        *s.peer, random_batch(11), 1e-3f);
    INFO("threads " << run.threads << ", chunk " << run.samples << " x " << run.heads << ": "
                    << r.summary());
    CHECK(r.passed);
    CHECK(r.loss_error <= 1e-4);
    CHECK(std::isfinite(r.loss_growformer));
    CHECK(r.loss_growformer > 0.5);  // 3 classes at random: about log 3
    REQUIRE(r.gradients.size() == s.model.named_parameters().size());
    REQUIRE(r.updates.size() == r.gradients.size());
    for (const auto& e : r.gradients) {
      INFO("gradient " << e.name);
      CHECK(e.error <= 1e-4);
    }
    for (const auto& e : r.updates) {
      INFO("update " << e.name);
      CHECK(e.error <= 1e-4);
    }
    // the model and the peer hold the parameters they held before the gate
    const auto after = s.peer->values();
    for (const auto& [name, p] : s.model.named_parameters()) {
      INFO(name);
      CHECK(std::equal(p.value().data(), p.value().data() + p.size(), before.at(name).data()));
      CHECK(std::equal(p.value().data(), p.value().data() + p.size(), after.at(name).data()));
    }
  }
}

TEST_CASE("onednn peer: a perturbed weight fails the gate") {
  struct Case {
    const char* param;
    size_t element;
    const char* changed;  // a gradient the perturbation must move
  };
  for (const Case& c :
       {Case{"layers.1.mlp.fc1.w", 5, "layers.1.mlp.fc1.w"},
        Case{"layers.0.attn.w_k", 17, "layers.0.attn.heads.0.w_q"}, Case{"embed", 3, "embed"}}) {
    Setup s;
    s.build();
    float* w = peer_param(*s.peer, c.param);
    w[c.element] += 0.01f * std::max(1.0f, std::fabs(w[c.element]));
    const gf_onednn::GateResult r = gf_onednn::run_gate(s.model, gf_test::registry(), s.opt_node,
                                                        *s.peer, random_batch(11), 1e-3f);
    INFO(c.param << ": " << r.summary());
    CHECK_FALSE(r.passed);
    CHECK(r.worst_gradient.error > 1e-4);
    for (const auto& e : r.gradients)
      if (e.name == c.changed) CHECK(e.error > 1e-4);
  }
}

TEST_CASE("onednn peer: training steps follow growformer's") {
  Setup s;
  s.build();
  auto opt = gf_test::registry().create_optimizer(s.opt_node);
  for (int step = 0; step < 5; ++step) {
    const gf::Batch b = random_batch(20 + step);
    auto params = s.model.named_parameters();
    for (auto& [n, p] : params) p.zero_grad();
    gf::Var loss = gf::ops::cross_entropy(s.model.forward(b, true, nullptr), b.labels);
    gf::backward(loss);
    opt->step(params, 1e-2f);
    const float peer_loss = s.peer->train_step(b, 1e-2f);
    INFO("step " << step);
    CHECK(std::fabs(peer_loss - loss.value()[0]) <= 1e-4 * std::fabs(loss.value()[0]));
  }
  // after five updates the parameters still agree (the peer's AdamW state followed), b_k left
  // out: its gradient is zero in exact arithmetic (the softmax ignores a shift of a row's
  // scores), so both sides update it by +-lr from float noise of unrelated signs, and it
  // changes no output
  const auto values = s.peer->values();
  double diff = 0, norm = 0;
  for (const auto& [name, p] : s.model.named_parameters())
    for (size_t i = 0; i < p.size() && name.find(".b_k") == std::string::npos; ++i) {
      diff += std::pow(static_cast<double>(values.at(name)[i]) - p.value()[i], 2);
      norm += std::pow(static_cast<double>(p.value()[i]), 2);
    }
  CHECK(std::sqrt(diff / norm) <= 1e-4);
}

TEST_CASE("onednn peer: bytes_needed is what a step allocates") {
  Setup s;
  s.build();
  CHECK(s.peer->step().bytes_allocated() ==
        gf_onednn::MhaStep::bytes_needed(s.peer->step().shape(), s.peer->step().threads()));
}

TEST_CASE("onednn peer: models and batches it does not compute are refused, naming why") {
  auto refused = [](const char* model, const char* opt) {
    return gf_test::error_of([&] { Setup(model, opt).build(); });
  };
  CHECK(
      refused(
          "{d_model: 16, layers: 1, max_len: 12, attention: {plugin: mha, heads: 2, causal: true}}",
          kAdamW)
          .find("causal") != std::string::npos);
  CHECK(refused(
            "{d_model: 16, layers: 1, max_len: 12, pool: cls, attention: {plugin: mha, heads: 2}}",
            kAdamW)
            .find("pool") != std::string::npos);
  CHECK(
      refused(
          "{d_model: 16, layers: 1, max_len: 12, dropout: 0.1, attention: {plugin: mha, heads: 2}}",
          kAdamW)
          .find("dropout") != std::string::npos);
  CHECK(refused("{d_model: 16, layers: 1, max_len: 12, attention: {plugin: mha, heads: 2, combine: "
                "mean}}",
                kAdamW)
            .find("combine must be sum") != std::string::npos);
  CHECK(
      refused(
          "{d_model: 16, layers: 1, max_len: 12, attention: {plugin: mha, heads: 2, head: {plugin: "
          "hybrid_conv}}}",
          kAdamW)
          .find("not hybrid_conv") != std::string::npos);
  CHECK(refused(kModel, "{plugin: sgd, lr: 0.1}").find("sgd") != std::string::npos);
  Setup s;
  s.build();
  gf::Batch padded = random_batch(3);
  padded.valid[4] = 0;
  CHECK_THROWS_WITH_AS(s.peer->forward_backward(padded), doctest::Contains("padded"),
                       gf::RuntimeError);
}

TEST_CASE("onednn peer: growformer bench --peer onednn runs both steps, gate first") {
  const std::string cmd = std::string(GF_BIN) + " bench " + GF_SOURCE_DIR +
                          "/configs/bench_mha.yaml --set threads=1 --batch 2 --seq 24 --steps 2 "
                          "--warmup 1 --peer onednn --json";
  const gf_test::Shell r = gf_test::run_shell(cmd);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto out = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  CHECK(out["onednn_gate"]["passed"].get<bool>());
  CHECK(out["onednn_gate"]["worst_gradient_error"].get<double>() <= 1e-4);
  CHECK(out["peer"] == "onednn");
  CHECK(out["onednn_threads"].get<size_t>() == 1);
  CHECK(out["onednn_steps_timed"].get<size_t>() == 2);
  CHECK(out["onednn_ms_per_step_median"].get<double>() > 0);
  CHECK(out["ratio_to_onednn"].get<double>() > 0);
  CHECK(out["onednn_primitives"].get<std::string>().find("matmul") != std::string::npos);
  CHECK(out.contains("ms_per_step_median"));  // the bench's own figures are still there
  // the final losses of the interleaved runs: both trained from the same weights and batches
  CHECK(std::fabs(out["onednn_final_loss"].get<double>() -
                  out["onednn_growformer_final_loss"].get<double>()) <=
        1e-3 * out["onednn_growformer_final_loss"].get<double>());
  const gf_test::Shell bad = gf_test::run_shell(std::string(GF_BIN) + " bench " + GF_SOURCE_DIR +
                                                "/configs/bench_mha.yaml --peer mkl");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("unknown peer") != std::string::npos);
}

TEST_CASE("onednn peer: bf16: the peer's products are oneDNN's bf16 matmuls, as growformer's") {
  if (!gf::kernels::bf16_available()) {
    MESSAGE("skipped: bf16 products cannot run here: " << gf::kernels::bf16_unavailable_reason());
    return;
  }
  // heads of d_k 16: the scores' scale, 1/4, is exact, so both steps round the same dS
  Setup s("{d_model: 32, layers: 2, max_len: 96, pool: mean, attention: {plugin: mha, heads: 2}}");
  const gf::Batch batch = random_batch(11, 96);
  const auto g32 = growformer_gradients(s.model, batch);
  gf::kernels::PrecisionScope bf16(gf::kernels::Precision::bf16);
  s.build(2, 0, 96);
  REQUIRE(s.peer->bf16());
  // oneDNN's bf16 kernels (brg:avx512_core_amx_bf16 or brg:avx512_core_bf16), not emulation
  INFO(s.peer->step().implementations());
  CHECK(s.peer->step().implementations().find("_bf16") != std::string::npos);
  const gf_onednn::GateResult r =
      gf_onednn::run_gate(s.model, gf_test::registry(), s.opt_node, *s.peer, batch, 1e-3f);
  INFO(r.summary());
  CHECK(r.passed);
  CHECK(r.bf16);
  CHECK(r.tolerance == gf_onednn::kGateToleranceBf16);
  CHECK(r.update_tolerance == gf_onednn::kGateTolerance);
  const auto g16 = growformer_gradients(s.model, batch);
  s.peer->forward_backward(batch);
  const auto peer = s.peer->gradients();
  const double to16 = distance(peer, g16), to32 = distance(peer, g32), gap = distance(g16, g32);
  MESSAGE("gradients, norm-wise: peer to growformer bf16 " << to16 << ", to growformer float32 "
                                                           << to32 << "; bf16 to float32 " << gap);
  // a peer with float32 products would be within float32 rounding (the float32 gate's 1e-4) of
  // growformer's float32 step: rounded products move it by about bf16's unit roundoff
  CHECK(to32 > 10 * gf_onednn::kGateTolerance);
  CHECK(to16 <= gf_onednn::kGateToleranceBf16);
  // nearer growformer's bf16 step than its float32 one (measured 3.1e-4 against 2.3e-3 on both
  // bf16 kernel sets)
  CHECK(to16 < 0.5 * to32);
  // every product of docs/NUMERICS.md's table in bf16, each layer's: the six projections and
  // their twelve gradients, and per attention chunk the scores and P V (forward) and dP, dV,
  // dQ, dK (backward); the classifier's three; the rest float32 (the column sums of the bias
  // and position gradients, the mean pooling's two). With float32 products the attention's
  // would not show in the gradients above: they are too small a part of them at this size.
  const auto [chunk_b, chunk_h] = s.peer->step().attention_chunk();
  const size_t chunks = kBatch / chunk_b * 2 / chunk_h, layers = 2;
  const auto [bf16_mm, f32_mm] = s.peer->step().matmul_counts();
  CHECK(bf16_mm == layers * (6 + 12 + 6 * chunks) + 3);
  // the attention in chunks of one head of one sample, on one thread: the same gate
  s.build(1, 1, 96);
  REQUIRE(s.peer->step().attention_chunk() == std::make_pair(size_t{1}, size_t{1}));
  const gf_onednn::GateResult one =
      gf_onednn::run_gate(s.model, gf_test::registry(), s.opt_node, *s.peer, batch, 1e-3f);
  INFO(one.summary());
  CHECK(one.passed);
  CHECK(s.peer->step().matmul_counts().first == layers * (6 + 12 + 6 * kBatch * 2) + 3);
  gf::kernels::PrecisionScope f32(gf::kernels::Precision::float32);
  s.build(2, 0, 96);
  CHECK(s.peer->step().matmul_counts().first == 0);
  CHECK(s.peer->step().matmul_counts().second == bf16_mm + f32_mm);
}

TEST_CASE("onednn peer: growformer bench --peer onednn --set precision=bf16 times bf16 steps") {
  if (!gf::kernels::bf16_available()) {
    MESSAGE("skipped: bf16 products cannot run here: " << gf::kernels::bf16_unavailable_reason());
    return;
  }
  const std::string cmd = std::string(GF_BIN) + " bench " + GF_SOURCE_DIR +
                          "/configs/bench_mha.yaml --set threads=1 --set precision=bf16 --batch 2 "
                          "--seq 24 --steps 2 --warmup 1 --peer onednn --json";
  const gf_test::Shell r = gf_test::run_shell(cmd);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto out = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  CHECK(out["precision"] == "bf16");
  CHECK(out["onednn_precision"] == "bf16");
  const auto& gate = out["onednn_gate"];
  CHECK(gate["passed"].get<bool>());
  CHECK(gate["tolerance"].get<double>() == gf_onednn::kGateToleranceBf16);
  CHECK(gate["update_tolerance"].get<double>() == gf_onednn::kGateTolerance);
  CHECK(gate["summary"].get<std::string>().find("bf16 products") != std::string::npos);
  CHECK(out["onednn_primitives"].get<std::string>().find("_bf16") != std::string::npos);
  CHECK(out["onednn_primitives"].get<std::string>().find("reorder") != std::string::npos);
  CHECK(out["onednn_ms_per_step_median"].get<double>() > 0);
  CHECK(std::fabs(out["onednn_final_loss"].get<double>() -
                  out["onednn_growformer_final_loss"].get<double>()) <=
        gf_onednn::kGateToleranceBf16 * out["onednn_growformer_final_loss"].get<double>());
}
