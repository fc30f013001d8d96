// INCRT growth policy (`incrt_geometric`): add a head aimed at the largest
// uncaptured directional energy of A_res = P_perp sym(C M_a) P_perp while that
// energy is above a calibrated threshold (see docs/INCRT.md and spec/INCRT.md).
// A check of a block runs the stages probe -> energy -> calibrate (the INCRT library's
// ProbeStats and Calibration, shared with the pruning rule) -> spectrum and trackers ->
// threshold -> decide.
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/incrt/math.hpp>
#include <growformer/incrt/stats.hpp>

#include <growformer/incrt/round_rules.hpp>

namespace {

using gf::incrt::Mat;
using gf::incrt::Thresholds;
using gf::incrt::Vec;

/// Policy state of one attention block.
struct BlockState {
  bool started = false;
  gf::incrt::TrackerPair tracker;
  std::vector<Vec> q;            // directions at which earlier heads were born
  std::vector<long> q_owner;     // head id per Q column (-1 = unknown)
  size_t checks = 0;             // checks seen
  gf::incrt::Calibration calib;  // E_t of the calibration checks, Gamma_res(0)
  Vec calib_energy;              // unused since state version 2 (kept empty)
  double theta_w = 0.0, phi_w = 0.0, phi_g = 0.0, energy0 = 0.0;
  double gamma_floor = 0.0;  // E_t at the first check (the untrained block)
  double pair0 = 0.0;        // lambda_max - lambda_min at calibration (one head's pair)
  double energy_now = 0.0;   // E_t at the last check
  long last_growth_check = -1000000;
  size_t over = 0;  // consecutive active checks with the energy over the threshold
  size_t grown = 0;
  size_t heads = 0;  // the block's head count, read from the block at each check
                     // and after each edit: the summary's K_obs (saved, so that a
                     // resumed run reports it before its first check)
  double w_t = 0.0;  // Lyapunov functional at the last check
  double lambda_max = 0.0, lambda_min = 0.0, a_norm = 0.0;
  bool pending = false;  // an AddHead was returned and not yet confirmed
  Vec pending_dir;
  Vec pending_dir2;  // the other half's direction (spectrum: both), may be empty

  /// Each field once, in the order of the saved text (`over` since version 3); the ones with a
  /// key are the block's summary quantities.
  static const gf::StateFields<BlockState>& state_fields() {
    using B = BlockState;
    using C = gf::incrt::Calibration;
    using T = gf::incrt::TrackerPair;
    static const auto f = gf::StateFields<B>()
                              .add("started", &B::started)
                              .add("u_plus", &B::tracker, &T::up)
                              .add("u_minus", &B::tracker, &T::um)
                              .add("tracker_lambda_max", &B::tracker, &T::lambda_max)
                              .add("tracker_lambda_min", &B::tracker, &T::lambda_min)
                              .custom(
                                  "q",
                                  [](std::ostringstream& os, const B& s) {
                                    os << s.q.size() << ' ';
                                    for (size_t i = 0; i < s.q.size(); ++i) {
                                      gf::state::put_vec(os, s.q[i]);
                                      os << s.q_owner[i] << ' ';
                                    }
                                  },
                                  [](gf::state::Reader& r, B& s) {
                                    const size_t nq = r.count();
                                    for (size_t i = 0; i < nq; ++i) {
                                      s.q.push_back(r.vec());
                                      s.q_owner.push_back(r.i64());
                                    }
                                  })
                              .add("checks", &B::checks)
                              .add("calib_norms", &B::calib, &C::norms)
                              .add("calib_energy", &B::calib_energy)
                              .add("calibrated", &B::calib, &C::done)
                              .add("gamma0", &B::calib, &C::gamma0)
                              .report("gamma_res0")
                              .add("theta_w", &B::theta_w)
                              .report("theta_w")
                              .add("phi_w", &B::phi_w)
                              .report("phi_w")
                              .add("phi_g", &B::phi_g)
                              .report("phi_g")
                              .add("energy0", &B::energy0)
                              .add("w_t", &B::w_t)
                              .report("W_t")
                              .add("lambda_max", &B::lambda_max)
                              .report("lambda_max")
                              .add("lambda_min", &B::lambda_min)
                              .report("lambda_min")
                              .add("a_norm", &B::a_norm)
                              .report("a_res_norm")
                              .add("gamma_floor", &B::gamma_floor)
                              .report("gamma_floor")
                              .add("pair0", &B::pair0)
                              .add("energy_now", &B::energy_now)
                              .report("energy_now")
                              .add("last_growth_check", &B::last_growth_check)
                              .add("grown", &B::grown)
                              .report("grown")
                              .add("heads", &B::heads)
                              .report("K_obs")
                              .add("pending", &B::pending)
                              .add("over", &B::over, 3)
                              .add("pending_dir", &B::pending_dir)
                              .add("pending_dir2", &B::pending_dir2);
    return f;
  }
};

enum class Round { Double, Planes, One };

/// What decides whether to grow (docs/INCRT.md): rounds while learning, rounds at plateaus, or
/// the paper's energy threshold.
enum class Criterion { Learning, Gain, Energy };

/// Whether each check measures the block's energy, spectrum and trackers: the energy and gain
/// criteria decide on them; the learning rule reads only its probes (and C where a round grows).
enum class EnergyStats { Auto, On, Off };

/// The policy's options, each declared once (`table()`: spec, parsing and member).
struct IncrtSettings {
  Criterion criterion = Criterion::Learning;
  EnergyStats energy_stats = EnergyStats::Auto;
  Round round = Round::Double;
  double plane_threshold = 0.5;
  gf::incrt::GainOptions gain;
  double z = std::numeric_limits<double>::quiet_NaN();  // unset: by criterion (see the option)
  gf::incrt::ProbeSettings probe;
  gf::incrt::TrackerSettings tracker;
  gf::incrt::CalibrationSettings calibration;
  Thresholds thresholds = Thresholds::Relative;
  bool both_halves = true;
  double theta_w = 0.35, phi_w = 0.5, phi_g = 0.01;
  bool dwell_auto = false;
  long dwell_checks = 8;
  size_t patience = 3;
  double dwell_kappa = 2.0, dwell_eps = 0.05;
  long dwell_max_checks = 50;
  bool directed = true;
  double value_variance = -1.0;  // unset: the NTK rule
  bool preserve_function = true;
  size_t max_heads = 0;
  double k_constant = 1.0, head_cost = 0.1;
  bool release_direction = true, lyapunov_guard = true;

