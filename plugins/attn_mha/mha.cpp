// attention `mha` (standard multi-head scaled dot-product attention) and head
// `dot_product` (per-level query/key projections and a value projection).
#include <growformer/fields.hpp>
#include <growformer/multihead.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>
#include <growformer/projections.hpp>

#include <cmath>
#include <string>

namespace {

using namespace gf;

class DotProductHead : public Head {
 public:
  DotProductHead(const Options&, const HeadBuild& b) : Head(b.shape), proj_(*this, b.shape, *b.rng) {}

  Var forward(const HeadInput& in) override {
    QkvProjections::Projected p = proj_.project(in);
    return in.attend(p.q, p.k, p.v);
  }

  const Var* w_q(size_t level) const override { return proj_.w_q(level); }
  const Var* w_k(size_t level) const override { return proj_.w_k(level); }
  const Var* w_v() const override { return proj_.w_v(); }
  const QkvProjections* projections() const override { return &proj_; }
  void initialize(const HeadInit& init, Rng& rng) override { proj_.initialize(init, rng); }

 private:
  QkvProjections proj_;
};

/// The options of `mha`, each declared once: the multi-head ones, then `causal`.
struct MhaSettings {
  MultiHeadSettings common;
  bool causal = false;
  static const OptionTable<MhaSettings>& table() {
    using S = MhaSettings;
    static const auto t =
        OptionTable<S>()
            .include(MultiHeadSettings::table(), &S::common)
            .add("causal", &S::causal, "false", "mask future positions (decoder-style)");
    return t;
  }
};

class MhaBlock : public MultiHeadBlock {
 public:
  MhaBlock(const Options& opts, const AttentionBuild& b)
      : MhaBlock(opts, b, MhaSettings::table().read(opts)) {}
  MhaBlock(const Options& opts, const AttentionBuild& b, const MhaSettings& s)
      : MultiHeadBlock(opts, s.common, b, 1, false), causal_(s.causal) {}

 protected:
  Var attend(const std::vector<Var>& q, const std::vector<Var>& k, const Var& v,
             const ForwardContext& ctx) override {
    ops::AttentionMask m;
    m.key_valid = ctx.key_valid;
    m.causal = causal_;
    float scale = 1.0f / std::sqrt(static_cast<float>(q[0].dim(2)));
    return ops::attention(q[0], k[0], v, scale, m);
  }
  std::string block_name() const override { return "mha"; }
  bool causal() const override { return causal_; }

 private:
  bool causal_;
};

void register_components(Registry& r) {
  r.add_attention(
      {"mha", "standard multi-head scaled dot-product attention", MhaSettings::table().specs()},
      [](const Options& o, const AttentionBuild& b) { return std::make_unique<MhaBlock>(o, b); });
  r.add_head({"dot_product", "query/key projections per level and a value projection", {}},
             [](const Options& o, const HeadBuild& b) {
               return std::make_unique<DotProductHead>(o, b);
             });
}

}  // namespace

GROWFORMER_PLUGIN("attn_mha", "0.1.0", register_components)
