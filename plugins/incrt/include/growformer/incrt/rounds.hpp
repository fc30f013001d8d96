// The machinery every round criterion of `incrt_geometric` shares (docs/INCRT.md): where a
// round's heads go (the planes of a block's directional energy that no head carries), the
// options of the rounds and of their test, and what a probe decided. The criteria that decide
// *when* a round grows and whether it stays are in learning_rounds.hpp (`learning`, the default)
// and gain_rounds.hpp (`gain`); round_rules.hpp puts both behind one interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <growformer/incrt/math.hpp>

namespace gf::incrt {

/// Planes of a block's directional energy that no head carries as its own top plane.
struct PlaneResidual {
  /// Each head's top-plane strength: the spectral radius of its own sym(C M_a,h).
  Vec head_strength;
  /// The median of head_strength: the energy scale of a captured plane.
  double captured_scale = 0.0;
  /// Eigenvalues of R = P sym(C M_a) P (P: the complement of every head's top plane), by
  /// decreasing |value|, with their unit eigenvectors.
  Vec values;
  std::vector<Vec> vectors;
  /// Planes of R stronger than `threshold` x captured_scale (a +- pair counts once).
  size_t planes = 0;
};

/// The residual planes of S = sym(C M_a) (M_a = the sum of MOTORS) against the heads' own top
/// planes: PLANES counts the eigenvalues of R above THRESHOLD x the captured scale, halved
/// (rounded up) since a rotation plane shows as a +- pair.
inline PlaneResidual plane_residual(const Mat& c, const std::vector<Mat>& motors,
                                    double threshold) {
  PlaneResidual out;
  const size_t d = c.n;
  Mat ma(d);
  std::vector<Vec> basis;
  for (const Mat& m : motors) {
    for (size_t i = 0; i < ma.a.size(); ++i) ma.a[i] += m.a[i];
    const Eigen e = jacobi_eigen(sym_cm(c, m));
    if (d == 0) continue;
    out.head_strength.push_back(std::max(e.values[d - 1], -e.values[0]));
    for (const Vec* v : {&e.vectors[d - 1], &e.vectors[0]}) {
      Vec u = *v;
      orthogonalize(u, basis);
      if (normalize(u) && basis.size() < d) basis.push_back(u);
    }
  }
  if (d == 0) return out;
  out.captured_scale = out.head_strength.empty() ? 0.0 : median(out.head_strength);
  const Eigen r = jacobi_eigen(project(sym_cm(c, ma), basis));
  std::vector<size_t> order(d);
  for (size_t i = 0; i < d; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::fabs(r.values[a]) > std::fabs(r.values[b]);
  });
  size_t over = 0;
  for (size_t i : order) {
    out.values.push_back(r.values[i]);
    out.vectors.push_back(r.vectors[i]);
    if (out.captured_scale > 0 && std::fabs(r.values[i]) > threshold * out.captured_scale) ++over;
  }
  out.planes = (over + 1) / 2;
  return out;
}