  static const gf::OptionTable<IncrtSettings>& table();
};

class IncrtGeometric : public gf::GrowthPolicy {
 public:
  explicit IncrtGeometric(const gf::Options& o) : set_(IncrtSettings::table().read(o)) {
    if (set_.thresholds == Thresholds::Absolute && !o.is_set("theta_w"))
      o.fail("theta_w", "thresholds: absolute needs an explicit theta_w");
    // probe_examples unset: 256 for the learning rule (its probe interval keeps the cost at 15 %
    // of training), 512 for the gain rule (the paired test's power at a plateau)
    if (set_.gain.probe_examples == 0)
      set_.gain.probe_examples = set_.criterion == Criterion::Gain ? 512 : 256;
    // z unset: 1 for learning (the last look decides keep or take back: a round whose heads carry
    // min_share of the loss at one standard error is kept), 2 for gain
    set_.gain.z = std::isfinite(set_.z) ? set_.z : set_.criterion == Criterion::Gain ? 2.0 : 1.0;
    if (set_.energy_stats == EnergyStats::Off && set_.criterion != Criterion::Learning)
      o.fail("energy_stats", std::string("criterion ") +
                                 (set_.criterion == Criterion::Gain ? "gain" : "energy") +
                                 " decides on the energy statistics: they cannot be off");
    stats_ = set_.energy_stats == EnergyStats::On || set_.criterion != Criterion::Learning;
    rule_ = make_rule();
  }

  bool needs_probe() const override { return true; }

  /// The round rule of the criterion (none for energy: its decisions are the checks' own).
  std::unique_ptr<gf::incrt::RoundRule> make_rule() const {
    if (set_.criterion == Criterion::Gain) return std::make_unique<gf::incrt::GainRule>(set_.gain);
    if (set_.criterion == Criterion::Learning)
      return std::make_unique<gf::incrt::LearningRule>(set_.gain);
    return nullptr;
  }

  /// criterion: gain, at a probe while a round waits for its test: the round's heads muted.
  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView& view) const override {
    if (!rule_ || !rule_->measures_round() || !rule_->waiting() || rule_->round().empty() ||
        validation_probe(view.step) == 0)
      return {};
    return {round_heads()};
  }

  /// round_test paired: the waiting round's heads sit out every `round_mute_every`-th training
  /// step, so that the older heads keep working without them and the round's ablation measures
  /// what it adds, not what the older heads came to lean on.
  std::vector<gf::HeadRef> muted_in_training(size_t step) const override {
    const size_t every = rule_ ? rule_->mute_every() : 0;
    if (every == 0 || step % every != 0 || !rule_->waiting()) return {};
    return round_heads();
  }

  /// Criterion gain: the structure is on trial while a round waits for its test (its heads may
  /// still be taken back), so the run's best checkpoint is never one with a waiting round.
  bool on_trial(size_t step) const override {
    (void)step;
    return rule_ && rule_->waiting();
  }

  /// The heads of the round waiting for its test.
  std::vector<gf::HeadRef> round_heads() const {
    std::vector<gf::HeadRef> set;
    if (rule_)
      for (const auto& [b, id] : rule_->round()) set.push_back({b, static_cast<int>(id)});
    return set;
  }

  size_t validation_probe(size_t step) const override {
    (void)step;
    if (!rule_) return 0;
    return rule_->wants_probe(gain_checks_) ? rule_->probe_examples() : 0;
  }

