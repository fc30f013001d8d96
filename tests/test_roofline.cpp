// The roofline's count of a training step's work (Model::step_work: the model's own,
// kernels::model_work, and each block's, AttentionBlock::step_work) against a hand computation
// at tiny mha and hkt shapes, its products against the kernels' own flop counter over a real
// forward and backward pass, and the roofline's arithmetic. No timing is asserted.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "growformer/autograd.hpp"
#include "growformer/blas.hpp"
#include "growformer/kernels.hpp"
#include "growformer/model.hpp"
#include "growformer/ops.hpp"
#include "testing.hpp"

using namespace gf;

namespace {

// A model of the `model:` tree YAML, vocabulary 7, 3 classes.
Model make_model(const std::string& yaml) {
  return Model(ConfigNode::load_string(yaml), 7, 3, gf_test::registry(), 5);
}

// B 2, T 3, d 4, LAYERS layers of 2 heads of d_k = d_v = 2, hidden 8, 3 classes
Model tiny_mha(size_t layers, bool final_norm) {
  return make_model("{d_model: 4, layers: " + std::to_string(layers) +
                    ", mlp_ratio: 2, max_len: 3, pool: mean, final_norm: " +
                    (final_norm ? "true" : "false") + ", attention: {plugin: mha, heads: 2}}");
}

// The step's work, which must be counted.
kernels::StepWork counted(const WorkCount& c) {
  INFO(c.why_not);
  REQUIRE(c.work.has_value());
  return *c.work;
}

// 2 m n k summed over products given as (m, n, k)
double flops(const std::vector<std::tuple<double, double, double>>& products) {
  double f = 0;
  for (auto [m, n, k] : products) f += 2 * m * n * k;
  return f;
}

// The products one forward and backward pass of MODEL runs at BATCH x SEQ (gf::matmul_flops).
double products_run(Model& model, size_t batch, size_t seq) {
  Batch b;
  b.batch = batch, b.seq = seq;
  b.ids.resize(batch * seq);
  b.valid.assign(batch * seq, 1);
  for (size_t i = 0; i < b.ids.size(); ++i) b.ids[i] = static_cast<int32_t>(i % 7);
  for (size_t i = 0; i < batch; ++i) b.labels.push_back(static_cast<int32_t>(i % 3));
  const uint64_t before = matmul_flops();
  Var loss = ops::cross_entropy(model.forward(b, true, nullptr), b.labels);
  backward(loss);
  return static_cast<double>(matmul_flops() - before);
}

}  // namespace

TEST_CASE("roofline: the tiny mha step's work counted by hand") {
  Model model = tiny_mha(1, true);
  // embed 28, pos 12, two layer norms 16, heads 2 x (3 x 10 + W_O 8), b_o 4, fc1 40, fc2 36,
  // final norm 8, classifier 15
  REQUIRE(model.num_parameters() == 235);
  const kernels::StepWork w = counted(model.step_work(2, 3));
  // every product of the step, one by one: n = 6 rows, Q K V 12 columns, per (sample, head) a
  // 3 x 3 score matrix
  const double n = 6;
  std::vector<std::tuple<double, double, double>> p;
  for (auto [in, out] : {std::pair<double, double>{4, 12}, {4, 4}, {4, 8}, {8, 4}}) {
    p.push_back({n, out, in});  // forward
    p.push_back({n, in, out});  // dX = dY W^T
    p.push_back({in, out, n});  // dW = X^T dY
  }
  for (int sh = 0; sh < 4; ++sh) {  // 2 samples x 2 heads
    p.push_back({3, 3, 2});         // scores Q K^T
    p.push_back({3, 2, 3});         // P V
    p.push_back({3, 3, 2});         // the scores again in the backward pass
    p.push_back({3, 2, 3});         // dV = P^T dO
    p.push_back({3, 3, 2});         // dP = dO V^T
    p.push_back({3, 2, 3});         // dQ = dS K
    p.push_back({3, 2, 3});         // dK = dS^T Q
  }
  p.push_back({2, 3, 4});  // classifier forward, dX, dW
  p.push_back({2, 4, 3});
  p.push_back({4, 3, 2});
  CHECK(flops(p) == 5760);
  CHECK(w.product_flops == 5760);
  CHECK(w.exp_elements == 72);  // 36 scores, forward and recomputed
  CHECK(w.gelu_elements == 48);
  CHECK(w.gelu_grad_elements == 48);
  CHECK(w.max_elements == 36);
  CHECK(w.softmax_grad_elements == 36);
  CHECK(w.add_elements == 0);
  // floats: the layer's passes 40 n d + 19 n qw + 16 n vw + 11 n F = 960 + 456 + 384 + 528;
  // embedding, positions, final norm and pool 6 n d forward and 9 n d backward; 11 a parameter
  CHECK(w.memory_bytes == 4.0 * (2328 + 360 + 11 * 235));
  // the block's share: 6 n d + 19 n qw + 16 n vw
  const kernels::StepWork blk = counted(model.blocks()[0]->step_work(2, 3));
  CHECK(blk.memory_bytes == 4.0 * (144 + 456 + 384));
  CHECK(blk.product_flops ==
        5760 - flops({{2, 3, 4}, {2, 4, 3}, {4, 3, 2}}) - 3 * flops({{6, 8, 4}, {6, 4, 8}}));
  // without the final norm: 2 + 6 floats fewer an element of n x d, and 8 parameters fewer
  Model plain = tiny_mha(1, false);
  CHECK(counted(plain.step_work(2, 3)).memory_bytes == 4.0 * (2328 + 168 + 11 * 227));
  // twice the layers: twice every layer term, the once-a-step terms once
  Model two = tiny_mha(2, true);
  const kernels::StepWork w2 = counted(two.step_work(2, 3));
  CHECK(w2.product_flops == 2 * (5760 - 144) + 144);
  CHECK(w2.exp_elements == 144);
  CHECK(w2.memory_bytes == 4.0 * (2 * 2328 + 360 + 11 * two.num_parameters()));
}

