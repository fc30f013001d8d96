// INCRT's bidirectional gate around any inner head (`incrt_gate`):
//   G_h = I + g+ u+ u+^T - g- u- u-^T, applied to the head's input X G_h
// before the inner head's projections. u+ / u- track the dominant / minor
// eigenvectors of the head's own A_h = sym(C M_a,h) (Oja / MCA EXIN), updated
// during training forwards from the detached input (no gradient flows through
// the trackers). g+ and g- are fixed or learned (sigmoid of a parameter). The
// trackers are saved with the block's structure (save_state), so a checkpoint
// evaluates with the gate the model was trained with. What an update measures and how the
// trackers step are the INCRT library's (ProbeStats, TrackerSettings), as in the growth policy.
#include <growformer/attention.hpp>
#include <growformer/ops.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/incrt/math.hpp>
#include <growformer/incrt/stats.hpp>

namespace {

using gf::incrt::Vec;

/// The gate's options, each declared once (`table()`): the wrapped head first, then the gate's
/// own; the tracker options are the INCRT library's, shared with the growth policy (with 20
/// steps an update here).
struct GateSettings {
  gf::ConfigNode inner;  // the wrapped head's plugin and its options
  double g_plus = 0.5, g_minus = 0.5;
  bool learn_gates = false;
  size_t update_every = 5;
  gf::incrt::TrackerSettings tracker;
  bool first_sequence = false;  // C of sequence 0 instead of every valid token

  static const gf::OptionTable<GateSettings>& table() {
    using S = GateSettings;
    static const auto t =
        gf::OptionTable<S>()
            .add("inner", &S::inner, "{plugin: dot_product}", "the wrapped head")
            .add("g_plus", &S::g_plus, "0.5",
                 "gain on the dominant direction u+ (initial if learned)", 0.0, 1.0)
            .add("g_minus", &S::g_minus, "0.5",
                 "suppression of the minor direction u- (initial if learned)", 0.0, 1.0)
            .add("learn_gates", &S::learn_gates, "false",
                 "learn g+ and g- as sigmoids of parameters")
            .add("update_every", &S::update_every, "5",
                 "update the trackers every N training forwards (0 = never)", 0, 1e9)
            .include(gf::incrt::TrackerSettings::table("20", "tracker steps per update"),
                     &S::tracker)
            .choice("probe", &S::first_sequence, "batch", "tokens for C: first_sequence or batch",
                    {{"first_sequence", true}, {"batch", false}});
    return t;
  }
  /// The settings the options give; the trackers always step on A_h / ||A_h||_F, uncoupled.
  static GateSettings read(const gf::Options& o) {
    GateSettings s = table().read(o);
    s.tracker.scale_frobenius = true;
    s.tracker.coupling = false;
    return s;
  }
};

class IncrtGate : public gf::Head {
 public:
  IncrtGate(const gf::Options& o, const gf::HeadBuild& b)
      : IncrtGate(o, b, GateSettings::read(o)) {}
  IncrtGate(const gf::Options& o, const gf::HeadBuild& b, const GateSettings& s)
      : gf::Head(b.shape),
        g_plus_(s.g_plus),
        g_minus_(s.g_minus),
        learn_(s.learn_gates),
        update_every_(s.update_every),
        tracking_(s.tracker),
        probe_{s.first_sequence, true},
        rng_(b.rng ? b.rng->next_u64() : 0x9a7eULL, "incrt_gate") {
    if (!b.registry) throw gf::ConfigError("incrt_gate: the head build has no registry");
    if (learn_) {
      for (const auto& [n, g] :
           {std::pair<const char*, double>{"g_plus", s.g_plus}, {"g_minus", s.g_minus}})
        if (!(g > 0.0 && g < 1.0)) o.fail(n, "learned gates start strictly between 0 and 1");
    }
    inner_ = b.registry->create_head(s.inner, b);
    register_module("inner", inner_);
    if (learn_) {
      a_plus_ = register_parameter("gate_plus", gf::Tensor::scalar(float(logit(g_plus_))));
      a_minus_ = register_parameter("gate_minus", gf::Tensor::scalar(float(logit(g_minus_))));
    }
    const size_t d = shape_.d_model;
    tracker_.up.assign(d, 0.0);  // zero vectors: the gate is the identity until the first update
    tracker_.um.assign(d, 0.0);
  }

  gf::Var forward(const gf::HeadInput& in) override {
    const gf::Var& x = in.levels.at(0);
    if (in.ctx.training && update_every_ > 0 && (forwards_++ % update_every_) == 0)
      observe(x.value(), in.ctx.key_valid);
    const size_t d = shape_.d_model;
    gf::Tensor up({d, d}), um({d, d});
    for (size_t i = 0; i < d; ++i)
      for (size_t j = 0; j < d; ++j) {
        up[i * d + j] = float(tracker_.up[i] * tracker_.up[j]);
        um[i * d + j] = float(tracker_.um[i] * tracker_.um[j]);
      }
    gf::Var g;
    if (learn_) {
      gf::Tensor eye({d, d});
      for (size_t i = 0; i < d; ++i) eye[i * d + i] = 1.0f;
      const gf::Var gp = gf::ops::sigmoid(a_plus_);
      const gf::Var gm = gf::ops::sigmoid(a_minus_);
      g = gf::ops::sub(gf::ops::add(gf::constant(eye), gf::ops::mul(gf::constant(up), gp)),
                       gf::ops::mul(gf::constant(um), gm));
    } else {
      gf::Tensor gt({d, d});
      for (size_t i = 0; i < d * d; ++i)
        gt[i] = float((i % (d + 1) == 0 ? 1.0 : 0.0) + g_plus_ * up[i] - g_minus_ * um[i]);
      g = gf::constant(gt);
    }
    std::vector<gf::Var> levels = in.levels;
    levels[0] = gf::ops::linear(x, g);  // X G (G symmetric)
    const gf::HeadInput gated{levels, in.attend, in.ctx};
    return inner_->forward(gated);
  }