  void on_start(const gf::TrainView& view) override {
    if (!seeded_) {
      const uint64_t seed = view.rng ? view.rng->next_u64() : 0x1ec27ULL;
      rng_ = gf::Rng(seed, "incrt_geometric");
      seeded_ = true;
    }
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    if (!seeded_) on_start(view);
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      if (!bv.probe || !bv.probe->input.defined())
        throw gf::RuntimeError("incrt_geometric: the trainer gave no probe for block " +
                               std::to_string(bv.index) + " (needs_probe() is true)");
      BlockState& st = blocks_[bv.index];
      check_block(view, bv, st, edits);
    }
    if (rule_) {
      if (view.metrics.probe_examples > 0) gain_step(view, edits);
      gain_checks_ += 1;
    }
    return edits;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    auto it = blocks_.find(e.block);
    if (it == blocks_.end()) return;
    BlockState& st = it->second;
    for (const gf::BlockView& bv : view.blocks)
      if (bv.index == e.block && bv.block) st.heads = bv.block->num_heads();
    const size_t d = st.tracker.up.size();
    if (e.kind == gf::Edit::Kind::AddHead && gain_pending_ > 0) {
      gain_pending_ -= 1;  // a head of this policy's round
      rule_->round().emplace_back(e.block, new_head_id);
      st.grown += 1;
      return;
    }
    if (e.kind == gf::Edit::Kind::AddHead) {
      if (!st.pending) return;  // someone else's growth edit
      st.pending = false;
      for (const Vec* dir : {&st.pending_dir, &st.pending_dir2}) {
        Vec u = *dir;
        if (u.size() != d) continue;
        gf::incrt::orthogonalize(u, st.q);
        if (gf::incrt::normalize(u) && st.q.size() < d) {
          st.q.push_back(u);
          st.q_owner.push_back(new_head_id);
        }
      }
      st.grown += 1;
      if (stats_) st.tracker.reset(d, rng_, st.q);  // restart both trackers in the new complement
    } else {
      const bool release = e.release_direction.value_or(set_.release_direction);
      if (rule_) {
        auto& r = rule_->round();
        r.erase(
            std::remove(r.begin(), r.end(), std::make_pair(e.block, static_cast<long>(e.head_id))),
            r.end());
      }
      if (!release) return;
      for (size_t i = 0; i < st.q_owner.size();)
        if (st.q_owner[i] == e.head_id) {
          st.q.erase(st.q.begin() + static_cast<long>(i));
          st.q_owner.erase(st.q_owner.begin() + static_cast<long>(i));
        } else {
          ++i;
        }
    }
  }

  std::vector<std::string> summary_columns() const override {
    if (!stats_) return {"K_obs"};  // K_pred reads the spectrum at the end of calibration
    return {"K_obs", "K_pred"};
  }

  std::map<std::string, double> summary() const override {
    std::map<std::string, double> out;
    double k_pred_total = 0.0, k_obs_total = 0.0, w_total = 0.0;
    bool first = true;
    for (const auto& kv : blocks_) {
      const BlockState& st = kv.second;
      std::map<std::string, double> b = block_summary(st);
      k_pred_total += b["K_pred"];
      k_obs_total += b["K_obs"];
      w_total += b["W_t"];
      if (first) {
        out = b;  // the first block's quantities unprefixed
        first = false;
      }
      if (blocks_.size() > 1)
        for (const auto& q : b) out["block" + std::to_string(kv.first) + "." + q.first] = q.second;
    }
    if (rule_) rule_->summarize(out);
    if (blocks_.size() > 1) {
      out["K_pred"] = k_pred_total;
      out["K_obs"] = k_obs_total;
      out["ratio"] = k_pred_total > 0 ? k_obs_total / k_pred_total : 0.0;
      out["W_t"] = w_total;
    }
    return out;
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "incrt_geometric 10 " << (seeded_ ? 1 : 0) << ' ' << rng_.state() << ' '
       << rng_.increment() << ' ' << blocks_.size() << ' ';
    for (const auto& [index, st] : blocks_) {
      os << "block " << index << ' ';
      BlockState::state_fields().save(os, st);
    }
    if (rule_)
      rule_->save(os);
    else
      os << "none ";
    os << gain_checks_ << ' ' << gain_pending_ << ' ';
    os << "end";
    return os.str();
  }

  /// Versions 2 to 9 load: 2 (before growth patience) without the over-threshold counter (0);
  /// 3 (before growth in rounds) without round state; 4 (before the round patience) without
  /// the learning onset; 5 (before growth_until counted from a reopening) as never reopened;
  /// 6 (before the round's shares) with none measured; 7 (before the paired test) without the
  /// shares' standard errors; 4 to 8 hold the gain rule's state whatever the criterion (9: the
  /// criterion's own, named: `gain`, `learning`, or `none` for energy); 10 adds the learning
  /// rule's share trend and its count of rounds kept unpaid (9: none).
  void load_state(const std::string& text) override {
    auto opened = gf::state::Reader::open(text, "incrt_geometric", 2, 10, "incrt");
    if (!opened) return;
    gf::state::Reader& r = *opened;
    const int version = r.version();
    seeded_ = r.u64() != 0;
    gf::fields_detail::read(r, rng_);
    const size_t nb = r.count();
    blocks_.clear();
    for (size_t b = 0; b < nb; ++b) {
      r.expect("block");
      BlockState::state_fields().load(r, blocks_[r.u64()], version);
    }
    gain_checks_ = 0;
    gain_pending_ = 0;
    rule_ = make_rule();
    if (version >= 4) {
      load_rule_state(r, version);
      gain_checks_ = r.u64();
      gain_pending_ = r.u64();
    }
    r.expect("end");
  }

 private:
  /// The criterion's state: a state saved under another criterion is refused by name.
  void load_rule_state(gf::state::Reader& r, int version) {
    const std::string mine = rule_ ? rule_->name() : "none";
    // before version 9 the gain rule's state, written whatever the criterion
    const std::string saved = version < 9 ? (r.expect("gain"), std::string("gain")) : r.word();
    if (version < 9 && set_.criterion == Criterion::Energy) {
      gf::incrt::GainRule(set_.gain).load(r);  // read and dropped
      return;
    }
    if (saved != mine)
      throw gf::RuntimeError(
          std::string("incrt_geometric: the policy state was saved by criterion ") +
          (saved == "none" ? "energy" : saved) + ", the config says criterion " +
          (rule_ ? mine : "energy") +
          ": resume with --set growth.criterion=" + (saved == "none" ? "energy" : saved));
    if (rule_) rule_->load(r);
  }

  std::map<std::string, double> block_summary(const BlockState& st) const {
    std::map<std::string, double> b = BlockState::state_fields().summary(st);
    // Head-count law K* = c kappa_T^2 log(Gamma0 / floor), from the spectrum of
    // sym(C M_a) at the end of calibration (before any growth), independent of theta_w:
    // kappa_T = total directional energy sum |lambda_i| over the energy one head's
    // +- pair carries (lambda_max - lambda_min), i.e. the number of head-sized pairs;
    // the log term: how far the learned structure rose above the untrained block's
    // energy (the first check), log(1 + Gamma0 / floor) so that it stays positive.
    const double kappa = st.pair0 > 0 ? st.energy0 / st.pair0 : 0.0;
    const double logr = st.gamma_floor > 0 ? std::log1p(st.calib.gamma0 / st.gamma_floor) : 0.0;
    const double k_pred = st.calib.done ? set_.k_constant * kappa * kappa * logr : 0.0;
    b["kappa_T"] = kappa;
    b["K_pred"] = k_pred;
    b["ratio"] = k_pred > 0 ? static_cast<double>(st.heads) / k_pred : 0.0;
    return b;
  }

  /// Stage "threshold": the thresholds of the current check (energy = E_t = ||sym(C M_a)||_F).
  void set_thresholds(BlockState& st, double energy) const {
    if (set_.thresholds == Thresholds::Absolute) {
      st.theta_w = set_.theta_w;
      st.phi_w = set_.phi_w;
      st.phi_g = set_.phi_g;
      return;
    }
    const double scale = gf::incrt::threshold_scale(set_.thresholds, energy, st.calib);
    st.theta_w = set_.theta_w * scale;
    st.phi_w = set_.phi_w * st.theta_w;
    st.phi_g = set_.phi_g * st.theta_w;
  }

  /// The spectrum of A_res at a check.
  struct Spectrum {
    Mat a;  // A_res = P_perp sym(C M_a) P_perp
    double a_norm = 0.0;
    gf::incrt::Eigen eig;
    double gap_top = 0.0, gap_bottom = 0.0;
  };

  /// What the criterion reads at a check (stage "decide").
  struct Reading {
    size_t check_index = 0;
    bool calibrated_now = false;
    long dwell = 0;
    bool minus_first = false;  // the negative half leads (spectrum: both)
    double lead = 0.0;         // the energy the criterion reads
  };

  /// Heads removed by someone else (a pruning rule's edits are not shown to this policy): free
  /// their birth directions when release_direction is on.
  void forget_dead_heads(BlockState& st, const std::vector<gf::HeadInfo>& heads) const {
    if (!set_.release_direction) return;
    for (size_t i = 0; i < st.q_owner.size();) {
      bool alive = st.q_owner[i] < 0;
      for (const gf::HeadInfo& h : heads) alive = alive || h.id == st.q_owner[i];
      if (alive) {
        ++i;
        continue;
      }
      st.q.erase(st.q.begin() + static_cast<long>(i));
      st.q_owner.erase(st.q_owner.begin() + static_cast<long>(i));
    }
  }

  /// Stage "spectrum" and "track": A_res, its eigenvalues, and the trackers' step.
  Spectrum track(BlockState& st, const gf::incrt::ProbeStats& ps, size_t d) {
    const gf::incrt::TrackerSettings& tr = set_.tracker;
    Spectrum sp;
    sp.a = gf::incrt::project(ps.s, st.q);
    sp.a_norm = gf::incrt::frobenius(sp.a);
    sp.eig = gf::incrt::jacobi_eigen(sp.a, tr.exact);
    const Vec& ev = sp.eig.values;
    sp.gap_top = d >= 2 ? ev[d - 1] - ev[d - 2] : 0.0;
    sp.gap_bottom = d >= 2 ? ev[1] - ev[0] : 0.0;
    tr.step(st.tracker, sp.a, st.q, sp.a_norm, tr.gamma(sp.gap_top, sp.gap_bottom), &sp.eig);
    st.lambda_max = st.tracker.lambda_max;
    st.lambda_min = st.tracker.lambda_min;
    st.a_norm = sp.a_norm;
    return sp;
  }

  /// Stage "calibrate": Gamma_res(0) and the head-count law's inputs (no growth before); true
  /// when calibration ended at this check, with a `calibrate` event.
  bool calibrate(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st, double energy,
                 const Vec& ev) {
    if (!st.calib.observe(energy, view.step, view.total_steps, set_.calibration)) return false;
    const size_t d = ev.size();
    // Q is empty before the first growth, so ev is the spectrum of sym(C M_a).
    double total = 0.0;
    for (double v : ev) total += std::fabs(v);
    st.energy0 = total;
    st.pair0 = d ? ev[d - 1] - ev[0] : 0.0;
    set_thresholds(st, energy);
    gf::Event cal;
    cal.type = "calibrate";
    cal.block = static_cast<long>(bv.index);
    const auto sum = block_summary(st);
    cal.numbers = {{"step", double(view.step)},
                   {"gamma_res0", st.calib.gamma0},
                   {"gamma_floor", st.gamma_floor},
                   {"theta_w", st.theta_w},
                   {"phi_w", st.phi_w},
                   {"phi_g", st.phi_g},
                   {"energy0", st.energy0},
                   {"pair0", st.pair0},
                   {"kappa_T", sum.at("kappa_T")},
                   {"K_pred", sum.at("K_pred")},
                   {"checks", double(st.calib.norms.size())}};
    cal.strings = {{"policy", "incrt_geometric"}};
    if (view.events) view.events->emit(cal);
    return true;
  }

  /// Stage "threshold" of the energy rule: the Lyapunov functional, the dwell time, the energy
  /// the criterion reads and the count of checks over the threshold.
  Reading read_energy(BlockState& st, const Spectrum& sp, size_t heads, size_t d,
                      size_t check_index, bool calibrated_now) const {
    Reading rd;
    rd.check_index = check_index;
    rd.calibrated_now = calibrated_now;
    // Lyapunov functional: uncaptured energy above threshold plus a cost per head.
    double uncaptured = 0.0;
    for (double v : sp.eig.values)
      uncaptured += std::max((set_.both_halves ? std::fabs(v) : v) - st.theta_w, 0.0);
    st.w_t = st.calib.done ? uncaptured + set_.head_cost * st.theta_w * double(heads) : 0.0;
    // Dwell time in checks.
    rd.dwell = set_.dwell_checks;
    if (set_.dwell_auto) {
      const double scale = set_.tracker.scale_frobenius && sp.a_norm > 0 ? sp.a_norm : 1.0;
      const double gap = sp.gap_top / scale;
      const double iters = gap > 0 ? set_.dwell_kappa / (set_.tracker.eta_plus_at(d) * gap * gap) *
                                         std::log(1.0 / set_.dwell_eps)
                                   : 1e18;
      const double in_checks = std::ceil(iters / double(std::max<size_t>(set_.tracker.iters, 1)));
      rd.dwell = static_cast<long>(std::min<double>(in_checks, double(set_.dwell_max_checks)));
    }
    // The energy the criterion reads: the spectral radius of A_res (both halves), or
    // lambda_max (positive half, the paper's formula).
    rd.minus_first = set_.both_halves && -st.lambda_min > st.lambda_max;
    rd.lead = set_.both_halves ? std::max(st.lambda_max, -st.lambda_min) : st.lambda_max;
    // Growth must pay for its head: the uncaptured energy it removes (at least
    // lead - theta_w) exceeds the head cost, so W_t strictly decreases.
    const double need = st.theta_w * (1.0 + (set_.lyapunov_guard ? set_.head_cost : 0.0));
    // The energy must stay over the threshold for `patience` consecutive active checks: C
    // comes from one training batch, so one check's spectrum carries that batch's noise.
    const bool active = st.calib.done && !calibrated_now;
    st.over = active && rd.lead > need ? st.over + 1 : 0;
    return rd;
  }

  void emit_check(const gf::TrainView& view, const gf::BlockView& bv, const BlockState& st,
                  const gf::incrt::ProbeStats& ps, const Spectrum& sp, const Reading& rd,
                  size_t heads) const {
    if (!view.events) return;
    const Vec& ev = sp.eig.values;
    const size_t d = ev.size();
    gf::Event e;
    e.type = "check";
    e.block = static_cast<long>(bv.index);
    e.numbers = {{"step", double(view.step)},
                 {"lambda_max", st.lambda_max},
                 {"lambda_min", st.lambda_min},
                 {"lambda_max_exact", d ? ev[d - 1] : 0.0},
                 {"lambda_min_exact", d ? ev[0] : 0.0},
                 {"energy", rd.lead},
                 {"a_res_norm", sp.a_norm},
                 {"total_energy", ps.energy},
                 {"gap_top", sp.gap_top},
                 {"theta_w", st.theta_w},
                 {"phi_w", st.phi_w},
                 {"phi_g", st.phi_g},
                 {"heads", double(heads)},
                 {"q_rank", double(st.q.size())},
                 {"W_t", st.w_t},
                 {"tokens", double(ps.tokens)},
                 {"dwell", double(rd.dwell)},
                 {"over", double(st.over)}};
    e.strings = {{"policy", "incrt_geometric"},
                 {"phase", st.calib.done ? "active" : "calibrating"}};
    view.events->emit(e);
  }

  /// Stage "decide" of the energy rule: a head at the leading uncaptured direction when the
  /// energy stayed over the threshold, the dwell time has passed and there is room.
  void decide_energy(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                     const std::vector<gf::HeadInfo>& heads, const gf::incrt::ProbeStats& ps,
                     const Spectrum& sp, const Reading& rd, std::vector<gf::Edit>& edits) {
    const size_t d = sp.eig.values.size();
    const size_t cap = std::min(set_.max_heads > 0 ? set_.max_heads : static_cast<size_t>(-1),
                                bv.block->max_heads());
    const bool enough = st.over >= std::max<size_t>(set_.patience, 1);
    // The paper's second condition; vacuous for the traceless A_res (kept for the
    // positive-half rule).
    const bool minor = set_.both_halves || st.lambda_min < st.phi_w;
    const size_t room = set_.both_halves ? 2 : 1;
    const long since = static_cast<long>(rd.check_index) - st.last_growth_check;
    if (!(enough && minor && since >= rd.dwell && heads.size() < cap && st.q.size() + room <= d))
      return;
    const Vec& dir = rd.minus_first ? st.tracker.um : st.tracker.up;
    gf::Edit e;
    e.kind = gf::Edit::Kind::AddHead;
    e.block = bv.index;
    e.init.mode = set_.directed ? "directed" : "random";
    e.init.direction.assign(dir.begin(), dir.end());
    e.init.preserve_function = set_.preserve_function;
    e.init.value_variance = new_head_variance(heads, d, ps.seq_len);
    e.cause.type = "grow";
    e.cause.block = static_cast<long>(bv.index);
    e.cause.numbers = {{"step", double(view.step)},
                       {"lambda_max", st.lambda_max},
                       {"lambda_min", st.lambda_min},
                       {"energy", rd.lead},
                       {"a_res_norm", sp.a_norm},
                       {"total_energy", ps.energy},
                       {"theta_w", st.theta_w},
                       {"phi_w", st.phi_w},
                       {"gap_top", sp.gap_top},
                       {"W_t", st.w_t},
                       {"heads_before", double(heads.size())},
                       {"checks_over", double(st.over)},
                       {"value_variance", e.init.value_variance}};
    e.cause.strings = {{"policy", "incrt_geometric"},
                       {"init", e.init.mode},
                       {"half", rd.minus_first ? "negative" : "positive"}};
    st.pending = true;
    st.pending_dir = dir;
    st.pending_dir2.clear();
    if (set_.both_halves) st.pending_dir2 = rd.minus_first ? st.tracker.up : st.tracker.um;
    st.last_growth_check = static_cast<long>(rd.check_index);
    st.over = 0;  // A_res changes with the new head's directions in Q
    edits.push_back(std::move(e));
  }

  /// One block's check: probe -> energy -> spectrum -> calibrate -> threshold -> decide.
  void check_block(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                   std::vector<gf::Edit>& edits) {
    const std::vector<gf::HeadInfo> heads = bv.block->heads();
    const size_t d = bv.probe->input.dim(2);
    st.heads = heads.size();
    st.pending = false;  // an edit returned by the last check that was not applied
    if (!stats_) {       // the learning rule: C is measured where a round grows (grow_round)
      forget_dead_heads(st, heads);
      round_inputs_.erase(bv.index);
      return;
    }
    if (!st.started) {
      st.tracker.reset(d, rng_, st.q);
      st.started = true;
    }
    forget_dead_heads(st, heads);
    gf::incrt::ProbeStats ps = gf::incrt::ProbeStats::measure(bv, heads, set_.probe);
    if (rule_) round_inputs_[bv.index] = {ps.c, ps.present_motors(), ps.seq_len};
    const Spectrum sp = track(st, ps, d);
    st.energy_now = ps.energy;
    const size_t check_index = st.checks++;
    if (check_index == 0) st.gamma_floor = ps.energy;
    const bool calibrated_now = calibrate(view, bv, st, ps.energy, sp.eig.values);
    if (st.calib.done && !calibrated_now) set_thresholds(st, ps.energy);
    const Reading rd = read_energy(st, sp, heads.size(), d, check_index, calibrated_now);
    emit_check(view, bv, st, ps, sp, rd, heads.size());
    if (set_.criterion != Criterion::Energy || !st.calib.done || calibrated_now) return;
    decide_energy(view, bv, st, heads, ps, sp, rd, edits);
  }

  /// The round rule at a check with a validation probe (criterion: gain): the probe's reading,
  /// then the decision: reopen, stop, take the last round back, or grow a round.
  void gain_step(const gf::TrainView& view, std::vector<gf::Edit>& edits) {
    gain_pending_ = 0;  // edits returned by an earlier check and not applied
    const gf::RunMetrics& m = view.metrics;
    rule_->watch(m.probe_loss, view.step);
    const gf::incrt::RoundSnapshot before = rule_->snapshot();
    // The gain rule's rounds begin once every block's calibration has ended (its first heads
    // have learned: before that the probe loss can sit flat at chance and look settled).
    bool calibrated = true;
    if (rule_->needs_calibration())
      for (const gf::BlockView& bv : view.blocks)
        if (bv.block && bv.block->can_edit_heads())
          calibrated = calibrated && blocks_[bv.index].calib.done;
    gf::incrt::ProbeReading p;
    p.loss = m.probe_loss;
    p.step = view.step;
    p.total = view.total_steps;
    p.check = gain_checks_;
    p.steps_per_check = m.train_steps;
    p.examples = m.probe_examples;
    for (const gf::BlockView& bv : view.blocks)
      if (bv.probe && bv.probe->input.defined() && p.batch == 0) p.batch = bv.probe->input.dim(0);
    if (!rule_->round().empty())
      if (const gf::Ablation* a = m.ablation(round_heads())) {
        p.muted_loss = a->loss;  // the probe without the round
        if (m.probe_examples > 1) p.muted_se = a->diff_sd / std::sqrt(double(m.probe_examples));
      }
    const std::string phase = !calibrated ? "calibrating" : rule_->phase();
    const gf::incrt::GainDecision dec = calibrated ? rule_->observe(p) : gf::incrt::GainDecision{};
    emit_probe(view, p, dec, phase);
    using K = gf::incrt::GainDecision::Kind;
    if (dec.kind == K::Reopen) {
      note(view, "reopen", {{"probe_loss", m.probe_loss}, {"settled_before", before.stopped_at}});
    } else if (dec.kind == K::Stop) {
      note(view, "growth_stop", {{"settled", dec.settled}, {"grow_until", set_.gain.grow_until}});
    } else if (dec.kind == K::Reject) {
      reject_round(view, before, dec, edits);
    } else if (dec.kind == K::Keep) {
      note(view, "round_kept",
           {{"round_heads", double(before.round.size())},
            {"round_age", double(view.step - before.round_step)},
            {"round_share", dec.share},
            {"round_t", dec.t},
            {"upper", dec.upper},
            {"trend_t", dec.trend_t},
            {"min_share", set_.gain.min_share}},
           dec.evidence);
      rule_->round().clear();
    } else if (dec.kind == K::Grow) {
      grow_round(view, dec, edits);
    }
  }

  /// An event of the round rule with the step and NUMS.
  /// EVIDENCE, when given, is the `evidence` string: what decided a round at the window's end.
  static void note(const gf::TrainView& view, const char* type,
                   std::vector<std::pair<std::string, double>> nums,
                   const std::string& evidence = "") {
    gf::Event e;
    e.type = type;
    e.numbers = {{"step", double(view.step)}};
    for (auto& kv : nums)
      if (std::isfinite(kv.second)) e.numbers.push_back(kv);  // unmeasured: left out, not null
    e.strings = {{"policy", "incrt_geometric"}};
    if (!evidence.empty()) e.strings.push_back({"evidence", evidence});
    if (view.events) view.events->emit(e);
  }

  /// The `probe` event: what the round rule read of this probe, and the decision's signal.
  void emit_probe(const gf::TrainView& view, const gf::incrt::ProbeReading& p,
                  const gf::incrt::GainDecision& dec, const std::string& phase) const {
    const gf::RunMetrics& m = view.metrics;
    gf::Event pe;
    pe.type = "probe";
    pe.numbers = {{"step", double(view.step)},          {"probe_loss", m.probe_loss},
                  {"probe_accuracy", m.probe_accuracy}, {"examples", double(m.probe_examples)},
                  {"train_loss", m.train_loss},         {"train_steps", double(m.train_steps)},
                  {"val_step", double(m.val_step)},     {"val_loss", m.val_loss}};
    for (const auto& kv : rule_->probe_numbers(p)) pe.numbers.push_back(kv);
    pe.numbers.insert(pe.numbers.end(), {{"probe_loss_without_round", p.muted_loss},
                                         {"round_share", dec.share},
                                         {"round_share_se", dec.share_se},
                                         {"round_t", dec.t}});
    // numbers not measured yet (no validation, no full window) are left out, not written as null
    pe.numbers.erase(std::remove_if(pe.numbers.begin(), pe.numbers.end(),
                                    [](const auto& kv) { return !std::isfinite(kv.second); }),
                     pe.numbers.end());
    pe.strings = {{"policy", "incrt_geometric"},
                  {"phase", phase},
                  {"plot", rule_->plot()}};  // drawn by `growformer report`
    if (view.events) view.events->emit(pe);
  }

  /// The last round did not pay: its heads go.
  void reject_round(const gf::TrainView& view, const gf::incrt::RoundSnapshot& before,
                    const gf::incrt::GainDecision& dec, std::vector<gf::Edit>& edits) {
    for (const auto& [b, id] : before.round) {
      gf::Edit e;
      e.kind = gf::Edit::Kind::RemoveHead;
      e.block = b;
      e.head_id = static_cast<int>(id);
      e.cause.type = "prune";
      e.cause.block = static_cast<long>(b);
      e.cause.numbers = {
          {"step", double(view.step)},      {"gain", dec.gain},
          {"min_gain", set_.gain.min_gain}, {"settled_before", before.prev},
          {"settled", dec.settled},         {"share", std::isfinite(dec.share) ? dec.share : -1.0}};
      e.cause.strings = {{"policy", "incrt_geometric"}, {"reason", "round_rejected"}};
      if (*dec.evidence) e.cause.strings.push_back({"evidence", dec.evidence});
      edits.push_back(std::move(e));
    }
    rule_->round().clear();
    note(view, "round_rejected",
         {{"gain", dec.gain},
          {"min_gain", set_.gain.min_gain},
          {"settled_before", before.prev},
          {"settled", dec.settled},
          {"heads_removed", double(before.round.size())},
          {"round_share", std::isfinite(dec.share) ? dec.share : -1.0},
          {"round_age", double(view.step - before.round_step)},
          {"round_t", std::isfinite(dec.t) ? dec.t : -1.0},
          {"test", set_.gain.paired ? 1.0 : 0.0},
          {"patience_steps", before.patience},
          {"upper", dec.upper},
          {"trend_t", dec.trend_t}},
         dec.evidence);
  }

  /// Grow: one round over the editable blocks, each sized and aimed by its uncaptured planes.
  void grow_round(const gf::TrainView& view, const gf::incrt::GainDecision& dec,
                  std::vector<gf::Edit>& edits) {
    size_t added = 0;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      if (!stats_ && bv.probe && bv.probe->input.defined()) {
        const gf::incrt::ProbeStats ps = gf::incrt::ProbeStats::measure(bv, heads, set_.probe);
        round_inputs_[bv.index] = {ps.c, ps.present_motors(), ps.seq_len};
      }
      auto in = round_inputs_.find(bv.index);
      if (in == round_inputs_.end()) continue;
      const size_t cap = std::min(set_.max_heads > 0 ? set_.max_heads : static_cast<size_t>(-1),
                                  bv.block->max_heads());
      const size_t room = cap > heads.size() ? cap - heads.size() : 0;
      const gf::incrt::PlaneResidual pr =
          gf::incrt::plane_residual(in->second.c, in->second.motors, set_.plane_threshold);
      size_t n = set_.round == Round::One      ? 1
                 : set_.round == Round::Double ? heads.size()
                                               : std::min(pr.planes, heads.size());
      n = pr.vectors.empty() ? 0 : std::min(n, room);
      for (size_t i = 0; i < n; ++i) {
        const size_t v = std::min(2 * i, pr.vectors.size() - 1);
        gf::Edit e;
        e.kind = gf::Edit::Kind::AddHead;
        e.block = bv.index;
        e.init.mode = set_.directed ? "directed" : "random";
        e.init.direction.assign(pr.vectors[v].begin(), pr.vectors[v].end());
        e.init.preserve_function = set_.preserve_function;
        e.init.value_variance = new_head_variance(heads, in->second.c.n, in->second.seq_len);
        e.cause.type = "grow";
        e.cause.block = static_cast<long>(bv.index);
        e.cause.numbers = {{"step", double(view.step)},
                           {"settled", dec.settled},
                           {"gain_of_last_round", std::isfinite(dec.gain) ? dec.gain : -1.0},
                           {"share_of_last_round", std::isfinite(dec.share) ? dec.share : -1.0},
                           {"planes", double(pr.planes)},
                           {"plane_energy", std::fabs(pr.values[v])},
                           {"captured_scale", pr.captured_scale},
                           {"heads_before", double(heads.size())},
                           {"round_size", double(n)},
                           {"value_variance", e.init.value_variance}};
        e.cause.strings = {
            {"policy", "incrt_geometric"},
            {"init", e.init.mode},
            {"criterion", set_.criterion == Criterion::Learning ? "learning" : "gain"}};
        if (*dec.evidence) e.cause.strings.push_back({"evidence", dec.evidence});
        edits.push_back(std::move(e));
      }
      if (n == 0)
        note(view, "no_plane",
             {{"block", double(bv.index)},
              {"planes", double(pr.planes)},
              {"captured_scale", pr.captured_scale},
              {"room", double(room)},
              {"settled", dec.settled}});
      added += n;
    }
    rule_->grown(added, dec.settled, view.step);
    gain_pending_ = added;
  }

  /// Var(W_V) of a new head: the option, else the NTK rule.
  double new_head_variance(const std::vector<gf::HeadInfo>& heads, size_t d, double seq_len) const {
    return set_.value_variance > 0 ? set_.value_variance : ntk_variance(heads, d, seq_len);
  }

  /// NTK-consistent value variance Var(W_V) = d_k n / (d d_v) with n the sequence
  /// length (valid tokens per probe sequence), as in the reference code.
  static double ntk_variance(const std::vector<gf::HeadInfo>& heads, size_t d, double n) {
    double dk = 1.0, dv = 1.0;
    if (!heads.empty() && heads[0].head) {
      const gf::HeadShape& s = heads[0].head->shape();
      if (s.d_k && s.d_v) {
        dk = double(s.d_k);
        dv = double(s.d_v);
      }
    }
    return dk * std::max(n, 1.0) / (double(d) * dv);
  }

  IncrtSettings set_;
  std::unique_ptr<gf::incrt::RoundRule> rule_;  // the criterion (null: energy)
  size_t gain_checks_ = 0;                      // checks seen (a probe every probe_every of them)
  size_t gain_pending_ = 0;  // AddHead edits of a round returned and not yet confirmed
  // what a round reads of this check, per block (criterion: gain; not state): C, the heads'
  // motors and the valid tokens per probe sequence
  struct RoundInputs {
    Mat c;
    std::vector<Mat> motors;
    double seq_len = 1.0;
  };
  std::map<size_t, RoundInputs> round_inputs_;

  bool stats_ = true;  // checks measure the energy statistics (energy_stats)
  bool seeded_ = false;
  gf::Rng rng_;
  std::map<size_t, BlockState> blocks_;
};

