// INCRT growth in rounds, each accepted on the marginal gain it brings on a validation probe
// (`criterion: gain`, the default of `incrt_geometric`; docs/INCRT.md, "Growth in rounds").
//
// The stages of one decision: the block's geometry says how many uncaptured planes it holds
// and where they are (planes of sym(C M_a) that no head carries as its own top plane); the
// validation probe says when the heads have settled (the probe loss has stopped falling) and
// whether the last round paid (its relative fall in the settled loss). A round that did not pay
// is taken back and growth stops until the probe loss rises again (a changed task).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <growformer/errors.hpp>
#include <growformer/fields.hpp>
#include <growformer/incrt/math.hpp>
#include <growformer/state_text.hpp>

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
struct GainOptions {
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
  // learning: what takes a round back when the growth window ends unpaid. useless (default):
  // only evidence that its heads are worth less than min_share (the share's upper bound at
  // z_back standard errors under min_share, not rising, the round mature); a round without that
  // evidence is kept, and a promising round lets the next grow. unproven (the earlier rule):
  // every round not shown to pay at t >= z.
  bool take_back_useless = true;
  double z_back = 2.0;  // learning, take_back useless: the upper bound's standard errors
};

/// What a probe decided.
struct GainDecision {
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
  // what decided a round: paid | promising (Grow); useless | unproven (Reject); rising | young |
  // not_shown_useless (Keep)
  const char* evidence = "";
};

/// The round rule's state across probes (saved with the policy state).
struct GainState {
  bool done = false;      // growth stopped (a round did not pay, no plane, or late)
  Vec recent;             // the phase's last 2 W probe losses
  double first = 0.0;     // the phase's first probe loss
  bool has_prev = false;  // a round was grown and is waiting for its test
  double prev = 0.0;      // the settled loss before that round
  double done_at = 0.0;   // the settled loss growth stopped at (NaN: a round was taken
                          // back and the model has not settled without it yet)
  size_t rise = 0;        // consecutive probes over done_at (1 + reopen_rise)
  size_t rounds = 0, rejected = 0, reopened = 0;
  std::vector<std::pair<size_t, long>> round;  // (block, head id) of the last round's heads
  // The run's learning onset: its first probe (loss, step) and the steps until a probe loss
  // first fell by min_gain below it (-1 until then): how long a head takes to start learning.
  double start_loss = std::numeric_limits<double>::quiet_NaN();
  size_t start_step = 0;
  long onset = -1;
  size_t round_step = 0;   // the step the last round was grown at
  size_t phase_start = 0;  // the step growth last reopened at (0: the run's start)
  Vec shares;              // the last round's share at the phase's last W probes
  Vec share_ses;           // and its standard error there (paired test; NaN when not measured)

  /// Every probe, from the run's first (before the rounds begin too): the learning onset.
  void watch(double loss, size_t step, double min_gain) {
    if (!std::isfinite(loss)) return;
    if (!std::isfinite(start_loss)) {
      start_loss = loss;
      start_step = step;
    }
    if (onset < 0 && loss <= start_loss * (1.0 - min_gain)) onset = long(step - start_step);
  }

  /// The steps a round is given before it can be taken back.
  double patience_steps(const GainOptions& o) const {
    return onset > 0 ? o.round_patience * double(onset) : 0.0;
  }

  /// The checks between two probes in the current phase (docs/INCRT.md, "What the probe costs").
  size_t probe_interval(const GainOptions& o) const {
    const size_t every = done                     ? o.stopped_probe_every
                         : (o.paired && has_prev) ? o.round_probe_every
                                                  : o.probe_every;
    return std::max<size_t>(every, 1);
  }

  /// Starts a new settling phase (after a growth, a reopening or at the start).
  void restart() {
    recent.clear();
    shares.clear();
    share_ses.clear();
    first = 0.0;
  }

  /// The median of the last W probes and of the W before (NaN while fewer than 2 W).
  std::pair<double, double> windows(size_t w) const {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (w == 0 || recent.size() < 2 * w) return {nan, nan};
    const auto end = recent.end();
    return {median(Vec(end - long(w), end)), median(Vec(end - long(2 * w), end - long(w)))};
  }

