// What the INCRT growth policy, its pruning rule and its gate head measure at a check, declared
// once: the probe's statistics (C, the heads' motors M_a,h, the total directional energy
// E_t = ||sym(C M_a)||_F), the trackers' step on a matrix of them, the calibration of
// Gamma_res(0) from the first checks' E_t, the scale of a threshold, and the options these share
// (`probe`, `normalize_c`, `calibration_checks`, `thresholds`). A check is then probe -> energy
// -> calibrate -> threshold -> decide, the first four here and the decision in each policy; the
// gate runs probe -> energy -> track on its own head at every update.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/incrt/math.hpp>

namespace gf::incrt {

/// Which tokens make C, and whether C is divided by their count (`probe`, `normalize_c`).
struct ProbeSettings {
  bool first_sequence = false;
  bool normalize_c = true;

  static const OptionTable<ProbeSettings>& table() {
    static const auto t =
        OptionTable<ProbeSettings>()
            .choice("probe", &ProbeSettings::first_sequence, "batch",
                    "tokens for C = X^T X: first_sequence (the reference code's probe) or batch "
                    "(all valid tokens)",
                    {{"first_sequence", true}, {"batch", false}})
            .add("normalize_c", &ProbeSettings::normalize_c, "true", "divide C by the token count");
    return t;
  }
};

/// How thresholds scale (`thresholds`).
enum class Thresholds { Relative, Calibrated, Absolute };

/// The `thresholds` option of a policy whose thresholds sit in S::*member; DOC says what the
/// three scales mean for that policy's thresholds.
template <class S>
void add_thresholds(OptionTable<S>& t, Thresholds S::*member, const std::string& doc) {
  t.choice("thresholds", member, "relative", doc,
           {{"relative", Thresholds::Relative},
            {"calibrated", Thresholds::Calibrated},
            {"absolute", Thresholds::Absolute}});
}

/// When calibration ends (`calibration`, `calibration_checks`, ...).
struct CalibrationSettings {
  bool plateau = false;        // plateau: E_t has stopped rising; else after `checks`
  size_t checks = 16;          // checks of calibration (fixed), or at least (plateau)
  size_t window = 8;           // plateau: windows of this many checks compared
  double tolerance = 0.1;      // plateau: the last window's median <= (1 + tol) x the one before
  size_t max_checks = 200;     // plateau: the latest end in checks
  double max_fraction = 0.25;  // plateau: the latest end as a fraction of the run's steps
};

/// The `calibration_checks` option (DOC: what the calibration holds back in that policy).
template <class S>
void add_calibration_checks(OptionTable<S>& t, CalibrationSettings S::*member,
                            const std::string& doc) {
  t.add("calibration_checks", member, &CalibrationSettings::checks, "16", doc, 1, 1e6);
}

/// What one check of a block measured on the probe.
struct ProbeStats {
  Mat c;                       // C = X^T X over the probe's tokens
  size_t tokens = 0;           // the tokens in C
  double seq_len = 1.0;        // valid tokens per probe sequence
  std::vector<Mat> motors;     // M_a,h per head of HEADS (zero for a head without query weights)
  std::vector<bool> has_head;  // whether HEADS[i] had a head object
  Mat ma;                      // M_a = the sum of the motors
  double energy = 0.0;         // E_t = ||sym(C M_a)||_F: the total directional energy
  Mat s;                       // sym(C M_a)

  /// Stage "probe" and "energy" of a check: C from the block's probe, the heads' motors, E_t.
  static ProbeStats measure(const BlockView& bv, const std::vector<HeadInfo>& heads,
                            const ProbeSettings& p) {
    std::vector<const Head*> of;
    for (const HeadInfo& h : heads) of.push_back(h.head);
    return measure(bv.probe->input, bv.probe->mask(), of, p);
  }

  /// The same on INPUT (B, T, d) with its valid tokens VALID (B*T, or null) and HEADS (null for
  /// a slot without a head object): what the gate measures of its own head at an update.
  static ProbeStats measure(const Tensor& input, const std::vector<uint8_t>* valid,
                            const std::vector<const Head*>& heads, const ProbeSettings& p) {
    ProbeStats out;
    const size_t d = input.dim(2);
    out.ma = Mat(d);
    for (const Head* h : heads) {
      out.has_head.push_back(h != nullptr);
      if (!h) {
        out.motors.emplace_back(d);
        continue;
      }
      Mat m = head_motor(*h, d);
      for (size_t i = 0; i < out.ma.a.size(); ++i) out.ma.a[i] += m.a[i];
      out.motors.push_back(std::move(m));
    }
    out.c = gram_from_probe(input, valid, p.first_sequence, p.normalize_c, &out.tokens);
    const size_t nseq = p.first_sequence ? std::min<size_t>(input.dim(0), 1) : input.dim(0);
    out.seq_len = nseq ? double(out.tokens) / double(nseq) : 1.0;
    out.s = sym_cm(out.c, out.ma);
    out.energy = frobenius(out.s);
    return out;
  }
  /// The motors of the heads that have a head object (in order).
  std::vector<Mat> present_motors() const {
    std::vector<Mat> out;
    for (size_t i = 0; i < motors.size(); ++i)
      if (has_head[i]) out.push_back(motors[i]);
    return out;
  }
};

/// How the trackers u+ / u- step (`tracker`, `mca_rule`, `eta_plus`, `eta_minus`,
/// `tracker_iters`, `step_scale`, `coupling`; each policy declares the options it offers).
struct TrackerSettings {
  bool exact = false;  // the eigendecomposition instead of Oja / MCA steps
  McaRule mca_rule = McaRule::Exin;
  double eta_plus = -1.0, eta_minus = -1.0;  // unset (<= 0): the defaults of eta_plus_at(d)
  size_t iters = 100;                        // tracker steps per update
  bool scale_frobenius = true;               // steps on A / ||A||_F
  bool coupling = false;                     // the reference code's coupling of the two trackers

