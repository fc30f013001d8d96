// One contract run over every attention block x head plugin pair the registry
// knows: builds from config, rejects an unknown key, passes a finite-difference
// gradient check, equals its samples run one by one, and is deterministic.
#include <cmath>

#include "growformer/attention.hpp"
#include "growformer/multihead.hpp"
#include "testing.hpp"

using namespace gf;

namespace {
std::shared_ptr<AttentionBlock> build(const std::string& attn, const std::string& head,
                                      const std::string& extra = "") {
  static std::vector<std::unique_ptr<Rng>> keep;
  keep.push_back(std::make_unique<Rng>(11, "contract"));
  std::string yaml = "plugin: " + attn + "\nheads: 2\nd_k: 3\n" + extra + "head: {plugin: " +
                     head + "}\n";
  AttentionBuild b{6, 0, &gf_test::registry(), keep.back().get()};
  return gf_test::registry().create_attention(ConfigNode::load_string(yaml, "contract.yaml"), b);
}
}  // namespace

TEST_CASE("contract: every attention block with every head plugin") {
  Registry& r = gf_test::registry();
  std::vector<std::string> blocks, heads;
  for (auto& c : r.components()) {
    if (c.kind == Kind::Attention) blocks.push_back(c.spec.name);
    if (c.kind == Kind::Head) heads.push_back(c.spec.name);
  }
  REQUIRE(!blocks.empty());
  REQUIRE(!heads.empty());
  for (auto& a : blocks)
    for (auto& h : heads) {
      INFO("attention " << a << " head " << h);
      auto blk = build(a, h);
      REQUIRE(blk->num_heads() == 2);
      CHECK_THROWS_AS(build(a, h, "no_such_key: 1\n"), ConfigError);

      // T = 7 is not a multiple of any stride; padding in the second sample
      Tensor x = gf_test::randn({2, 7, 6}, 5);
      std::vector<uint8_t> valid{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
      ForwardContext ctx;
      ctx.key_valid = &valid;
      gf_test::check_gradients(
          [&](const std::vector<Var>& v) { return gf_test::weighted_sum(blk->forward(v[0], ctx)); },
          {x}, 1e-2, 3e-2, 24);

      // batch = samples one by one (rows of real tokens only)
      Var y = blk->forward(constant(x), ctx);
      size_t lens[2] = {7, 4};
      for (size_t b = 0; b < 2; ++b) {
        Tensor xs({1, lens[b], 6});
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = x[b * 42 + i];
        Var ys = blk->forward(constant(xs), ForwardContext{});
        for (size_t i = 0; i < ys.size(); ++i)
          REQUIRE(ys.value()[i] == doctest::Approx(y.value()[b * 42 + i]).epsilon(1e-4));
      }

      // determinism: the same seed builds the same weights and the same outputs
      auto again = build(a, h);
      Var y2 = again->forward(constant(x), ctx);
      for (size_t i = 0; i < y.size(); ++i) REQUIRE(y.value()[i] == y2.value()[i]);
      clear_tape();
    }
}

TEST_CASE("contract: a multi-head block declares the common options once, as the core's table") {
  Registry& r = gf_test::registry();
  const OptionSpecs common = MultiHeadBlock::common_options();
  size_t multihead = 0;
  for (auto& c : r.components()) {
    if (c.kind != Kind::Attention) continue;
    INFO("attention " << c.spec.name);
    auto blk = build(c.spec.name, "dot_product");
    if (!dynamic_cast<MultiHeadBlock*>(blk.get())) continue;
    ++multihead;
    // the block's options begin with the common ones, exactly as MultiHeadSettings declares them
    REQUIRE(c.spec.options.size() > common.size());
    for (size_t i = 0; i < common.size(); ++i) {
      const OptionSpec &a = c.spec.options[i], &b = common[i];
      CHECK(a.name == b.name);
      CHECK(a.type == b.type);
      CHECK(a.default_value == b.default_value);
      CHECK(a.doc == b.doc);
      CHECK(a.min == b.min);
      CHECK(a.max == b.max);
      CHECK(a.choices == b.choices);
    }
    // and read them: a d_model the heads do not divide is refused, naming `heads`
    AttentionBuild bad{7, 0, &r, nullptr};
    const std::string e = gf_test::error_of([&] {
      r.create_attention(ConfigNode::load_string("plugin: " + c.spec.name + "\nheads: 2\n"), bad);
    });
    CHECK(e.find("`heads`") != std::string::npos);
    CHECK(e.find("not divisible by 2 heads") != std::string::npos);
  }
  CHECK(multihead >= 2);  // mha and hkt
}
