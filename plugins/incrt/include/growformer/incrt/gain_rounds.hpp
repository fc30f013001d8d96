// INCRT growth in rounds, each accepted on the marginal gain it brings on a validation probe
// (`criterion: gain`, the earlier default of `incrt_geometric`; docs/INCRT.md, "Growth in rounds").
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
#include <growformer/incrt/rounds.hpp>
#include <growformer/state_text.hpp>

namespace gf::incrt {

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
  double patience_steps(const RoundOptions& o) const {
    return onset > 0 ? o.round_patience * double(onset) : 0.0;
  }

  /// The checks between two probes in the current phase (docs/INCRT.md, "What the probe costs").
  size_t probe_interval(const RoundOptions& o) const {
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
  RoundDecision observe(double loss, size_t step, size_t total, const RoundOptions& o,
                        double muted_loss = std::numeric_limits<double>::quiet_NaN(),
                        double muted_se = std::numeric_limits<double>::quiet_NaN()) {
    RoundDecision out;
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
        RoundDecision wait;
        wait.gain = out.gain;
        wait.share = out.share;
        return wait;
      }
      if (!pays) {
        out.kind = RoundDecision::Kind::Reject;
        reject();
        return out;
      }
    }
    if (past_window(step, total, o)) {
      out.kind = RoundDecision::Kind::Stop;
      stop(last);
      return out;
    }
    if (below_floor) return out;  // nothing left for a round to capture
    out.kind = RoundDecision::Kind::Grow;
    return out;
  }

  /// A probe once growth stopped: the level a taken-back round settles at, then the reopen
  /// watch (a rise over that level for W probes in a row reopens growth).
  RoundDecision stopped_probe(double loss, size_t step, const RoundOptions& o) {
    RoundDecision out;
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
    out.kind = RoundDecision::Kind::Reopen;
    return out;
  }

  /// The window's median LAST fell by less than settle_tolerance against BEFORE, or lies under
  /// the loss floor (paired): a solved task's loss falls by orders of magnitude, which the
  /// relative test reads as learning, so growth never stopped there and the reopen watch never
  /// began.
  static bool settled(double last, double before, const RoundOptions& o) {
    return std::isfinite(last) && (solved(last, o) || last >= before * (1.0 - o.settle_tolerance));
  }

  /// A windowed probe loss under the loss floor (round_test paired): the task is solved.
  static bool solved(double last, const RoundOptions& o) {
    return o.paired && std::isfinite(last) && last <= o.loss_floor;
  }

  /// The loss a stopped phase's rise is measured against: the stopped-at loss, at least the
  /// loss floor (paired).
  double reopen_reference(const RoundOptions& o) const {
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
  RoundDecision paired_round(double loss, size_t step, size_t total, const RoundOptions& o) {
    RoundDecision out;
    const size_t w = std::max<size_t>(o.settle_probes, 1);
    const bool late = past_window(step, total, o);
    out.settled = loss;  // the probe the decision is taken at (the loss may still be falling)
    out.gain = prev > 0 ? (prev - loss) / prev : 0.0;
    if (shares.size() >= w) fill_share(out, o);
    if (shares.size() >= w && paired_pays(out, o, late ? o.z : o.z_early)) {
      if (late) {
        out.kind = RoundDecision::Kind::Stop;
        stop(loss);
      } else {
        out.kind = RoundDecision::Kind::Grow;
      }
      return out;
    }
    if (late) {
      out.kind = RoundDecision::Kind::Reject;
      reject();
    }
    return out;
  }

  /// Past the growth window: grow_until of the run's steps (after a reopening, of those left).
  bool past_window(size_t step, size_t total, const RoundOptions& o) const {
    return total > 0 &&
           double(step) >
               double(phase_start) + o.grow_until * double(total - std::min(total, phase_start));
  }

  /// The round's share over the settling window (median) and, for the paired test, its
  /// standard error and t statistic (medians of the window's).
  void fill_share(RoundDecision& out, const RoundOptions& o) const {
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
  static bool paired_pays(const RoundDecision& d, const RoundOptions& o, double z) {
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