  /// The options every INCRT component with trackers offers, declared once: `tracker`,
  /// `mca_rule`, `eta_plus`, `eta_minus`, and `tracker_iters` with the component's own default
  /// and meaning (ITERS_DEFAULT, ITERS_DOC: steps per check of the growth policy, per update of
  /// the gate). A component adds `step_scale` and `coupling` where it offers them.
  static OptionTable<TrackerSettings> table(const std::string& iters_default,
                                            const std::string& iters_doc) {
    using T = TrackerSettings;
    OptionTable<T> t;
    t.choice("tracker", &T::exact, "online",
             "online (Oja + MCA trackers) or exact (eigendecomposition of the energy matrix)",
             {{"online", false}, {"exact", true}})
        .choice("mca_rule", &T::mca_rule, "exin",
                "minor tracker: exin (MCA EXIN matrix form) or reference (extra factor u^T A u)",
                {{"exin", McaRule::Exin}, {"reference", McaRule::Reference}})
        .add("eta_plus", &T::eta_plus, "~",
             "Oja step size; unset = 0.5 on the matrix scaled to unit Frobenius norm (step_scale: "
             "frobenius; the gate always scales), 1/(10 d) with step_scale: none",
             0.0, 2.0)
        .add("eta_minus", &T::eta_minus, "~", "MCA step size; unset = eta_plus / 2", 0.0, 2.0)
        .add("tracker_iters", &T::iters, iters_default, iters_doc, 1, 1e7);
    return t;
  }

  double eta_plus_at(size_t d) const {
    return eta_plus > 0 ? eta_plus : default_eta_plus(scale_frobenius, d);
  }
  double eta_minus_at(size_t d) const { return eta_minus > 0 ? eta_minus : 0.5 * eta_plus_at(d); }

  /// gamma* = D+ / (D+ + D-) of the top and bottom eigen-gaps with `coupling`, else -1
  /// (uncoupled).
  double gamma(double gap_top, double gap_bottom) const {
    if (!coupling) return -1.0;
    return gap_top + gap_bottom > 0 ? gap_top / (gap_top + gap_bottom) : 0.5;
  }

  /// Stage "track": u+ / u- of A (Frobenius norm A_NORM) in the complement of BASIS, exactly
  /// (from EIG when given) or by `iters` steps; without any directional energy to step on (a
  /// zero scale) the tracked eigenvalues are 0 and the vectors stay.
  void step(TrackerPair& t, const Mat& a, const std::vector<Vec>& basis, double a_norm,
            double gamma_star = -1.0, const Eigen* eig = nullptr) const {
    if (exact) {
      t.exact(a, basis, eig);
      return;
    }
    const double scale = scale_frobenius ? a_norm : 1.0;
    if (!(scale > 0)) {
      t.lambda_max = t.lambda_min = 0.0;
      return;
    }
    t.update(a, basis, eta_plus_at(a.n), eta_minus_at(a.n), mca_rule, iters, scale, gamma_star);
  }
};

/// Stage "calibrate": Gamma_res(0) from E_t of the first checks.
struct Calibration {
  Vec norms;            // E_t of the calibration checks
  bool done = false;    // calibration has ended
  double gamma0 = 0.0;  // Gamma_res(0): the median E_t of the last window of calibration

  /// Adds the E_t of a check while calibrating; true when calibration ends at this check (at
  /// once with AT_ONCE). Ends after s.checks checks, or (plateau) once at least s.checks are
  /// seen and the median E_t of the last s.window checks is within s.tolerance of the median of
  /// the window before (the first heads have finished learning), or at s.max_checks, or once
  /// STEP reaches s.max_fraction of the run's TOTAL steps (a growth needs training time after).
  bool observe(double energy, size_t step, size_t total, const CalibrationSettings& s,
               bool at_once = false) {
    if (done) return false;
    norms.push_back(energy);
    if (!at_once && !ends(step, total, s)) return false;
    const size_t w =
        s.plateau ? std::min(norms.size(), std::max<size_t>(s.window, 1)) : norms.size();
    gamma0 = median(Vec(norms.end() - long(w), norms.end()));
    done = true;
    return true;
  }

 private:
  bool ends(size_t step, size_t total, const CalibrationSettings& s) const {
    const size_t n = norms.size();
    if (!s.plateau) return n >= s.checks;
    if (n >= s.max_checks) return true;
    if (s.max_fraction > 0 && total > 0 && double(step) >= s.max_fraction * double(total))
      return true;
    const size_t w = std::max<size_t>(s.window, 1);
    if (n < s.checks || n < 2 * w) return false;
    const Vec last(norms.end() - long(w), norms.end());
    const Vec before(norms.end() - long(2 * w), norms.end() - long(w));
    return median(last) <= (1.0 + s.tolerance) * median(before);
  }
};

/// Stage "threshold": what a threshold under T multiplies at a check: E_t of the check
/// (relative), Gamma_res(0) of CALIB (calibrated), 1 (absolute).
inline double threshold_scale(Thresholds t, double energy, const Calibration& calib) {
  return t == Thresholds::Relative ? energy : t == Thresholds::Calibrated ? calib.gamma0 : 1.0;
}

}  // namespace gf::incrt