  /// One probe of loss LOSS at STEP of TOTAL: what to do now. After Grow the caller grows a
  /// round and calls grown(); after Reject it removes `round`'s heads.
  /// MUTED_LOSS: the probe with the round's heads muted; MUTED_SE: the standard error of the
  /// paired difference (the spread of muted - unmuted over the probe's examples / sqrt(n)).
  GainDecision observe(double loss, size_t step, size_t total, const GainOptions& o,
                       double muted_loss = std::numeric_limits<double>::quiet_NaN(),
                       double muted_se = std::numeric_limits<double>::quiet_NaN()) {
    GainDecision out;
    if (!std::isfinite(loss)) return out;
    const size_t w = std::max<size_t>(o.settle_probes, 1);
    if (has_prev && !done && std::isfinite(muted_loss) && loss > 0) {
      // paired: a share of a negligible loss is negligible (on a task the model has solved every
      // head it has is used, and (L_muted - L) / L grows without bound as L -> 0)
      const double scale = o.paired ? std::max(loss, o.loss_floor) : loss;
      shares.push_back((muted_loss - loss) / scale);
      share_ses.push_back(std::isfinite(muted_se) ? muted_se / scale
                                                  : std::numeric_limits<double>::quiet_NaN());
      if (shares.size() > w) shares.erase(shares.begin());
      if (share_ses.size() > w) share_ses.erase(share_ses.begin());
    }
    if (o.paired && has_prev && !done) return paired_round(loss, step, total, o);
    if (done) return stopped_probe(loss, step, o);
    if (recent.empty()) first = loss;  // recent holds 2 W >= 2 probes once the phase began
    recent.push_back(loss);
    if (recent.size() > 2 * w) recent.erase(recent.begin());
    const auto [last, before] = windows(w);
    if (!settled(last, before, o)) return out;
    const bool below_floor = solved(last, o);
    // The first phase must show learning before it can settle (a loss flat at chance is not
    // a plateau of trained heads): the run's learning onset (watch) or, without it, a fall
    // from the phase's first probe.
    if (!has_prev && rounds == 0 && onset < 0 && last > first * (1.0 - o.min_gain)) return out;
    out.settled = last;
    if (has_prev) {
      out.gain = prev > 0 ? (prev - last) / prev : 0.0;
      fill_share(out, o);
      // The fall must come from the round's heads, not from the older heads training on: with
      // attribution, muting the round's heads must cost min_gain of the loss as well.
      const bool pays = out.gain >= o.min_gain &&
                        !(o.attribution && std::isfinite(out.share) && out.share < o.min_gain);
      // A new head is dormant while it finds what to attend to (as the first head was before
      // its loss began to fall): a round is judged once it has trained as long as that.
      if (!pays && double(step - round_step) < patience_steps(o)) {
        GainDecision wait;
        wait.gain = out.gain;
        wait.share = out.share;
        return wait;
      }
      if (!pays) {
        out.kind = GainDecision::Kind::Reject;
        reject();
        return out;
      }
    }
    if (past_window(step, total, o)) {
      out.kind = GainDecision::Kind::Stop;
      stop(last);
      return out;
    }
    if (below_floor) return out;  // nothing left for a round to capture
    out.kind = GainDecision::Kind::Grow;
    return out;
  }

  /// A probe once growth stopped: the level a taken-back round settles at, then the reopen
  /// watch (a rise over that level for W probes in a row reopens growth).
  GainDecision stopped_probe(double loss, size_t step, const GainOptions& o) {
    GainDecision out;
    const size_t w = std::max<size_t>(o.settle_probes, 1);
    if (!std::isfinite(done_at)) {
      // growth stopped by taking a round back: the rise test starts from the level the
      // model settles at without those heads (their removal raises the loss for a while)
      recent.push_back(loss);
      if (recent.size() > 2 * w) recent.erase(recent.begin());
      const auto [last, before] = windows(w);
      if (settled(last, before, o)) done_at = last;
      return out;
    }
    // against the loss floor at least: on a solved task the stopped-at loss is ~0, and any
    // wobble would be a rise of many times it
    rise = loss > reopen_reference(o) * (1.0 + o.reopen_rise) ? rise + 1 : 0;
    if (rise < w) return out;
    done = false;
    has_prev = false;
    rise = 0;
    reopened += 1;
    phase_start = step;
    round.clear();
    restart();
    out.kind = GainDecision::Kind::Reopen;
    return out;
  }

  /// The window's median LAST fell by less than settle_tolerance against BEFORE, or lies under
  /// the loss floor (paired): a solved task's loss falls by orders of magnitude, which the
  /// relative test reads as learning, so growth never stopped there and the reopen watch never
  /// began.
  static bool settled(double last, double before, const GainOptions& o) {
    return std::isfinite(last) && (solved(last, o) || last >= before * (1.0 - o.settle_tolerance));
  }

  /// A windowed probe loss under the loss floor (round_test paired): the task is solved.
  static bool solved(double last, const GainOptions& o) {
    return o.paired && std::isfinite(last) && last <= o.loss_floor;
  }

  /// The loss a stopped phase's rise is measured against: the stopped-at loss, at least the
  /// loss floor (paired).
  double reopen_reference(const GainOptions& o) const {
    return o.paired ? std::max(done_at, o.loss_floor) : done_at;
  }

