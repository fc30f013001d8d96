// Each block's geometry at a check of `incrt_geometric` (policy.hpp, block_geometry.hpp).
#include "block_geometry.hpp"

#include <algorithm>
#include <cmath>

namespace gf::incrt::policy {

/// One block's check: probe -> energy -> spectrum and trackers -> calibrate -> threshold.
BlockGeometry::Check BlockGeometry::measure(const gf::TrainView& view, const gf::BlockView& bv,
                                            BlockState& st, gf::Rng& rng) {
  Check c;
  c.heads = bv.block->heads();
  const size_t d = bv.probe->input.dim(2);
  if (!st.started) {
    st.tracker.reset(d, rng, st.q);
    st.started = true;
  }
  forget_dead_heads(st, c.heads);
  c.ps = ProbeStats::measure(bv, c.heads, set_.probe);
  c.sp = track(st, c.ps, d);
  st.energy_now = c.ps.energy;
  const size_t check_index = st.checks++;
  if (check_index == 0) st.gamma_floor = c.ps.energy;
  const bool calibrated_now = calibrate(view, bv, st, c.ps.energy, c.sp.eig.values);
  if (st.calib.done && !calibrated_now) set_thresholds(st, c.ps.energy);
  c.rd = read_energy(st, c.sp, c.heads.size(), d, check_index, calibrated_now);
  emit_check(view, bv, st, c.ps, c.sp, c.rd, c.heads.size());
  return c;
}

std::map<std::string, double> BlockGeometry::summary(const BlockState& st, size_t heads) const {
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
  b["K_obs"] = static_cast<double>(heads);
  b["ratio"] = k_pred > 0 ? static_cast<double>(heads) / k_pred : 0.0;
  return b;
}

/// Stage "threshold": the thresholds of the current check (energy = E_t = ||sym(C M_a)||_F).
void BlockGeometry::set_thresholds(BlockState& st, double energy) const {
  if (set_.thresholds == Thresholds::Absolute) {
    st.theta_w = set_.theta_w;
    st.phi_w = set_.phi_w;
    st.phi_g = set_.phi_g;
    return;
  }
  const double scale = threshold_scale(set_.thresholds, energy, st.calib);
  st.theta_w = set_.theta_w * scale;
  st.phi_w = set_.phi_w * st.theta_w;
  st.phi_g = set_.phi_g * st.theta_w;
}

/// Heads removed by someone else (a pruning rule's edits are not shown to this policy): free
/// their birth directions when release_direction is on.
void BlockGeometry::forget_dead_heads(BlockState& st,
                                      const std::vector<gf::HeadInfo>& heads) const {
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
BlockGeometry::Spectrum BlockGeometry::track(BlockState& st, const ProbeStats& ps, size_t d) const {
  const TrackerSettings& tr = set_.tracker;
  Spectrum sp;
  sp.a = project(ps.s, st.q);
  sp.a_norm = frobenius(sp.a);
  sp.eig = jacobi_eigen(sp.a, tr.exact);
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
bool BlockGeometry::calibrate(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                              double energy, const Vec& ev) const {
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
  const auto sum = summary(st, bv.block ? bv.block->num_heads() : 0);
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
BlockGeometry::Reading BlockGeometry::read_energy(BlockState& st, const Spectrum& sp, size_t heads,
                                                  size_t d, size_t check_index,
                                                  bool calibrated_now) const {
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

void BlockGeometry::emit_check(const gf::TrainView& view, const gf::BlockView& bv,
                               const BlockState& st, const ProbeStats& ps, const Spectrum& sp,
                               const Reading& rd, size_t heads) const {
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
  e.strings = {{"policy", "incrt_geometric"}, {"phase", st.calib.done ? "active" : "calibrating"}};
  view.events->emit(e);
}

/// Var(W_V) of a new head: the option, else the NTK rule.
double BlockGeometry::new_head_variance(const std::vector<gf::HeadInfo>& heads, size_t d,
                                        double seq_len) const {
  return set_.value_variance > 0 ? set_.value_variance : ntk_variance(heads, d, seq_len);
}

/// NTK-consistent value variance Var(W_V) = d_k n / (d d_v) with n the sequence
/// length (valid tokens per probe sequence), as in the reference code.
double BlockGeometry::ntk_variance(const std::vector<gf::HeadInfo>& heads, size_t d, double n) {
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

}  // namespace gf::incrt::policy