  /// Updates u+ / u- from a batch of head inputs (B, T, d) (no gradient): the stages probe and
  /// energy on the inner head alone (C of the batch, A_h = sym(C M_a,h), ||A_h||_F), then track.
  void observe(const gf::Tensor& x, const std::vector<uint8_t>* valid) {
    const gf::incrt::ProbeStats ps =
        gf::incrt::ProbeStats::measure(x, valid, {inner_.get()}, probe_);
    if (!(ps.energy > 0)) return;  // no directional structure: keep the gate as it is
    if (!started_) {
      tracker_.reset(shape_.d_model, rng_, {});
      started_ = true;
    }
    tracking_.step(tracker_, ps.s, {}, ps.energy);
  }

  const gf::Var* w_q(size_t level) const override { return inner_->w_q(level); }
  const gf::Var* w_k(size_t level) const override { return inner_->w_k(level); }
  const gf::Var* w_v() const override { return inner_->w_v(); }

  void initialize(const gf::HeadInit& init, gf::Rng& rng) override {
    inner_->initialize(init, rng);
    const size_t d = shape_.d_model;
    tracker_.up.assign(d, 0.0);
    tracker_.um.assign(d, 0.0);
    started_ = false;
    if (init.mode == "directed" && init.direction.size() == d) {
      // The new head starts amplifying the direction it was born for.
      Vec u(init.direction.begin(), init.direction.end());
      if (gf::incrt::normalize(u)) {
        tracker_.up = u;
        tracker_.um = gf::incrt::random_unit(d, rng_, {u});
        started_ = true;
      }
    }
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "incrt_gate 1 " << (started_ ? 1 : 0) << ' ' << forwards_ << ' ' << rng_.state() << ' '
       << rng_.increment() << ' ';
    gf::incrt::put_vec(os, tracker_.up);
    gf::incrt::put_vec(os, tracker_.um);
    gf::incrt::put(os, tracker_.lambda_max);
    gf::incrt::put(os, tracker_.lambda_min);
    os << "end";
    return os.str();
  }

  void load_state(const std::string& text) override {
    auto opened = gf::incrt::Reader::open(text, "incrt_gate", "1");
    if (!opened) return;
    gf::incrt::Reader& r = *opened;
    started_ = r.u64() != 0;
    forwards_ = r.u64();
    const uint64_t s = r.u64(), inc = r.u64();
    rng_.restore(s, inc);
    Vec up = r.vec(), um = r.vec();
    const size_t d = shape_.d_model;
    if (up.size() != d || um.size() != d)
      throw gf::RuntimeError("incrt_gate: saved trackers have " + std::to_string(up.size()) +
                             " entries, the head's width is " + std::to_string(d));
    tracker_.up = up;
    tracker_.um = um;
    tracker_.lambda_max = r.num();
    tracker_.lambda_min = r.num();
    r.expect("end");
  }

  std::map<std::string, double> diagnostics() const override {
    std::map<std::string, double> out;
    for (const auto& kv : inner_->diagnostics()) out["inner." + kv.first] = kv.second;
    out["g_plus"] = learn_ ? sigmoid(a_plus_.value().item()) : g_plus_;
    out["g_minus"] = learn_ ? sigmoid(a_minus_.value().item()) : g_minus_;
    out["lambda_max"] = tracker_.lambda_max;
    out["lambda_min"] = tracker_.lambda_min;
    return out;
  }

 private:
  static double logit(double p) { return std::log(p / (1.0 - p)); }
  static double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

  double g_plus_, g_minus_;
  bool learn_;
  size_t update_every_;
  gf::incrt::TrackerSettings tracking_;
  gf::incrt::ProbeSettings probe_;  // C of all valid tokens or of sequence 0, always normalised
  gf::Rng rng_;
  std::shared_ptr<gf::Head> inner_;
  gf::Var a_plus_, a_minus_;  // handles share the registered parameters' nodes
  gf::incrt::TrackerPair tracker_;
  bool started_ = false;
  size_t forwards_ = 0;
};

void register_gate(gf::Registry& r) {
  r.add_head(
      {"incrt_gate", "INCRT bidirectional gate I + g+ u+u+^T - g- u-u-^T around an inner head",
       GateSettings::table().specs()},
      [](const gf::Options& o, const gf::HeadBuild& b) {
        return std::make_unique<IncrtGate>(o, b);
      });
}

}  // namespace

GROWFORMER_PLUGIN("head_incrt_gate", "0.1.0", register_gate)
