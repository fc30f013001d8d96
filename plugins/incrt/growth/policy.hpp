// The internals of the `incrt_geometric` growth policy, shared by its files (not installed):
// the options (policy_options.cpp), each block's geometry (block_geometry.cpp: the residual
// directional energy, its spectrum and trackers), and the criteria, three strategies behind
// one interface (criterion.hpp): `learning` and `gain` (round_criterion.cpp, over the round
// rules of <growformer/incrt/round_rules.hpp>) and `energy` (energy_criterion.cpp).
#pragma once

#include <growformer/fields.hpp>
#include <growformer/growth.hpp>

#include <cstddef>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/incrt/math.hpp>
#include <growformer/incrt/rounds.hpp>
#include <growformer/incrt/stats.hpp>

namespace gf::incrt::policy {

/// Policy state of one attention block.
struct BlockState {
  bool started = false;
  TrackerPair tracker;
  std::vector<Vec> q;         // directions at which earlier heads were born
  std::vector<long> q_owner;  // head id per Q column (-1 = unknown)
  size_t checks = 0;          // checks seen
  Calibration calib;          // E_t of the calibration checks, Gamma_res(0)
  Vec calib_energy;           // unused since state version 2 (kept empty)
  double theta_w = 0.0, phi_w = 0.0, phi_g = 0.0, energy0 = 0.0;
  double gamma_floor = 0.0;  // E_t at the first check (the untrained block)
  double pair0 = 0.0;        // lambda_max - lambda_min at calibration (one head's pair)
  double energy_now = 0.0;   // E_t at the last check
  long last_growth_check = -1000000;
  size_t over = 0;  // consecutive active checks with the energy over the threshold
  size_t grown = 0;
  double w_t = 0.0;  // Lyapunov functional at the last check
  double lambda_max = 0.0, lambda_min = 0.0, a_norm = 0.0;
  bool pending = false;  // an AddHead was returned and not yet confirmed
  Vec pending_dir;
  Vec pending_dir2;  // the other half's direction (spectrum: both), may be empty

  /// Each field once, in the order of the saved text (`over` since version 3); the ones with a
  /// key are the block's summary quantities.
  static const gf::StateFields<BlockState>& state_fields() {
    using B = BlockState;
    using C = Calibration;
    using T = TrackerPair;
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
                              .dropped<size_t>("heads", 11)  // K_obs: from the model
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
enum class CriterionKind { Learning, Gain, Energy };

/// Whether each check measures the block's energy, spectrum and trackers: the energy and gain
/// criteria decide on them; the learning rule reads only its probes (and C where a round grows).
enum class EnergyStats { Auto, On, Off };

/// The policy's options, each declared once (`table()`: spec, parsing and member).
struct IncrtSettings {
  CriterionKind criterion = CriterionKind::Learning;
  EnergyStats energy_stats = EnergyStats::Auto;
  Round round = Round::Double;
  double plane_threshold = 0.5;
  RoundOptions rounds;                                  // learning, gain
  double z = std::numeric_limits<double>::quiet_NaN();  // unset: by criterion (see the option)
  // round_mute_every; unset: by criterion (0 for learning, 2 for gain; see the option)
  double mute_every = std::numeric_limits<double>::quiet_NaN();
  ProbeSettings probe;
  TrackerSettings tracker;
  CalibrationSettings calibration;
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

/// What a round reads of a check, per block: C, the heads' motors and the valid tokens per
/// probe sequence (not state).
struct RoundInputs {
  Mat c;
  std::vector<Mat> motors;
  double seq_len = 1.0;
};

using Blocks = std::map<size_t, BlockState>;

}  // namespace gf::incrt::policy