using IncrtTable = gf::OptionTable<IncrtSettings>;

/// criterion: gain and its round rule.
void round_options(IncrtTable& t) {
  using S = IncrtSettings;
  using G = gf::incrt::GainOptions;
  t.choice(
       "criterion", &S::criterion, "learning",
       "learning: grow in rounds while the model learns: a round (doubling the heads, aimed at "
       "the planes no head carries) grows as soon as the validation probe shows learning and "
       "again each time the last round's heads carry min_share of the probe loss at a paired t of "
       "z_early (z when grow_until ends); a round unpaid at grow_until is taken back "
       "(docs/INCRT.md); "
       "gain: the same rounds, grown only at plateaus of the probe loss (the earlier default); "
       "energy: grow while the uncaptured energy of A_res exceeds theta_w (thresholds: calibrated "
       "is the paper's rule)",
       {{"learning", Criterion::Learning},
        {"gain", Criterion::Gain},
        {"energy", Criterion::Energy}})
      .choice("energy_stats", &S::energy_stats, "auto",
              "whether each check measures the block's residual energy, spectrum and trackers "
              "(the `check` events, the report's INCRT chart, K_pred): auto = for the energy and "
              "gain criteria, which decide on them; on = for learning too (its decisions do not "
              "change; the checks cost more); off = learning only",
              {{"auto", EnergyStats::Auto}, {"on", EnergyStats::On}, {"off", EnergyStats::Off}})
      .choice(
          "round", &S::round, "double",
          "gain: heads per round: double (as many as the block has), planes (the uncaptured planes "
          "over plane_threshold, at most doubling) or one",
          {{"double", Round::Double}, {"planes", Round::Planes}, {"one", Round::One}})
      .add(
          "plane_threshold", &S::plane_threshold, "0.5",
          "gain: an uncaptured plane counts when over this fraction of the median head's top plane",
          0.0)
      .add("probe_examples", &S::gain, &G::probe_examples, "~",
           "learning, gain: validation examples per probe (at most the validation split); unset = "
           "256 "
           "for learning (its probes every so many checks that they cost at most 15 % of the "
           "training work), 512 for gain",
           1, 1e7)
      .add("probe_every", &S::gain, &G::probe_every, "2",
           "gain: a validation probe every N checks while the rule waits for the loss to settle", 1,
           1e6)
      .add("round_probe_every", &S::gain, &G::round_probe_every, "2",
           "gain, round_test paired: a probe every N checks while a round waits for its test (each "
           "probe is evaluated twice, with and without the round's heads)",
           1, 1e6)
      .add("stopped_probe_every", &S::gain, &G::stopped_probe_every, "8",
           "gain: a probe every N checks once growth stopped (only the reopen watch reads it)", 1,
           1e6)
      .add("settle_probes", &S::gain, &G::settle_probes, "4",
           "gain: W, settled when the median probe loss of the last W probes fell by less than "
           "settle_tolerance against the W before",
           1, 1e6)
      .add("settle_tolerance", &S::gain, &G::settle_tolerance, "0.01",
           "gain: settled when the windowed median fell by less than this fraction", 0.0, 1.0)
      .add("min_gain", &S::gain, &G::min_gain, "0.05",
           "gain: a round is kept when the settled probe loss fell by this fraction", 0.0, 1.0)
      .add("reopen_rise", &S::gain, &G::reopen_rise, "0.25",
           "gain: after growth stopped, a probe loss this fraction over the settled one for "
           "settle_probes probes reopens growth (a changed task)",
           0.0)
      .add("round_patience", &S::gain, &G::round_patience, "1.5",
           "gain: a round is not taken back before it has trained this many times the steps the "
           "run's first head took to start learning (its probe loss to fall by min_gain)",
           0.0);
}