TEST_CASE("roofline: the tiny hkt block's work counted by hand") {
  // B 2, T 4, d 4, 2 hybrid heads of d_k = d_v = 2, 3 levels of 4, 2 and 1 rows (stride 2)
  const std::string attn =
      "{plugin: hkt, heads: 2, levels: 3, stride: 2, head: {plugin: hybrid_conv}";
  Model model = make_model("{d_model: 4, layers: 1, max_len: 4, attention: " + attn + "}}");
  const kernels::StepWork w = counted(model.blocks()[0]->step_work(2, 4));
  // exps: P_0 = B H T^2 = 64 level-0 scores, forward and recomputed; lambda's 3 in each
  // head's call for each sample (12) and the block's mean lambda (3); each head's gate (2)
  CHECK(w.exp_elements == 128 + 12 + 3 + 2);
  CHECK(w.max_elements == 64);
  CHECK(w.softmax_grad_elements == 64);
  // adds: C_1 = S_1 + up(C_2) forward and backward, dS_1 folded into dS_2 (3 x B H T_1^2 = 48);
  // dS folded into dS_1 (64); d lambda's dot and dq's axpy, 2 B H d_k T_l (16 x (4 + 2 + 1))
  CHECK(w.add_elements == 48 + 64 + 112);
  // floats, n_l = 8, 4, 2 rows; d 4, qw = vw = 4
  const double projections = (32 + 96) + (384 + 64) + (16 + 32) + (128 + 32) + (8 + 16) + (64 + 16);
  const double output_map = (32 + 32) + (64 + 64);
  // levels 1 and 2: the convolution (rows of level l - 1 in, of level l out) forward and twice
  // that backward, the pointwise map 2 n_l d forward and 4 n_l d backward
  const double levels = (32 + 16) + (64 + 32) + 32 + 64 + (16 + 8) + (32 + 16) + 16 + 32;
  const double fused = 8 * 8 * 4 + 9 * 4 * (8 + 4 + 2);  // v, o and backward; per level
  const double hybrid = 2 * 16 * 8 * 2;                  // 16 n d_v a head
  CHECK(w.memory_bytes == 4.0 * (projections + output_map + levels + fused + hybrid));
  // input fusion: the mean lambda of every sample (B L = 6 exps, not 3), the pool's two passes
  // of n d and its map's products 3 x 2 B d L
  Model input =
      make_model("{d_model: 4, layers: 1, max_len: 4, attention: " + attn + ", fusion: input}}");
  const kernels::StepWork wi = counted(input.blocks()[0]->step_work(2, 4));
  CHECK(wi.exp_elements == w.exp_elements + 3);
  CHECK(wi.memory_bytes == w.memory_bytes + 4.0 * 64);
  CHECK(wi.product_flops == w.product_flops + 3 * 2 * 2 * 4 * 3);
}

