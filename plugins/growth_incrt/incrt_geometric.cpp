// INCRT growth policy (`incrt_geometric`): add a head aimed at the largest
// uncaptured directional energy of A_res = P_perp sym(C M_a) P_perp while that
// energy is above a calibrated threshold (see docs/INCRT.md and spec/INCRT.md).
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

#include <growformer/incrt_math.hpp>

#include "gain_rounds.hpp"

namespace {

using gf::incrt::Mat;
using gf::incrt::Vec;

/// Policy state of one attention block.
struct BlockState {
  bool started = false;
  gf::incrt::TrackerPair tracker;
  std::vector<Vec> q;               // directions at which earlier heads were born
  std::vector<long> q_owner;        // head id per Q column (-1 = unknown)
  size_t checks = 0;                // checks seen
  Vec calib_norms;                  // E_t = ||sym(C M_a)||_F of the calibration checks
  Vec calib_energy;                 // unused since state version 2 (kept empty)
  bool calibrated = false;
  double gamma0 = 0.0, theta_w = 0.0, phi_w = 0.0, phi_g = 0.0, energy0 = 0.0;
  double gamma_floor = 0.0;         // E_t at the first check (the untrained block)
  double pair0 = 0.0;               // lambda_max - lambda_min at calibration (one head's pair)
  double energy_now = 0.0;          // E_t at the last check
  long last_growth_check = -1000000;
  size_t over = 0;                  // consecutive active checks with the energy over the threshold
  size_t grown = 0;
  size_t heads = 0;                 // head count at the last check
  double w_t = 0.0;                 // Lyapunov functional at the last check
  double lambda_max = 0.0, lambda_min = 0.0, a_norm = 0.0;
  bool pending = false;             // an AddHead was returned and not yet confirmed
  Vec pending_dir;
  Vec pending_dir2;                 // the other half's direction (spectrum: both), may be empty
};

class IncrtGeometric : public gf::GrowthPolicy {
 public:
  explicit IncrtGeometric(const gf::Options& o)
      : first_sequence_(o.get_string("probe") == "first_sequence"),
        normalize_c_(o.get_bool("normalize_c")),
        exact_(o.get_string("tracker") == "exact"),
        rule_(o.get_string("mca_rule") == "reference" ? gf::incrt::McaRule::Reference
                                                      : gf::incrt::McaRule::Exin),
        eta_plus_(o.has_value("eta_plus") ? o.get_float("eta_plus") : -1.0),
        eta_minus_(o.has_value("eta_minus") ? o.get_float("eta_minus") : -1.0),
        tracker_iters_(static_cast<size_t>(o.get_int("tracker_iters"))),
        scale_frobenius_(o.get_string("step_scale") == "frobenius"),
        coupling_(o.get_bool("coupling")),
        calibration_checks_(static_cast<size_t>(o.get_int("calibration_checks"))),
        absolute_(o.get_string("thresholds") == "absolute"),
        track_scale_(o.get_string("thresholds") == "relative"),
        both_halves_(o.get_string("spectrum") == "both"),
        plateau_(o.get_string("calibration") == "plateau"),
        calibration_window_(static_cast<size_t>(o.get_int("calibration_window"))),
        plateau_tolerance_(o.get_float("plateau_tolerance")),
        calibration_max_checks_(static_cast<size_t>(o.get_int("calibration_max_checks"))),
        calibration_max_fraction_(o.get_float("calibration_max_fraction")),
        theta_opt_(o.get_float("theta_w")),
        phi_w_opt_(o.get_float("phi_w")),
        phi_g_opt_(o.get_float("phi_g")),
        dwell_auto_(o.get_string("dwell") == "auto"),
        dwell_checks_(o.get_int("dwell_checks")),
        patience_(static_cast<size_t>(o.get_int("patience"))),
        dwell_kappa_(o.get_float("dwell_kappa")),
        dwell_eps_(o.get_float("dwell_eps")),
        dwell_max_checks_(o.get_int("dwell_max_checks")),
        directed_(o.get_string("init") == "directed"),
        value_variance_(o.has_value("value_variance") ? o.get_float("value_variance") : -1.0),
        preserve_(o.get_bool("preserve_function")),
        max_heads_(static_cast<size_t>(o.get_int("max_heads"))),
        k_constant_(o.get_float("k_constant")),
        head_cost_(o.get_float("head_cost")),
        release_default_(o.get_bool("release_direction")),
        lyapunov_guard_(o.get_bool("lyapunov_guard")),
        gain_mode_(o.get_string("criterion") == "gain"),
        round_(o.get_string("round")),
        plane_threshold_(o.get_float("plane_threshold")) {
    gain_opt_.probe_examples = static_cast<size_t>(o.get_int("probe_examples"));
    gain_opt_.probe_every = static_cast<size_t>(o.get_int("probe_every"));
    gain_opt_.settle_probes = static_cast<size_t>(o.get_int("settle_probes"));
    gain_opt_.settle_tolerance = o.get_float("settle_tolerance");
    gain_opt_.min_gain = o.get_float("min_gain");
    gain_opt_.reopen_rise = o.get_float("reopen_rise");
    gain_opt_.grow_until = o.get_float("grow_until");
    gain_opt_.round_patience = o.get_float("round_patience");
    gain_opt_.attribution = o.get_bool("attribution");
    if (absolute_ && !o.is_set("theta_w"))
      o.fail("theta_w", "thresholds: absolute needs an explicit theta_w");
  }