/// The rounds' test (criterion learning, and gain's round_test) and the growth window.
void round_test_options(IncrtTable& t) {
  using S = IncrtSettings;
  using G = gf::incrt::GainOptions;
  t.choice("round_test", &S::gain, &G::paired, "paired",
           "gain: what a round must show to be kept. paired: muting its heads costs at least "
           "min_share of the probe loss with a paired t statistic over the probe examples of "
           "at least z_early at any probe, or z when the growth window ends, its heads sitting "
           "out every round_mute_every-th training step meanwhile; relative (the earlier rule): "
           "the settled probe loss fell by min_gain (and, with attribution, muting its heads "
           "costs as much)",
           {{"paired", true}, {"relative", false}})
      .add("min_share", &S::gain, &G::min_share, "0.01",
           "gain, round_test paired: the least fraction of the probe loss a round's heads must "
           "carry",
           0.0, 1.0)
      .add("z", &S::z, "~",
           "learning, gain (round_test paired): the paired t statistic (median over the last "
           "probes) a "
           "round's share must reach when the growth window ends; unset = 1 for learning (keep a "
           "round "
           "whose heads carry min_share at one standard error), 2 for gain",
           0.0)
      .add("loss_floor", &S::gain, &G::loss_floor, "0.05",
           "gain, round_test paired: a round's share is of max(probe loss, loss_floor), so that on "
           "a "
           "solved task (loss near 0) the heads' use does not read as need; a probe loss under it "
           "is settled (no round grows; growth stops past grow_until), and a stopped phase's rise "
           "is measured against at least it",
           0.0)
      .add("round_mute_every", &S::gain, &G::mute_every, "2",
           "gain, round_test paired: the waiting round's heads sit out every N-th training step "
           "(0: never), so that muting them on the probe measures what they add",
           0, 1e9)
      .choice("take_back", &S::gain, &G::take_back_useless, "useless",
              "learning: what takes back a round still unpaid when the growth window ends. "
              "useless: evidence that its heads carry less than min_share (the median share plus "
              "z_back standard errors is under min_share, its trend over the round's probes is "
              "not rising at z_back, and it has trained as long as the learning onset); a round "
              "without that evidence is kept, and one whose share is positive with a bound "
              "reaching min_share lets the next round grow once mature. unproven (the earlier "
              "rule): every round that did not reach min_share at a t of z",
              {{"useless", true}, {"unproven", false}})
      .add("z_back", &S::gain, &G::z_back, "2",
           "learning, take_back useless: the standard errors of the share's upper bound and of "
           "its trend",
           0.0)
      .add("z_early", &S::gain, &G::z_early, "3",
           "gain, round_test paired: the t statistic that pays a round before the growth window "
           "ends",
           0.0)
      .add(
          "attribution", &S::gain, &G::attribution, "true",
          "gain, round_test relative: a round is kept only when muting its heads on the probe also "
          "costs min_gain of the loss (the fall came from the new heads, not from the older ones)")
      .add("grow_until", &S::gain, &G::grow_until, "0.6",
           "gain: no new round after this fraction of the run's steps (after a reopening: of the "
           "steps left then)",
           0.0, 1.0);
}

