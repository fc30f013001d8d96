// One contract run over every attention block x head plugin pair the registry
// knows: builds from config, rejects an unknown key, passes a finite-difference
// gradient check, equals its samples run one by one, and is deterministic.
#include <cmath>

#include "growformer/attention.hpp"
#include "growformer/multihead.hpp"
#include "growformer/ops.hpp"
#include "growformer/projections.hpp"
#include "growformer/registry.hpp"
#include "testing.hpp"

using namespace gf;

namespace {
std::shared_ptr<AttentionBlock> build(const std::string& attn, const std::string& head,
                                      const std::string& extra = "") {
  static std::vector<std::unique_ptr<Rng>> keep;
  keep.push_back(std::make_unique<Rng>(11, "contract"));
  std::string yaml =
      "plugin: " + attn + "\nheads: 2\nd_k: 3\n" + extra + "head: {plugin: " + head + "}\n";
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

namespace {
// A block plugin as an out-of-tree author writes one: its scoring rule and its name, nothing
// about heads. It notes the heads it finds in its own constructor's body.
class BareBlock : public MultiHeadBlock {
 public:
  BareBlock(const Options& o, const AttentionBuild& b)
      : MultiHeadBlock(o, b, 1, false), heads_in_constructor(num_heads()) {}
  const size_t heads_in_constructor;

 protected:
  Var attend(const std::vector<Var>& q, const std::vector<Var>& k, const Var& v,
             const ForwardContext& ctx) override {
    ops::AttentionMask m;
    m.key_valid = ctx.key_valid;
    return ops::attention(q[0], k[0], v, 0.5f, m);
  }
  std::string block_name() const override { return "bare"; }
};

class BareHead : public Head {
 public:
  explicit BareHead(const HeadBuild& b) : Head(b.shape), proj_(*this, b.shape, *b.rng) {}
  Var forward(const HeadInput& in) override {
    QkvProjections::Projected p = proj_.project(in);
    return in.attend(p.q, p.k, p.v);
  }

 private:
  QkvProjections proj_;
};

// A block that says its heads can be edited but was built without any.
class HeadlessBlock : public AttentionBlock {
 public:
  Var forward(const Var& x, const ForwardContext&) override { return x; }
  bool can_edit_heads() const override { return true; }
  std::string describe() const override { return "headless"; }
};

void add_bare_components(Registry& r) {
  r.add_head({"bare_head", "test head", {}},
             [](const Options&, const HeadBuild& b) { return std::make_unique<BareHead>(b); });
  r.add_attention(
      {"bare", "test block", MultiHeadBlock::common_options()},
      [](const Options& o, const AttentionBuild& b) { return std::make_unique<BareBlock>(o, b); });
  r.add_attention({"headless", "test block", {}}, [](const Options&, const AttentionBuild&) {
    return std::make_unique<HeadlessBlock>();
  });
}
}  // namespace

TEST_CASE(
    "contract: a block built through the factory has its starting heads without calling anything") {
  Registry r;
  add_bare_components(r);
  Rng rng(5, "bare");
  AttentionBuild b{8, 0, &r, &rng};
  auto blk = r.create_attention(
      ConfigNode::load_string("plugin: bare\nheads: 3\nd_k: 2\nhead: {plugin: bare_head}\n"), b);
  REQUIRE(blk->num_heads() == 3);
  std::vector<int> ids;
  for (auto& h : blk->heads()) ids.push_back(h.id);
  CHECK(ids == std::vector<int>{0, 1, 2});
  // already in the derived constructor's body: no block exists without its heads
  CHECK(dynamic_cast<BareBlock&>(*blk).heads_in_constructor == 3);
  CHECK(blk->structure()->ids() == ids);
  size_t w_o = 0;
  for (auto& [n, v] : blk->named_parameters())
    w_o += n.size() > 4 && n.substr(n.size() - 4) == ".w_o";
  CHECK(w_o == 3);
  // the heads work: one forward
  Var y = blk->forward(constant(gf_test::randn({1, 4, 8}, 2)), ForwardContext{});
  CHECK(y.dim(2) == 8);
  clear_tape();
  // a block that can edit heads and has none is refused by the factory, naming the plugin
  CHECK_THROWS_WITH_AS(
      r.create_attention(ConfigNode::load_string("plugin: headless\n", "h.yaml"), b),
      doctest::Contains("creating attention `headless` at h.yaml:1:1: the block was "
                        "built without heads"),
      RuntimeError);
}