  bool needs_probe() const override { return true; }

  /// criterion: gain, at a probe while a round waits for its test: the round's heads muted.
  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView& view) const override {
    if (!gain_mode_ || !gain_opt_.attribution || !gain_.has_prev || gain_.done || gain_.round.empty() ||
        validation_probe(view.step) == 0)
      return {};
    return {round_heads()};
  }

  /// The heads of the round waiting for its test.
  std::vector<gf::HeadRef> round_heads() const {
    std::vector<gf::HeadRef> set;
    for (const auto& [b, id] : gain_.round) set.push_back({b, static_cast<int>(id)});
    return set;
  }

  size_t validation_probe(size_t step) const override {
    (void)step;
    if (!gain_mode_) return 0;
    return gain_checks_ % std::max<size_t>(gain_opt_.probe_every, 1) == 0 ? gain_opt_.probe_examples : 0;
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
    if (gain_mode_) {
      if (view.metrics.probe_examples > 0) gain_step(view, edits);
      gain_checks_ += 1;
    }
    return edits;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    (void)view;
    auto it = blocks_.find(e.block);
    if (it == blocks_.end()) return;
    BlockState& st = it->second;
    const size_t d = st.tracker.up.size();
    if (e.kind == gf::Edit::Kind::AddHead && gain_pending_ > 0) {
      gain_pending_ -= 1;  // a head of this policy's round
      gain_.round.emplace_back(e.block, new_head_id);
      st.grown += 1;
      st.heads += 1;
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
      st.heads += 1;
      st.tracker.reset(d, rng_, st.q);  // restart both trackers in the new complement
    } else {
      const bool release = e.release_direction.value_or(release_default_);
      if (st.heads > 0) st.heads -= 1;
      auto& r = gain_.round;
      r.erase(std::remove(r.begin(), r.end(), std::make_pair(e.block, static_cast<long>(e.head_id))),
              r.end());
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

  std::vector<std::string> summary_columns() const override { return {"K_obs", "K_pred"}; }

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
    if (gain_mode_) {
      out["rounds"] = static_cast<double>(gain_.rounds);
      out["rounds_rejected"] = static_cast<double>(gain_.rejected);
      out["reopened"] = static_cast<double>(gain_.reopened);
    }
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
    os << "incrt_geometric 7 " << (seeded_ ? 1 : 0) << ' ' << rng_.state() << ' '
       << rng_.increment() << ' ' << blocks_.size() << ' ';
    for (const auto& kv : blocks_) {
      const BlockState& s = kv.second;
      os << "block " << kv.first << ' ' << s.started << ' ';
      gf::incrt::put_vec(os, s.tracker.up);
      gf::incrt::put_vec(os, s.tracker.um);
      gf::incrt::put(os, s.tracker.lambda_max);
      gf::incrt::put(os, s.tracker.lambda_min);
      os << s.q.size() << ' ';
      for (size_t i = 0; i < s.q.size(); ++i) {
        gf::incrt::put_vec(os, s.q[i]);
        os << s.q_owner[i] << ' ';
      }
      os << s.checks << ' ';
      gf::incrt::put_vec(os, s.calib_norms);
      gf::incrt::put_vec(os, s.calib_energy);
      os << s.calibrated << ' ';
      for (double v : {s.gamma0, s.theta_w, s.phi_w, s.phi_g, s.energy0, s.w_t, s.lambda_max,
                       s.lambda_min, s.a_norm, s.gamma_floor, s.pair0, s.energy_now})
        gf::incrt::put(os, v);
      os << s.last_growth_check << ' ' << s.grown << ' ' << s.heads << ' ' << s.pending << ' '
         << s.over << ' ';
      gf::incrt::put_vec(os, s.pending_dir);
      gf::incrt::put_vec(os, s.pending_dir2);
    }
    gain_.save(os);
    os << gain_checks_ << ' ' << gain_pending_ << ' ';
    os << "end";
    return os.str();
  }

  void load_state(const std::string& text) override {
    if (text.empty()) return;
    gf::incrt::Reader r(text);
    r.expect("incrt_geometric");
    // Version 2 (before growth patience) has no over-threshold counter: it loads as 0.
    const std::string version = r.word();
    // Version 3 (before growth in rounds) has no round state: it loads with none; version 4
    // (before the round patience) has no learning onset: it loads as not seen yet.
    // (version 5, before growth_until counted from a reopening, loads as never reopened)
    // (version 6, before the round's shares, loads with none measured)
    if (version != "2" && version != "3" && version != "4" && version != "5" && version != "6" &&
        version != "7")
      throw gf::RuntimeError("incrt: policy state: expected version '2' to '7', got '" + version + "'");
    seeded_ = r.u64() != 0;
    const uint64_t s = r.u64(), inc = r.u64();
    rng_.restore(s, inc);
    const size_t nb = r.u64();
    blocks_.clear();
    for (size_t b = 0; b < nb; ++b) {
      r.expect("block");
      BlockState& st = blocks_[r.u64()];
      st.started = r.u64() != 0;
      st.tracker.up = r.vec();
      st.tracker.um = r.vec();
      st.tracker.lambda_max = r.num();
      st.tracker.lambda_min = r.num();
      const size_t nq = r.u64();
      for (size_t i = 0; i < nq; ++i) {
        st.q.push_back(r.vec());
        st.q_owner.push_back(r.i64());
      }
      st.checks = r.u64();
      st.calib_norms = r.vec();
      st.calib_energy = r.vec();
      st.calibrated = r.u64() != 0;
      for (double* v : {&st.gamma0, &st.theta_w, &st.phi_w, &st.phi_g, &st.energy0, &st.w_t,
                        &st.lambda_max, &st.lambda_min, &st.a_norm, &st.gamma_floor, &st.pair0,
                        &st.energy_now})
        *v = r.num();
      st.last_growth_check = r.i64();
      st.grown = r.u64();
      st.heads = r.u64();
      st.pending = r.u64() != 0;
      st.over = version == "2" ? 0 : r.u64();
      st.pending_dir = r.vec();
      st.pending_dir2 = r.vec();
    }
    gain_ = gf::incrt::GainState{};
    gain_checks_ = 0;
    gain_pending_ = 0;
    if (version == "4" || version == "5" || version == "6" || version == "7") {
      gain_.load(r, version != "4", version == "6" || version == "7", version == "7");
      gain_checks_ = r.u64();
      gain_pending_ = r.u64();
    }
    r.expect("end");
  }

 private:
  std::map<std::string, double> block_summary(const BlockState& st) const {
    std::map<std::string, double> b;
    b["gamma_res0"] = st.gamma0;
    b["gamma_floor"] = st.gamma_floor;
    b["energy_now"] = st.energy_now;
    b["theta_w"] = st.theta_w;
    b["phi_w"] = st.phi_w;
    b["phi_g"] = st.phi_g;
    // Head-count law K* = c kappa_T^2 log(Gamma0 / floor), from the spectrum of
    // sym(C M_a) at the end of calibration (before any growth), independent of theta_w:
    // kappa_T = total directional energy sum |lambda_i| over the energy one head's
    // +- pair carries (lambda_max - lambda_min), i.e. the number of head-sized pairs;
    // the log term: how far the learned structure rose above the untrained block's
    // energy (the first check), log(1 + Gamma0 / floor) so that it stays positive.
    const double kappa = st.pair0 > 0 ? st.energy0 / st.pair0 : 0.0;
    const double logr = st.gamma_floor > 0 ? std::log1p(st.gamma0 / st.gamma_floor) : 0.0;
    const double k_pred = st.calibrated ? k_constant_ * kappa * kappa * logr : 0.0;
    b["kappa_T"] = kappa;
    b["K_pred"] = k_pred;
    b["K_obs"] = static_cast<double>(st.heads);
    b["ratio"] = k_pred > 0 ? static_cast<double>(st.heads) / k_pred : 0.0;
    b["W_t"] = st.w_t;
    b["grown"] = static_cast<double>(st.grown);
    b["lambda_max"] = st.lambda_max;
    b["lambda_min"] = st.lambda_min;
    b["a_res_norm"] = st.a_norm;
    return b;
  }

  double eta_plus(size_t d) const {
    return eta_plus_ > 0 ? eta_plus_ : gf::incrt::default_eta_plus(scale_frobenius_, d);
  }
  double eta_minus(size_t d) const { return eta_minus_ > 0 ? eta_minus_ : 0.5 * eta_plus(d); }

  /// Thresholds for the current check (energy = E_t = ||sym(C M_a)||_F).
  void set_thresholds(BlockState& st, double energy) const {
    if (absolute_) {
      st.theta_w = theta_opt_;
      st.phi_w = phi_w_opt_;
      st.phi_g = phi_g_opt_;
      return;
    }
    const double scale = track_scale_ ? energy : st.gamma0;
    st.theta_w = theta_opt_ * scale;
    st.phi_w = phi_w_opt_ * st.theta_w;
    st.phi_g = phi_g_opt_ * st.theta_w;
  }

  /// Calibration ends after calibration_checks checks (calibration: fixed), or
  /// (plateau) once at least calibration_checks are seen and the median of E_t over
  /// the last calibration_window checks is within plateau_tolerance of the median over
  /// the window before (the first heads have finished learning), or at
  /// calibration_max_checks, or once STEP reaches calibration_max_fraction of the run's
  /// TOTAL steps (a growth needs training time after it).
  bool calibration_done(const BlockState& st, size_t step, size_t total) const {
    const size_t n = st.calib_norms.size();
    if (!plateau_) return n >= calibration_checks_;
    if (n >= calibration_max_checks_) return true;
    if (calibration_max_fraction_ > 0 && total > 0 &&
        double(step) >= calibration_max_fraction_ * double(total))
      return true;
    const size_t w = std::max<size_t>(calibration_window_, 1);
    if (n < calibration_checks_ || n < 2 * w) return false;
    const Vec last(st.calib_norms.end() - long(w), st.calib_norms.end());
    const Vec before(st.calib_norms.end() - long(2 * w), st.calib_norms.end() - long(w));
    const double m1 = gf::incrt::median(last), m0 = gf::incrt::median(before);
    return m1 <= (1.0 + plateau_tolerance_) * m0;
  }

  void check_block(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                   std::vector<gf::Edit>& edits) {
    gf::AttentionBlock& block = *bv.block;
    const std::vector<gf::HeadInfo> heads = block.heads();
    const size_t d = bv.probe->input.dim(2);
    st.heads = heads.size();
    if (!st.started) {
      st.tracker.reset(d, rng_, st.q);
      st.started = true;
    }
    st.pending = false;  // an edit returned by the last check that was not applied
    // Heads removed by someone else (a pruning rule's edits are not shown to this
    // policy): free their birth directions when release_direction is on.
    if (release_default_) {
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

    // M_a = sum of the heads' antisymmetric motors; C from the probe.
    Mat ma(d);
    std::vector<Mat> motors;  // kept for a round (criterion: gain)
    for (const gf::HeadInfo& h : heads) {
      if (!h.head) continue;
      Mat m = gf::incrt::head_motor(*h.head, d);
      for (size_t i = 0; i < ma.a.size(); ++i) ma.a[i] += m.a[i];
      if (gain_mode_) motors.push_back(std::move(m));
    }
    size_t ntok = 0;
    const Mat c =
        gf::incrt::gram_from_probe(bv.probe->input, bv.probe->mask(), first_sequence_, normalize_c_, &ntok);
    const size_t nseq = first_sequence_ ? std::min<size_t>(bv.probe->input.dim(0), 1)
                                        : bv.probe->input.dim(0);
    const double seq_len = nseq ? double(ntok) / double(nseq) : 1.0;
    const Mat sfull = gf::incrt::sym_cm(c, ma);
    const double energy = gf::incrt::frobenius(sfull);  // E_t: total directional energy
    if (gain_mode_) round_inputs_[bv.index] = {c, std::move(motors), seq_len};
    const Mat a = gf::incrt::project(sfull, st.q);
    const double a_norm = gf::incrt::frobenius(a);

    const gf::incrt::Eigen eig = gf::incrt::jacobi_eigen(a, exact_);
    const Vec& ev = eig.values;
    const double gap_top = d >= 2 ? ev[d - 1] - ev[d - 2] : 0.0;
    const double gap_bottom = d >= 2 ? ev[1] - ev[0] : 0.0;

    // Trackers.
    if (exact_) {
      st.tracker.exact(a, st.q, &eig);
    } else {
      const double scale = scale_frobenius_ ? a_norm : 1.0;
      double gamma = -1.0;  // uncoupled
      if (coupling_) gamma = gap_top + gap_bottom > 0 ? gap_top / (gap_top + gap_bottom) : 0.5;
      if (scale > 0) {
        st.tracker.update(a, st.q, eta_plus(d), eta_minus(d), rule_, tracker_iters_, scale, gamma);
      } else {
        st.tracker.lambda_max = st.tracker.lambda_min = 0.0;  // no directional energy at all
      }
    }
    st.lambda_max = st.tracker.lambda_max;
    st.lambda_min = st.tracker.lambda_min;
    st.a_norm = a_norm;
    st.energy_now = energy;
    const size_t check_index = st.checks++;
    if (check_index == 0) st.gamma_floor = energy;

    // Calibration of Gamma_res(0) and of the head-count law's inputs (no growth before).
    bool calibrated_now = false;
    if (!st.calibrated) {
      st.calib_norms.push_back(energy);
      if (calibration_done(st, view.step, view.total_steps)) {
        const size_t w = plateau_ ? std::min(st.calib_norms.size(), std::max<size_t>(calibration_window_, 1))
                                  : st.calib_norms.size();
        st.gamma0 = gf::incrt::median(Vec(st.calib_norms.end() - long(w), st.calib_norms.end()));
        // Q is empty before the first growth, so ev is the spectrum of sym(C M_a).
        double total = 0.0;
        for (double v : ev) total += std::fabs(v);
        st.energy0 = total;
        st.pair0 = d ? ev[d - 1] - ev[0] : 0.0;
        st.calibrated = true;
        calibrated_now = true;
      }
    }
    if (st.calibrated) set_thresholds(st, energy);
    if (calibrated_now) {
      gf::Event cal;
      cal.type = "calibrate";
      cal.block = static_cast<long>(bv.index);
      const auto sum = block_summary(st);
      cal.numbers = {{"step", double(view.step)},        {"gamma_res0", st.gamma0},
                     {"gamma_floor", st.gamma_floor},    {"theta_w", st.theta_w},
                     {"phi_w", st.phi_w},                {"phi_g", st.phi_g},
                     {"energy0", st.energy0},            {"pair0", st.pair0},
                     {"kappa_T", sum.at("kappa_T")},     {"K_pred", sum.at("K_pred")},
                     {"checks", double(st.calib_norms.size())}};
      cal.strings = {{"policy", "incrt_geometric"}};
      if (view.events) view.events->emit(cal);
    }

    // Lyapunov functional: uncaptured energy above threshold plus a cost per head.
    double uncaptured = 0.0;
    for (double v : ev) uncaptured += std::max((both_halves_ ? std::fabs(v) : v) - st.theta_w, 0.0);
    st.w_t = st.calibrated ? uncaptured + head_cost_ * st.theta_w * double(heads.size()) : 0.0;

    // Dwell time in checks.
    long dwell = dwell_checks_;
    if (dwell_auto_) {
      const double scale = scale_frobenius_ && a_norm > 0 ? a_norm : 1.0;
      const double gap = gap_top / scale;
      const double iters = gap > 0 ? dwell_kappa_ / (eta_plus(d) * gap * gap) *
                                         std::log(1.0 / dwell_eps_)
                                   : 1e18;
      const double in_checks = std::ceil(iters / double(std::max<size_t>(tracker_iters_, 1)));
      dwell = static_cast<long>(std::min<double>(in_checks, double(dwell_max_checks_)));
    }
    const long since = static_cast<long>(check_index) - st.last_growth_check;
    // The energy the criterion reads: the spectral radius of A_res (both halves), or
    // lambda_max (positive half, the paper's formula).
    const bool minus_first = both_halves_ && -st.lambda_min > st.lambda_max;
    const double lead = both_halves_ ? std::max(st.lambda_max, -st.lambda_min) : st.lambda_max;
    // Growth must pay for its head: the uncaptured energy it removes (at least
    // lead - theta_w) exceeds the head cost, so W_t strictly decreases.
    const double need = st.theta_w * (1.0 + (lyapunov_guard_ ? head_cost_ : 0.0));
    // The energy must stay over the threshold for `patience` consecutive active checks: C
    // comes from one training batch, so one check's spectrum carries that batch's noise.
    const bool active = st.calibrated && !calibrated_now;
    st.over = active && lead > need ? st.over + 1 : 0;

    gf::Event ev_check;
    ev_check.type = "check";
    ev_check.block = static_cast<long>(bv.index);
    ev_check.numbers = {{"step", double(view.step)},
                        {"lambda_max", st.lambda_max},
                        {"lambda_min", st.lambda_min},
                        {"lambda_max_exact", d ? ev[d - 1] : 0.0},
                        {"lambda_min_exact", d ? ev[0] : 0.0},
                        {"energy", lead},
                        {"a_res_norm", a_norm},
                        {"total_energy", energy},
                        {"gap_top", gap_top},
                        {"theta_w", st.theta_w},
                        {"phi_w", st.phi_w},
                        {"phi_g", st.phi_g},
                        {"heads", double(heads.size())},
                        {"q_rank", double(st.q.size())},
                        {"W_t", st.w_t},
                        {"tokens", double(ntok)},
                        {"dwell", double(dwell)},
                        {"over", double(st.over)}};
    ev_check.strings = {{"policy", "incrt_geometric"},
                        {"phase", st.calibrated ? "active" : "calibrating"}};
    if (view.events) view.events->emit(ev_check);

    if (gain_mode_ || !st.calibrated || calibrated_now) return;
    const size_t cap = std::min(max_heads_ > 0 ? max_heads_ : static_cast<size_t>(-1),
                                block.max_heads());
    const bool enough = st.over >= std::max<size_t>(patience_, 1);
    // The paper's second condition; vacuous for the traceless A_res (kept for the
    // positive-half rule).
    const bool minor = both_halves_ || st.lambda_min < st.phi_w;
    const size_t room = both_halves_ ? 2 : 1;
    if (!(enough && minor && since >= dwell && heads.size() < cap && st.q.size() + room <= d))
      return;

    const Vec& dir = minus_first ? st.tracker.um : st.tracker.up;
    gf::Edit e;
    e.kind = gf::Edit::Kind::AddHead;
    e.block = bv.index;
    e.init.mode = directed_ ? "directed" : "random";
    e.init.direction.assign(dir.begin(), dir.end());
    e.init.preserve_function = preserve_;
    e.init.value_variance = new_head_variance(heads, d, seq_len);
    e.cause.type = "grow";
    e.cause.block = static_cast<long>(bv.index);
    e.cause.numbers = {{"step", double(view.step)},   {"lambda_max", st.lambda_max},
                       {"lambda_min", st.lambda_min}, {"energy", lead},
                       {"a_res_norm", a_norm},        {"total_energy", energy},
                       {"theta_w", st.theta_w},       {"phi_w", st.phi_w},
                       {"gap_top", gap_top},          {"W_t", st.w_t},
                       {"heads_before", double(heads.size())},
                       {"checks_over", double(st.over)},
                       {"value_variance", e.init.value_variance}};
    e.cause.strings = {{"policy", "incrt_geometric"},
                       {"init", e.init.mode},
                       {"half", minus_first ? "negative" : "positive"}};
    st.pending = true;
    st.pending_dir = dir;
    st.pending_dir2.clear();
    if (both_halves_) st.pending_dir2 = minus_first ? st.tracker.up : st.tracker.um;
    st.last_growth_check = static_cast<long>(check_index);
    st.over = 0;  // A_res changes with the new head's directions in Q
    edits.push_back(std::move(e));
  }

  /// The round rule at a check with a validation probe (criterion: gain).
  void gain_step(const gf::TrainView& view, std::vector<gf::Edit>& edits) {
    gain_pending_ = 0;  // edits returned by an earlier check and not applied
    const gf::RunMetrics& m = view.metrics;
    gain_.watch(m.probe_loss, view.step, gain_opt_.min_gain);
    const gf::incrt::GainState before = gain_;
    // The rounds begin once every block's calibration has ended (its first heads have learned:
    // before that the probe loss can sit flat at chance and look settled).
    bool calibrated = true;
    for (const gf::BlockView& bv : view.blocks)
      if (bv.block && bv.block->can_edit_heads()) calibrated = calibrated && blocks_[bv.index].calibrated;
    double muted = std::numeric_limits<double>::quiet_NaN();  // the probe without the round
    if (!gain_.round.empty())
      if (const gf::Ablation* a = m.ablation(round_heads())) muted = a->loss;
    const gf::incrt::GainDecision dec =
        calibrated ? gain_.observe(m.probe_loss, view.step, view.total_steps, gain_opt_, muted)
                   : gf::incrt::GainDecision{};
    const auto windows = gain_.windows(std::max<size_t>(gain_opt_.settle_probes, 1));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    gf::Event pe;
    pe.type = "probe";
    pe.numbers = {{"step", double(view.step)},          {"probe_loss", m.probe_loss},
                  {"probe_accuracy", m.probe_accuracy}, {"examples", double(m.probe_examples)},
                  {"train_loss", m.train_loss},         {"train_steps", double(m.train_steps)},
                  {"val_step", double(m.val_step)},      {"val_loss", m.val_loss},
                  {"window", windows.first},            {"window_before", windows.second},
                  {"onset_steps", gain_.onset >= 0 ? double(gain_.onset) : nan},
                  {"probe_loss_without_round", muted},
                  {"round_share", dec.share}};
    // numbers not measured yet (no validation, no full window) are left out, not written as null
    pe.numbers.erase(std::remove_if(pe.numbers.begin(), pe.numbers.end(),
                                    [](const auto& kv) { return !std::isfinite(kv.second); }),
                     pe.numbers.end());
    pe.strings = {{"policy", "incrt_geometric"},
                  {"phase", !calibrated ? "calibrating" : before.done ? "stopped" : "settling"},
                  {"plot", "probe_loss window window_before"}};  // drawn by `growformer report`
    if (view.events) view.events->emit(pe);
    using K = gf::incrt::GainDecision::Kind;
    if (dec.kind == K::None) return;
    auto note = [&](const char* type, std::vector<std::pair<std::string, double>> nums) {
      gf::Event e;
      e.type = type;
      e.numbers = {{"step", double(view.step)}};
      for (auto& kv : nums) e.numbers.push_back(kv);
      e.strings = {{"policy", "incrt_geometric"}};
      if (view.events) view.events->emit(e);
    };
    if (dec.kind == K::Reopen) {
      note("reopen", {{"probe_loss", m.probe_loss}, {"settled_before", before.done_at}});
      return;
    }
    if (dec.kind == K::Stop) {
      note("growth_stop", {{"settled", dec.settled}, {"grow_until", gain_opt_.grow_until}});
      return;
    }
    if (dec.kind == K::Reject) {
      // the last round did not pay: its heads go
      for (const auto& [b, id] : before.round) {
        gf::Edit e;
        e.kind = gf::Edit::Kind::RemoveHead;
        e.block = b;
        e.head_id = static_cast<int>(id);
        e.cause.type = "prune";
        e.cause.block = static_cast<long>(b);
        e.cause.numbers = {{"step", double(view.step)},   {"gain", dec.gain},
                           {"min_gain", gain_opt_.min_gain}, {"settled_before", before.prev},
                           {"settled", dec.settled},
                           {"share", std::isfinite(dec.share) ? dec.share : -1.0}};
        e.cause.strings = {{"policy", "incrt_geometric"}, {"reason", "round_rejected"}};
        edits.push_back(std::move(e));
      }
      gain_.round.clear();
      note("round_rejected", {{"gain", dec.gain}, {"min_gain", gain_opt_.min_gain},
                              {"settled_before", before.prev}, {"settled", dec.settled},
                              {"heads_removed", double(before.round.size())},
                              {"round_share", std::isfinite(dec.share) ? dec.share : -1.0},
                              {"round_age", double(view.step - before.round_step)},
                              {"patience_steps", before.patience_steps(gain_opt_)}});
      return;
    }
    // Grow: one round over the editable blocks
    size_t added = 0;
    for (const gf::BlockView& bv : view.blocks) {
      auto in = round_inputs_.find(bv.index);
      if (!bv.block || !bv.block->can_edit_heads() || in == round_inputs_.end()) continue;
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      const size_t cap = std::min(max_heads_ > 0 ? max_heads_ : static_cast<size_t>(-1),
                                  bv.block->max_heads());
      const size_t room = cap > heads.size() ? cap - heads.size() : 0;
      const gf::incrt::PlaneResidual pr =
          gf::incrt::plane_residual(in->second.c, in->second.motors, plane_threshold_);
      size_t n = round_ == "one" ? 1 : round_ == "double" ? heads.size() : std::min(pr.planes, heads.size());
      n = pr.vectors.empty() ? 0 : std::min(n, room);
      for (size_t i = 0; i < n; ++i) {
        const size_t v = std::min(2 * i, pr.vectors.size() - 1);
        gf::Edit e;
        e.kind = gf::Edit::Kind::AddHead;
        e.block = bv.index;
        e.init.mode = directed_ ? "directed" : "random";
        e.init.direction.assign(pr.vectors[v].begin(), pr.vectors[v].end());
        e.init.preserve_function = preserve_;
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
        e.cause.strings = {{"policy", "incrt_geometric"}, {"init", e.init.mode}, {"criterion", "gain"}};
        edits.push_back(std::move(e));
      }
      if (n == 0)
        note("no_plane", {{"block", double(bv.index)}, {"planes", double(pr.planes)},
                          {"captured_scale", pr.captured_scale}, {"room", double(room)},
                          {"settled", dec.settled}});
      added += n;
    }
    gain_.grown(added, dec.settled, view.step);
    gain_pending_ = added;
  }

  /// Var(W_V) of a new head: the option, else the NTK rule.
  double new_head_variance(const std::vector<gf::HeadInfo>& heads, size_t d, double seq_len) const {
    return value_variance_ > 0 ? value_variance_ : ntk_variance(heads, d, seq_len);
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

  bool first_sequence_, normalize_c_, exact_;
  gf::incrt::McaRule rule_;
  double eta_plus_, eta_minus_;
  size_t tracker_iters_;
  bool scale_frobenius_, coupling_;
  size_t calibration_checks_;
  bool absolute_, track_scale_, both_halves_, plateau_;
  size_t calibration_window_;
  double plateau_tolerance_;
  size_t calibration_max_checks_;
  double calibration_max_fraction_;
  double theta_opt_, phi_w_opt_, phi_g_opt_;
  bool dwell_auto_;
  long dwell_checks_;
  size_t patience_;
  double dwell_kappa_, dwell_eps_;
  long dwell_max_checks_;
  bool directed_;
  double value_variance_;
  bool preserve_;
  size_t max_heads_;
  double k_constant_, head_cost_;
  bool release_default_, lyapunov_guard_;
  bool gain_mode_;
  std::string round_;
  double plane_threshold_;
  gf::incrt::GainOptions gain_opt_;
  gf::incrt::GainState gain_;
  size_t gain_checks_ = 0;   // checks seen (a probe every probe_every of them)
  size_t gain_pending_ = 0;  // AddHead edits of a round returned and not yet confirmed
  // what a round reads of this check, per block (criterion: gain; not state): C, the heads'
  // motors and the valid tokens per probe sequence
  struct RoundInputs {
    Mat c;
    std::vector<Mat> motors;
    double seq_len = 1.0;
  };
  std::map<size_t, RoundInputs> round_inputs_;

  bool seeded_ = false;
  gf::Rng rng_;
  std::map<size_t, BlockState> blocks_;
};

gf::OptionSpecs incrt_options() {
  using gf::OptType;
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"criterion", OptType::String, "gain",
       "gain: grow in rounds, each sized and aimed by the uncaptured planes and kept only when "
       "the settled validation-probe loss falls by min_gain (docs/INCRT.md); energy: grow while "
       "the uncaptured energy of A_res exceeds theta_w (thresholds: calibrated is the paper's rule)",
       -inf, inf, {"gain", "energy"}},
      {"round", OptType::String, "double",
       "gain: heads per round: double (as many as the block has), planes (the uncaptured planes "
       "over plane_threshold, at most doubling) or one",
       -inf, inf, {"double", "planes", "one"}},
      {"plane_threshold", OptType::Float, "0.5",
       "gain: an uncaptured plane counts when over this fraction of the median head's top plane",
       0.0, inf, {}},
      {"probe_examples", OptType::Int, "128", "gain: validation examples per probe", 1, 1e7, {}},
      {"probe_every", OptType::Int, "2", "gain: a validation probe every N checks", 1, 1e6, {}},
      {"settle_probes", OptType::Int, "4",
       "gain: W, settled when the median probe loss of the last W probes fell by less than "
       "settle_tolerance against the W before", 1, 1e6, {}},
      {"settle_tolerance", OptType::Float, "0.01",
       "gain: settled when the windowed median fell by less than this fraction", 0.0, 1.0, {}},
      {"min_gain", OptType::Float, "0.05",
       "gain: a round is kept when the settled probe loss fell by this fraction", 0.0, 1.0, {}},
      {"reopen_rise", OptType::Float, "0.25",
       "gain: after growth stopped, a probe loss this fraction over the settled one for "
       "settle_probes probes reopens growth (a changed task)",
       0.0, inf, {}},
      {"round_patience", OptType::Float, "1.5",
       "gain: a round is not taken back before it has trained this many times the steps the "
       "run's first head took to start learning (its probe loss to fall by min_gain)",
       0.0, inf, {}},
      {"attribution", OptType::Bool, "true",
       "gain: a round is kept only when muting its heads on the probe also costs min_gain of "
       "the loss (the fall came from the new heads, not from the older ones training on)",
       -inf, inf, {}},
      {"grow_until", OptType::Float, "0.6",
       "gain: no new round after this fraction of the run's steps (after a reopening: of the "
       "steps left then)", 0.0, 1.0, {}},
      {"probe", OptType::String, "batch",
       "tokens for C = X^T X: first_sequence (reference code) or batch (all valid tokens)", -inf,
       inf, {"first_sequence", "batch"}},
      {"normalize_c", OptType::Bool, "true", "divide C by the token count", -inf, inf, {}},
      {"tracker", OptType::String, "online",
       "online (Oja + MCA trackers) or exact (eigendecomposition of A_res)", -inf, inf,
       {"online", "exact"}},
      {"mca_rule", OptType::String, "exin",
       "minor tracker: exin (MCA EXIN matrix form) or reference (extra factor u^T A u)", -inf,
       inf, {"exin", "reference"}},
      {"eta_plus", OptType::Float, "~",
       "Oja step size; unset = 0.5 with step_scale: frobenius, 1/(10 d) with none", 0.0, 2.0, {}},
      {"eta_minus", OptType::Float, "~", "MCA step size; unset = eta_plus / 2", 0.0, 2.0, {}},
      {"tracker_iters", OptType::Int, "100", "tracker steps per check", 1, 1e7, {}},
      {"step_scale", OptType::String, "frobenius",
       "divide A_res by its Frobenius norm in tracker steps (scale-free step sizes) or none",
       -inf, inf, {"frobenius", "none"}},
      {"coupling", OptType::Bool, "false",
       "couple the trackers as the reference code does, gamma* = D+/(D+ + D-): u+ gets "
       "-(1-gamma*) c u-, u- gets +eta gamma*(1-gamma*) c u+, c = u+^T u-",
       -inf, inf, {}},
      {"calibration", OptType::String, "plateau",
       "end of calibration: plateau (E_t has stopped rising) or fixed (calibration_checks)", -inf,
       inf, {"plateau", "fixed"}},
      {"calibration_checks", OptType::Int, "16",
       "checks of calibration (fixed), or at least (plateau); no growth before", 1, 1e6, {}},
      {"calibration_window", OptType::Int, "8",
       "plateau: compare the median E_t of the last N checks with the N before", 1, 1e6, {}},
      {"plateau_tolerance", OptType::Float, "0.1",
       "plateau: calibration ends when the last window's median E_t <= (1 + tol) x the previous",
       0.0, inf, {}},
      {"calibration_max_checks", OptType::Int, "200", "plateau: calibration ends here at the latest",
       1, 1e9, {}},
      {"calibration_max_fraction", OptType::Float, "0.25",
       "plateau: calibration ends at the latest after this fraction of the run's steps, so a "
       "growth has time to train (0 = no bound)",
       0.0, 1.0, {}},
      {"thresholds", OptType::String, "relative",
       "relative: theta_w x E_t, the current total directional energy ||sym(C M_a)||_F "
       "(scale-invariant); calibrated: theta_w x Gamma_res(0); phi_w and phi_g x theta_w; "
       "absolute: as given",
       -inf, inf, {"relative", "calibrated", "absolute"}},
      {"spectrum", OptType::String, "both",
       "both: the energy is the spectral radius of A_res and a growth captures u+ and u- (the "
       "+- pair of one rotation plane); positive: lambda_max > theta_w and lambda_min < phi_w, "
       "u+ only (the paper's formula)",
       -inf, inf, {"both", "positive"}},
      {"theta_w", OptType::Float, "0.35",
       "growth threshold (relative: x E_t; 0.35 ~ sqrt(1/8): the strongest uncaptured +- pair "
       "holds more than a quarter of E_t^2)",
       0.0, inf, {}},
      {"phi_w", OptType::Float, "0.5", "growth needs lambda_min < phi_w", -inf, inf, {}},
      {"phi_g", OptType::Float, "0.01", "pruning threshold (reported; used by directional_energy)",
       0.0, inf, {}},
      {"dwell", OptType::String, "checks",
       "minimum time between growths: checks (dwell_checks) or auto (kappa/(eta D^2) ln(1/eps))",
       -inf, inf, {"checks", "auto"}},
      {"dwell_checks", OptType::Int, "8", "checks between growths (dwell: checks)", 0, 1e9, {}},
      {"patience", OptType::Int, "3",
       "consecutive checks with the energy over the threshold before a growth (C comes from one "
       "batch: a single check's excess can be that batch's noise)",
       1, 1e6, {}},
      {"dwell_kappa", OptType::Float, "2.0", "kappa of the automatic dwell time", 0.0, inf, {}},
      {"dwell_eps", OptType::Float, "0.05", "eps of the automatic dwell time", 1e-12, 1.0, {}},
      {"dwell_max_checks", OptType::Int, "50", "cap of the automatic dwell time", 0, 1e9, {}},
      {"init", OptType::String, "directed",
       "new head: directed (u+ in the first query column) or random", -inf, inf,
       {"directed", "random"}},
      {"value_variance", OptType::Float, "~",
       "Var(W_V) of a new head; unset = NTK rule d_k n / (d d_v), n = sequence length", 0.0,
       inf, {}},
      {"preserve_function", OptType::Bool, "true",
       "new head's W_O starts at zero (the model output is unchanged by growth)", -inf, inf, {}},
      {"max_heads", OptType::Int, "0", "cap on heads per block (0 = the block's own cap)", 0, 1e6,
       {}},
      {"k_constant", OptType::Float, "1.0", "constant c of K* = c kappa_T^2 log(Gamma0/theta_w)",
       0.0, inf, {}},
      {"head_cost", OptType::Float, "0.1",
       "cost per head in the Lyapunov functional W_t, in units of theta_w", 0.0, inf, {}},
      {"release_direction", OptType::Bool, "true",
       "when a head is pruned, free its birth direction in Q (unless the prune says otherwise)",
       -inf, inf, {}},
      {"lyapunov_guard", OptType::Bool, "true",
       "grow only when lambda_max > theta_w (1 + head_cost), so every growth lowers W_t", -inf,
       inf, {}},
  };
}

void register_incrt(gf::Registry& r) {
  r.add_growth({"incrt_geometric",
                "INCRT: grow a head at the largest uncaptured directional energy of A_res",
                incrt_options()},
               [](const gf::Options& o) { return std::make_unique<IncrtGeometric>(o); });
}

}  // namespace

GROWFORMER_PLUGIN("growth_incrt", "0.1.0", register_incrt)