/// The probe, the trackers and the end of calibration.
void tracker_options(IncrtTable& t) {
  using S = IncrtSettings;
  using Cal = gf::incrt::CalibrationSettings;
  using T = gf::incrt::TrackerSettings;
  t.include(gf::incrt::ProbeSettings::table(), &S::probe)
      .include(T::table("100", "tracker steps per check"), &S::tracker)
      .choice("step_scale", &S::tracker, &T::scale_frobenius, "frobenius",
              "divide A_res by its Frobenius norm in tracker steps (scale-free step sizes) or none",
              {{"frobenius", true}, {"none", false}})
      .add("coupling", &S::tracker, &T::coupling, "false",
           "couple the trackers as the reference code does, gamma* = D+/(D+ + D-): u+ gets "
           "-(1-gamma*) c u-, u- gets +eta gamma*(1-gamma*) c u+, c = u+^T u-")
      .choice("calibration", &S::calibration, &Cal::plateau, "plateau",
              "end of calibration: plateau (E_t has stopped rising) or fixed (calibration_checks)",
              {{"plateau", true}, {"fixed", false}});
  gf::incrt::add_calibration_checks(
      t, &S::calibration, "checks of calibration (fixed), or at least (plateau); no growth before");
  t.add("calibration_window", &S::calibration, &Cal::window, "8",
        "plateau: compare the median E_t of the last N checks with the N before", 1, 1e6)
      .add(
          "plateau_tolerance", &S::calibration, &Cal::tolerance, "0.1",
          "plateau: calibration ends when the last window's median E_t <= (1 + tol) x the previous",
          0.0)
      .add("calibration_max_checks", &S::calibration, &Cal::max_checks, "200",
           "plateau: calibration ends here at the latest", 1, 1e9)
      .add("calibration_max_fraction", &S::calibration, &Cal::max_fraction, "0.25",
           "plateau: calibration ends at the latest after this fraction of the run's steps, so a "
           "growth has time to train (0 = no bound)",
           0.0, 1.0);
  gf::incrt::add_thresholds(
      t, &S::thresholds,
      "relative: theta_w x E_t, the current total directional energy ||sym(C M_a)||_F "
      "(scale-invariant); calibrated: theta_w x Gamma_res(0); phi_w and phi_g x theta_w; "
      "absolute: as given");
}

