// head `temperature_dot`: a dot-product head whose scores are sharpened or
// flattened by one learned temperature per head (q scaled by t before scoring).
// A complete example of an out-of-tree head plugin: options declared once (a
// settings struct and its option table), parameters with stable names, a
// forward built from core ops (gradients come for free), and the entry point.
#include <growformer/fields.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>

#include <cmath>

namespace {

using namespace gf;

/// The head's options, each declared once: one entry names the option, the member it is read
/// into (whose type gives the option's type), the default, a one-line help and the range. The
/// registry checks a config against table().specs(); table().read() fills the struct.
struct Settings {
  double initial_temperature = 1.0;
  static const OptionTable<Settings>& table() {
    static const auto t =
        OptionTable<Settings>().add("initial_temperature", &Settings::initial_temperature, "1.0",
                                    "starting temperature", 0.01, 100);
    return t;
  }
};

class TemperatureDot : public Head {
 public:
  TemperatureDot(const Settings& s, const HeadBuild& b) : Head(b.shape) {
    size_t d = shape_.d_model;
    float bound = 1.0f / std::sqrt(static_cast<float>(d));
    Tensor wq({d, shape_.d_k}), wk({d, shape_.d_k}), wv({d, shape_.d_v});
    b.rng->fill_uniform(wq, -bound, bound);
    b.rng->fill_uniform(wk, -bound, bound);
    b.rng->fill_uniform(wv, -bound, bound);
    w_q_ = register_parameter("w_q", wq);
    w_k_ = register_parameter("w_k", wk);
    w_v_ = register_parameter("w_v", wv);
    t_ = register_parameter("temperature", Tensor({1}, static_cast<float>(s.initial_temperature)));
  }

  Var forward(const HeadInput& in) override {
    // every level of the block (one for mha, several for hkt) gets the same projections
    std::vector<Var> q, k;
    for (const Var& x : in.levels) {
      q.push_back(ops::mul(ops::linear(x, w_q_), t_));
      k.push_back(ops::linear(x, w_k_));
    }
    return in.attend(q, k, ops::linear(in.levels[0], w_v_));
  }
  const Var* w_q(size_t) const override { return &w_q_; }
  const Var* w_k(size_t) const override { return &w_k_; }
  const Var* w_v() const override { return &w_v_; }
  std::map<std::string, double> diagnostics() const override {
    return {{"temperature", t_.value()[0]}};
  }

 private:
  Var w_q_, w_k_, w_v_, t_;
};

void register_components(Registry& r) {
  r.add_head(
      {"temperature_dot", "dot-product head with a learned score temperature (example plugin)",
       Settings::table().specs()},
      [](const Options& o, const HeadBuild& b) {
        return std::make_unique<TemperatureDot>(Settings::table().read(o), b);
      });
}

}  // namespace

GROWFORMER_PLUGIN("temperature_dot", "1.0.0", register_components)
