// The roofline's count of a training step's work (kernels::step_work) against a hand
// computation at a tiny shape, its products against the kernels' own flop counter over a real
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

// B 2, T 3, d 4, one layer of 2 heads of d_k = d_v = 2, hidden 8, 3 classes, 100 parameters
kernels::StepShape tiny(bool final_norm) {
  kernels::StepShape s;
  s.batch = 2, s.seq = 3, s.d_model = 4, s.layers = 1, s.heads = 2, s.d_k = 2, s.d_v = 2;
  s.hidden = 8, s.classes = 3, s.params = 100, s.final_norm = final_norm;
  return s;
}

// 2 m n k summed over products given as (m, n, k)
double flops(const std::vector<std::tuple<double, double, double>>& products) {
  double f = 0;
  for (auto [m, n, k] : products) f += 2 * m * n * k;
  return f;
}

}  // namespace

TEST_CASE("roofline: the tiny step's work counted by hand") {
  const kernels::StepWork w = kernels::step_work(tiny(true));
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
  // floats: the layer's passes 40 n d + 19 n qw + 16 n vw + 11 n F = 960 + 456 + 384 + 528;
  // embedding, positions, final norm and pool 6 n d forward and 9 n d backward; 11 a parameter
  CHECK(w.memory_bytes == 4.0 * (2328 + 360 + 1100));
  // without the final norm: 2 + 6 floats fewer an element of n x d
  CHECK(kernels::step_work(tiny(false)).memory_bytes == 4.0 * (2328 + 168 + 1100));
  // twice the layers: twice every layer term, the once-a-step terms once
  kernels::StepShape two = tiny(true);
  two.layers = 2;
  const kernels::StepWork w2 = kernels::step_work(two);
  CHECK(w2.product_flops == 2 * (5760 - 144) + 144);
  CHECK(w2.exp_elements == 144);
  CHECK(w2.memory_bytes == 4.0 * (2 * 2328 + 360 + 1100));
}

TEST_CASE("roofline: the counted products are the products a real step runs") {
  // the kernels count 2 m n k for every product they run (gf::matmul_flops): one forward and
  // backward pass of an mha model must run exactly what step_work counts
  for (auto [heads, layers] : {std::pair<size_t, size_t>{2, 1}, {4, 2}}) {
    CAPTURE(heads);
    const std::string yaml = "{d_model: 16, layers: " + std::to_string(layers) +
                             ", max_len: 12, pool: mean, attention: {plugin: mha, heads: " +
                             std::to_string(heads) + "}}";
    const ConfigNode node = ConfigNode::load_string(yaml);
    Model model(node, 7, 3, gf_test::registry(), 5);
    kernels::StepShape s;
    s.batch = 3, s.seq = 10, s.d_model = 16, s.layers = layers, s.classes = 3;
    s.params = model.num_parameters();
    for (const auto& [name, p] : model.named_parameters()) {
      if (name == "layers.0.mlp.fc1.w") s.hidden = p.dim(1);
      if (name.rfind("layers.0.attn.heads.", 0) == 0 && name.size() > 4 &&
          name.compare(name.size() - 4, 4, ".w_q") == 0)
        s.d_k = p.dim(1), ++s.heads;
      if (name.rfind("layers.0.attn.heads.", 0) == 0 && name.size() > 4 &&
          name.compare(name.size() - 4, 4, ".w_v") == 0)
        s.d_v = p.dim(1);
    }
    REQUIRE(s.heads == heads);
    REQUIRE(s.hidden > 0);
    Batch b;
    b.batch = 3, b.seq = 10;
    b.ids.resize(30);
    b.valid.assign(30, 1);
    for (size_t i = 0; i < 30; ++i) b.ids[i] = static_cast<int32_t>(i % 7);
    b.labels = {0, 1, 2};
    const uint64_t before = matmul_flops();
    Var loss = ops::cross_entropy(model.forward(b, true, nullptr), b.labels);
    backward(loss);
    const double ran = static_cast<double>(matmul_flops() - before);
    CHECK(ran == kernels::step_work(s).product_flops);
  }
}

TEST_CASE("roofline: each kind of work at its rate, one after another") {
  kernels::StepWork w;
  w.product_flops = 2e9;
  w.exp_elements = 3e6, w.gelu_elements = 1e6, w.gelu_grad_elements = 2e6;
  w.max_elements = 4e6, w.softmax_grad_elements = 6e6;
  w.memory_bytes = 5e8;
  kernels::ElementRates r;
  r.exp = 1e9, r.gelu = 1e9, r.gelu_grad = 2e9, r.max = 8e9, r.softmax_grad = 3e9;
  r.memory_bytes = 1e10;
  const kernels::Roofline rf = kernels::roofline(w, r, 100.0);
  CHECK(rf.products_s == doctest::Approx(0.02));
  CHECK(rf.exp_gelu_s == doctest::Approx(0.003 + 0.001 + 0.001));
  CHECK(rf.in_cache_s == doctest::Approx(0.0005 + 0.002));
  CHECK(rf.memory_s == doctest::Approx(0.05));
  CHECK(rf.total_s() == doctest::Approx(0.0775));
  // the measured rates are rates: positive and finite (their size is not asserted)
  const kernels::ElementRates m = kernels::element_rates(1, 0.03);
  for (double v : {m.exp, m.gelu, m.gelu_grad, m.max, m.softmax_grad, m.memory_bytes}) {
    CHECK(v > 0);
    CHECK(std::isfinite(v));
  }
}