/// The options of the round rule.
struct RoundOptions {
  size_t probe_examples = 0;       // validation examples per probe (0: unset, the policy picks
                                   // 256 for the learning rule, 512 for the gain rule)
  size_t probe_every = 2;          // a probe every N checks (while settling before a round)
  size_t round_probe_every = 2;    // paired: a probe every N checks while a round waits (each one
                                   // is evaluated twice, with and without the round's heads)
  size_t stopped_probe_every = 8;  // a probe every N checks once growth stopped (the reopen
                                   // watch alone reads it)
  size_t settle_probes = 4;        // W: the settled test compares the median probe loss of the
                                   // last W probes with the W before
  double settle_tolerance = 0.01;  // settled: the median fell by less than this fraction
  double min_gain = 0.05;          // a round pays when the settled loss fell by this fraction
  double reopen_rise = 0.25;       // after growth stopped: the probe loss this fraction over the
                                   // settled loss for W probes in a row reopens growth
  double grow_until = 0.6;         // no new round after this fraction of the run's steps (after a
                                   // reopening: of the steps left at the reopening)
  double round_patience = 1.5;     // a round is not taken back before it has trained this many
                                   // times the steps the first head took to start learning
  bool attribution = true;         // relative test: a round pays only when muting its heads
                                   // costs min_gain too
  // The test a round must pass. paired (default; docs/INCRT.md, "The paired round test"):
  // muting the round's heads on the probe costs at least min_share of the loss, significantly
  // so: the median over the last W probes of the paired t statistic over the probe examples.
  // Judged at every probe once W shares are in, settled or not: the round pays early at t >=
  // z_early; when the growth window (grow_until) ends it is judged once more, paying at t >= z
  // and taken back otherwise, so a dormant new head (share near 0, tiny error) or one that hurts
  // while it starts to learn waits for the window's end. relative (the earlier default): the
  // settled loss fell by min_gain since the round and, with attribution, muting its heads costs
  // min_gain; judged at the first settled phase past the patience.
  bool paired = true;
  double min_share = 0.01;   // paired: the least share of the loss a round must carry
  double z = 2.0;            // paired: the t statistic a round's share must reach at the last look
  double z_early = 3.0;      // paired: ... at a look before the growth window ends
  double loss_floor = 0.05;  // paired: shares are of max(L, loss_floor), as the ablation pruning
                             // rule's costs are
  size_t mute_every = 2;     // paired: the waiting round's heads sit out every N-th training
                             // step (0: never), so the older heads keep working without them
  double mute_examples = 0;  // paired: the waiting round's heads sit out on this share of every
                             // training batch's examples (trained on every step from the rest)
  // learning: where a round's share on trial is read. false (muted): the probe with the round's
  // heads muted; true (twin): the model's twin, a copy forked when the round grew and trained
  // beside the model without it (GrowthPolicy::twin_without): what the round adds over the model
  // the run would have had without it, and a take-back continues from the twin.
  bool twin = false;
  // learning: what takes a round back when the growth window ends unpaid. useless (default):
  // only evidence that its heads are worth less than min_share (the share's upper bound at
  // z_back standard errors under min_share, not rising, the round mature); a round without that
  // evidence is kept, and a promising round lets the next grow. unproven (the earlier rule):
  // every round not shown to pay at t >= z.
  bool take_back_useless = true;
  double z_back = 2.0;  // learning, take_back useless: the upper bound's standard errors
  // learning: the late review. After the growth window the kept rounds are judged again, the
  // newest first, on what the trained model does without them: a round whose median share is
  // still under min_share and not rising after 4 probes of the review is taken back and the
  // round before it reviewed; one whose share is shown over min_share (its lower bound) ends the
  // review. No take-back after review_until of the run (of the steps left after a reopening).
  bool review = true;
  double review_until = 0.85;
  bool review_sit_out = true;        // the reviewed round's heads sit out as in a trial
  double review_mute_examples = -1;  // the share of each batch a reviewed round sits out on
                                     // (< 0: as in a trial, with review_sit_out)
  // learning: a paid round is followed by the next only once it is mature (it has trained as
  // long as the learning onset); false: at once (the rule of 25d4ccd)
  bool pace_onset = true;
  // learning: plateau rounds. While the probe loss still sits where it started (the run's first
  // warm-up, before the learning onset), a round grows every `plateau` of the run's steps (two
  // at most, within the first half of the growth window), trained in full and not judged on the
  // plateau (nothing is learnt to carry a share of); at the onset the newest of them goes on trial
  // in place of a new round. Heads present while the model searches for structure find it sooner
  // and learn more than heads grown after it was found. A window that ends before their trial
  // began takes every plateau round back (`no_onset`); a second plateau round on trial must pay
  // by the window's end (`plateau_unpaid`). 0: none (the rule of 37f457f).
  double plateau = 0.1;
};

/// What a probe decided.
struct RoundDecision {
  enum class Kind { None, Grow, Reject, Stop, Reopen, Keep } kind = Kind::None;
  double settled = 0.0;  // the settled probe loss (Grow, Reject, Stop)
  double gain = std::numeric_limits<double>::quiet_NaN();  // the last round's gain (if any)
  // the last round's share: the median over the settling window of (L with its heads muted -
  // L) / L (NaN when not measured)
  double share = std::numeric_limits<double>::quiet_NaN();
  // paired: the median over the settling window of the share's t statistic and standard error
  double t = std::numeric_limits<double>::quiet_NaN();
  double share_se = std::numeric_limits<double>::quiet_NaN();
  // learning: the evidence a round was judged on at the growth window's end (Keep, Reject):
  // the share's upper bound (share + z_back se) and the t of its trend over the round's probes
  double upper = std::numeric_limits<double>::quiet_NaN();
  double trend_t = std::numeric_limits<double>::quiet_NaN();
  // Reject: the heads it takes back, when not the waiting round's (no_onset: every plateau
  // round)
  std::vector<std::pair<size_t, long>> heads;
  // what decided a round: paid | promising | plateau (Grow); useless | unproven | unused_late |
  // no_onset | plateau_unpaid (Reject);
  // rising | young | not_shown_useless | used (Keep)
  const char* evidence = "";
};

}  // namespace gf::incrt