/// The energy rule: spectrum, thresholds, dwell, patience, the new head and the head-count law.
void growth_options(IncrtTable& t) {
  using S = IncrtSettings;
  t.choice("spectrum", &S::both_halves, "both",
           "both: the energy is the spectral radius of A_res and a growth captures u+ and u- (the "
           "+- pair of one rotation plane); positive: lambda_max > theta_w and lambda_min < phi_w, "
           "u+ only (the paper's formula)",
           {{"both", true}, {"positive", false}})
      .add("theta_w", &S::theta_w, "0.35",
           "growth threshold (relative: x E_t; 0.35 ~ sqrt(1/8): the strongest uncaptured +- pair "
           "holds more than a quarter of E_t^2)",
           0.0)
      .add("phi_w", &S::phi_w, "0.5", "growth needs lambda_min < phi_w")
      .add("phi_g", &S::phi_g, "0.01", "pruning threshold (reported; used by directional_energy)",
           0.0)
      .choice(
          "dwell", &S::dwell_auto, "checks",
          "minimum time between growths: checks (dwell_checks) or auto (kappa/(eta D^2) ln(1/eps))",
          {{"checks", false}, {"auto", true}})
      .add("dwell_checks", &S::dwell_checks, "8", "checks between growths (dwell: checks)", 0, 1e9)
      .add(
          "patience", &S::patience, "3",
          "consecutive checks with the energy over the threshold before a growth (C comes from one "
          "batch: a single check's excess can be that batch's noise)",
          1, 1e6)
      .add("dwell_kappa", &S::dwell_kappa, "2.0", "kappa of the automatic dwell time", 0.0)
      .add("dwell_eps", &S::dwell_eps, "0.05", "eps of the automatic dwell time", 1e-12, 1.0)
      .add("dwell_max_checks", &S::dwell_max_checks, "50", "cap of the automatic dwell time", 0,
           1e9)
      .choice("init", &S::directed, "directed",
              "new head: directed (u+ in the first query column) or random",
              {{"directed", true}, {"random", false}})
      .add("value_variance", &S::value_variance, "~",
           "Var(W_V) of a new head; unset = NTK rule d_k n / (d d_v), n = sequence length", 0.0)
      .add("preserve_function", &S::preserve_function, "true",
           "new head's W_O starts at zero (the model output is unchanged by growth)")
      .add("max_heads", &S::max_heads, "0", "cap on heads per block (0 = the block's own cap)", 0,
           1e6)
      .add("k_constant", &S::k_constant, "1.0",
           "constant c of K* = c kappa_T^2 log(Gamma0/theta_w)", 0.0)
      .add("head_cost", &S::head_cost, "0.1",
           "cost per head in the Lyapunov functional W_t, in units of theta_w", 0.0)
      .add("release_direction", &S::release_direction, "true",
           "when a head is pruned, free its birth direction in Q (unless the prune says otherwise)")
      .add("lyapunov_guard", &S::lyapunov_guard, "true",
           "grow only when lambda_max > theta_w (1 + head_cost), so every growth lowers W_t");
}

const IncrtTable& IncrtSettings::table() {
  static const IncrtTable built = [] {
    IncrtTable t;
    round_options(t);
    round_test_options(t);
    tracker_options(t);
    growth_options(t);
    return t;
  }();
  return built;
}

void register_incrt(gf::Registry& r) {
  r.add_growth({"incrt_geometric",
                "INCRT: grow a head at the largest uncaptured directional energy of A_res",
                IncrtSettings::table().specs()},
               [](const gf::Options& o) { return std::make_unique<IncrtGeometric>(o); });
}

}  // namespace

GROWFORMER_PLUGIN("growth_incrt", "0.1.0", register_incrt)
