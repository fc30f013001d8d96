// Each block's geometry at a check of `incrt_geometric`: the stages probe -> energy (the INCRT
// library's ProbeStats, shared with the pruning rule) -> spectrum of A_res = P_perp sym(C M_a)
// P_perp and the Oja / MCA EXIN trackers -> calibrate (Gamma_res(0), the head-count law's
// inputs) -> threshold (theta_w, the Lyapunov functional W_t, the dwell time and the count of
// checks over the threshold). The energy criterion decides on what it reads; the round criteria
// read it only for the `check` events (energy_stats: on) and aim their heads with C.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "policy.hpp"

namespace gf::incrt::policy {

class BlockGeometry {
 public:
  explicit BlockGeometry(const IncrtSettings& s) : set_(s) {}

  /// The spectrum of A_res at a check.
  struct Spectrum {
    Mat a;  // A_res = P_perp sym(C M_a) P_perp
    double a_norm = 0.0;
    Eigen eig;
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

  /// What one block's check read.
  struct Check {
    std::vector<gf::HeadInfo> heads;
    ProbeStats ps;
    Spectrum sp;
    Reading rd;
  };

  /// One block's check (`check` and `calibrate` events); the trackers start from RNG.
  Check measure(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st, gf::Rng& rng);
  /// The block's summary quantities, with the head-count law K_pred, for a block of HEADS heads
  /// (K_obs).
  std::map<std::string, double> summary(const BlockState& st, size_t heads) const;
  /// Heads removed by someone else (a pruning rule's edits are not shown to this policy): free
  /// their birth directions when release_direction is on.
  void forget_dead_heads(BlockState& st, const std::vector<gf::HeadInfo>& heads) const;
  /// Var(W_V) of a new head: the option, else the NTK rule.
  double new_head_variance(const std::vector<gf::HeadInfo>& heads, size_t d, double seq_len) const;

 private:
  void set_thresholds(BlockState& st, double energy) const;
  Spectrum track(BlockState& st, const ProbeStats& ps, size_t d) const;
  bool calibrate(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st, double energy,
                 const Vec& ev) const;
  Reading read_energy(BlockState& st, const Spectrum& sp, size_t heads, size_t d,
                      size_t check_index, bool calibrated_now) const;
  void emit_check(const gf::TrainView& view, const gf::BlockView& bv, const BlockState& st,
                  const ProbeStats& ps, const Spectrum& sp, const Reading& rd, size_t heads) const;
  static double ntk_variance(const std::vector<gf::HeadInfo>& heads, size_t d, double n);

  const IncrtSettings& set_;
};

}  // namespace gf::incrt::policy