  /// The caller grew a round (possibly empty: then growth stops) at STEP from settled loss
  /// SETTLED.
  void grown(size_t heads_added, double settled, size_t step) {
    round.clear();
    round_step = step;
    if (heads_added == 0) {
      stop(settled);
      return;
    }
    rounds += 1;
    has_prev = true;
    prev = settled;
    restart();
  }

  /// The paired test of the waiting round at each probe (not only at a settled one: a round
  /// whose heads carry the loss pays while the loss still falls). Once the window holds W
  /// shares: paid at t >= z_early (or z past the growth window) -> the next round grows at
  /// once (or growth stops, past the window); a round unpaid when the growth window ends is
  /// taken back; otherwise it waits (a new head can hurt the probe while it starts to learn, so
  /// a negative share early on is not a verdict).
  GainDecision paired_round(double loss, size_t step, size_t total, const GainOptions& o) {
    GainDecision out;
    const size_t w = std::max<size_t>(o.settle_probes, 1);
    const bool late = past_window(step, total, o);
    out.settled = loss;  // the probe the decision is taken at (the loss may still be falling)
    out.gain = prev > 0 ? (prev - loss) / prev : 0.0;
    if (shares.size() >= w) fill_share(out, o);
    if (shares.size() >= w && paired_pays(out, o, late ? o.z : o.z_early)) {
      if (late) {
        out.kind = GainDecision::Kind::Stop;
        stop(loss);
      } else {
        out.kind = GainDecision::Kind::Grow;
      }
      return out;
    }
    if (late) {
      out.kind = GainDecision::Kind::Reject;
      reject();
    }
    return out;
  }

  /// Past the growth window: grow_until of the run's steps (after a reopening, of those left).
  bool past_window(size_t step, size_t total, const GainOptions& o) const {
    return total > 0 &&
           double(step) >
               double(phase_start) + o.grow_until * double(total - std::min(total, phase_start));
  }

  /// The round's share over the settling window (median) and, for the paired test, its
  /// standard error and t statistic (medians of the window's).
  void fill_share(GainDecision& out, const GainOptions& o) const {
    if (!shares.empty()) out.share = median(shares);
    if (!o.paired || share_ses.empty()) return;
    Vec ses, ts;
    for (size_t i = 0; i < share_ses.size() && i < shares.size(); ++i) {
      if (!std::isfinite(share_ses[i])) continue;
      ses.push_back(share_ses[i]);
      ts.push_back(share_ses[i] > 0 ? shares[i] / share_ses[i]
                                    : (shares[i] > 0   ? 1e300
                                       : shares[i] < 0 ? -1e300
                                                       : 0.0));
    }
    if (ses.empty()) return;
    out.share_se = median(ses);
    out.t = median(ts);
  }

  /// The paired test: the round's share is at least min_share and its t statistic at least Z.
  static bool paired_pays(const GainDecision& d, const GainOptions& o, double z) {
    return std::isfinite(d.share) && std::isfinite(d.t) && d.share >= o.min_share && d.t >= z;
  }

  void reject() {
    rejected += 1;
    stop(std::numeric_limits<double>::quiet_NaN());
    restart();
  }

  void stop(double at) {
    done = true;
    has_prev = false;
    done_at = at;
    rise = 0;
  }

  /// Each field once, in the order of the saved text: present from policy state version 4,
  /// the learning onset from 5, the step of the last reopening from 6, the round's shares from
  /// 7, their standard errors from 8.
  static const StateFields<GainState>& state_fields() {
    using G = GainState;
    static const auto f = StateFields<G>()
                              .add("done", &G::done)
                              .add("recent", &G::recent)
                              .add("first", &G::first)
                              .add("has_prev", &G::has_prev)
                              .add("prev", &G::prev)
                              .add("done_at", &G::done_at)
                              .add("rise", &G::rise)
                              .add("rounds", &G::rounds)
                              .add("rejected", &G::rejected)
                              .add("reopened", &G::reopened)
                              .add("round", &G::round)
                              .add("start_loss", &G::start_loss, 5)
                              .add("start_step", &G::start_step, 5)
                              .add("onset", &G::onset, 5)
                              .add("round_step", &G::round_step, 5)
                              .add("phase_start", &G::phase_start, 6)
                              .add("shares", &G::shares, 7)
                              .add("share_ses", &G::share_ses, 8);
    return f;
  }

  void save(std::ostringstream& os) const {
    os << "gain ";
    state_fields().save(os, *this);
  }
  /// Reads the text of R's version (see state_fields()).
  void load(Reader& r) {
    r.expect("gain");
    state_fields().load(r, *this, r.version());
  }
};

}  // namespace gf::incrt