TEST_CASE("roofline: the counted products are the products a real step runs") {
  // the kernels count 2 m n k for every product they run (gf::matmul_flops): one forward and
  // backward pass must run exactly what Model::step_work counts
  const std::vector<std::string> attention = {
      "{plugin: mha, heads: 2}",
      "{plugin: mha, heads: 4}",
      "{plugin: hkt, heads: 2, levels: 3, head: {plugin: hybrid_conv, kernel: 3}}",
      "{plugin: hkt, heads: 4, levels: 3, fusion: input, head: {plugin: hybrid_conv}}",
      "{plugin: hkt, heads: 1, levels: 2, down_kernel: 2}",
      "{plugin: hkt, heads: 2, levels: 4, d_k: 3, d_v: 5, share_qk: true}",
      "{plugin: hkt, heads: 2, levels: 1}"};
  const size_t keep_rows = kernels::attention_block_rows();
  for (const std::string& a : attention)
    for (size_t layers : {size_t{1}, size_t{2}})
      for (size_t seq : {size_t{10}, size_t{11}})
        for (size_t rows : {keep_rows, size_t{4}}) {  // one tile, and many
          CAPTURE(a);
          CAPTURE(layers);
          CAPTURE(seq);
          CAPTURE(rows);
          kernels::set_attention_block_rows(rows);
          Model model = make_model("{d_model: 16, layers: " + std::to_string(layers) +
                                   ", max_len: 12, pool: mean, attention: " + a + "}");
          const kernels::StepWork w = counted(model.step_work(3, seq));
          CHECK(products_run(model, 3, seq) == w.product_flops);
        }
  kernels::set_attention_block_rows(keep_rows);
}

TEST_CASE("roofline: a step it cannot count says why") {
  auto why = [](const std::string& yaml) {
    Model m = make_model(yaml);
    const WorkCount c = m.step_work(2, 4);
    CHECK_FALSE(c.work.has_value());
    return c.why_not;
  };
  CHECK(why("{d_model: 8, max_len: 8, pool: cls, attention: {plugin: mha, heads: 2}}")
            .find("pool: cls") != std::string::npos);
  CHECK(why("{d_model: 8, max_len: 8, attention: {plugin: mha, heads: 2, causal: true}}") ==
        "layers.0.attn: mha: causal attention is not counted");
  CHECK(why("{d_model: 8, max_len: 8, attention: {plugin: mha, heads: 2, combine: mean}}")
            .find("combine: mean") != std::string::npos);
  CHECK(why("{d_model: 8, max_len: 8, attention: {plugin: hkt, heads: 2, stride: 3}}")
            .find("stride 2 only") != std::string::npos);
  CHECK(why("{d_model: 8, max_len: 8, attention: {plugin: hkt, heads: 2, causal: true}}")
            .find("causal") != std::string::npos);
}

TEST_CASE("roofline: each kind of work at its rate, one after another") {
  kernels::StepWork w;
  w.product_flops = 2e9;
  w.exp_elements = 3e6, w.gelu_elements = 1e6, w.gelu_grad_elements = 2e6;
  w.max_elements = 4e6, w.softmax_grad_elements = 6e6, w.add_elements = 5e6;
  w.memory_bytes = 5e8;
  kernels::ElementRates r;
  r.exp = 1e9, r.gelu = 1e9, r.gelu_grad = 2e9, r.max = 8e9, r.softmax_grad = 3e9, r.add = 1e10;
  r.memory_bytes = 1e10;
  const kernels::Roofline rf = kernels::roofline(w, r, 100.0);
  CHECK(rf.products_s == doctest::Approx(0.02));
  CHECK(rf.exp_gelu_s == doctest::Approx(0.003 + 0.001 + 0.001));
  CHECK(rf.in_cache_s == doctest::Approx(0.0005 + 0.002 + 0.0005));
  CHECK(rf.memory_s == doctest::Approx(0.05));
  CHECK(rf.total_s() == doctest::Approx(0.078));
  // sums of counts add kind by kind
  kernels::StepWork twice = w;
  twice += w;
  CHECK(twice.add_elements == 1e7);
  CHECK(twice.memory_bytes == 1e9);
  // the measured rates are rates: positive and finite (their size is not asserted)
  const kernels::ElementRates m = kernels::element_rates(1, 0.03);
  for (double v : {m.exp, m.gelu, m.gelu_grad, m.max, m.softmax_grad, m.add, m.memory_bytes}) {
    CHECK(v > 0);
    CHECK(std::isfinite(v));
  }
}
