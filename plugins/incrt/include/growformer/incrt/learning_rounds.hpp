// INCRT growth while the model learns (`criterion: learning`, the default of `incrt_geometric`;
// docs/INCRT.md, "The default rule: grow while learning").
//
// The rule asks the validation probe one question at a time, and never waits for a plateau:
// - warm-up: has the model started to learn (the probe loss fell 5 % under its first value)?
//   Then a round grows at once: the block's heads double, aimed by INCRT's geometry.
// - trial: do the round's heads carry part of the loss the probe measures? At every probe the
//   round's heads are muted on the probe (paired, example by example); the round pays when the
//   median share over the last W probes reaches min_share with a paired t of z_early (z once the
//   growth window has ended). The round trains in full meanwhile (round_mute_every 0). A paid
//   round is followed by the next once it is mature (pace onset: it has trained as long as the
//   model took to start learning), and so is a promising one (take_back useless: a positive share
//   whose bound reaches min_share, once it has trained as long as the onset). When the window ends
//   a round still unpaid is taken back only on evidence that its heads are useless (take_back
//   unproven: whenever it has not paid), and growth stops.
// - review (`review: on`): once the window has ended the kept rounds are judged again, newest
//   first, now that the model has trained with them: muted on the probe as in a trial, a round
//   shown to carry under min_share is taken back and the round before it reviewed; one shown to
//   carry more ends the review, and so does review_until.
// - stopped: the probe loss rising well over the best it reached since (a changed task) reopens
//   growth, as a new warm-up.
// The probe's examples and interval are derived so that the probe costs at most 15 % of the
// training work (`probe_interval`). The state is a pure function of the probes it was fed.
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

#include <growformer/incrt/rounds.hpp>

namespace gf::incrt {

/// The fixed constants of the learning rule, each with its reason (docs/INCRT.md).
struct LearningConstants {
  /// W: the round's share and t are medians over its last W probes (one probe's t carries the
  /// noise of one probe; three is the fewest whose median ignores one outlier).
  static constexpr size_t window = 3;
  /// Learning has begun once the probe loss fell this fraction under the phase's first probe:
  /// a loss flat at chance shows no structure for a head to be aimed at.
  static constexpr double onset_fall = 0.05;
  /// The probe costs at most this fraction of the training work (a probe example's forward pass
  /// counted as a third of a training example's forward and backward pass; measured, that count
  /// is generous: at 0.25 the probes took 10..13 % of the training steps' time on the development
  /// family, checks included 12..16 %; at 0.15, 8.5..9.4 % with the checks).
  static constexpr double probe_cost = 0.15;
  /// Once growth stopped, the reopen watch probes this many times less often.
  static constexpr size_t stopped_slowdown = 4;
  /// The trend of a round's share is fitted over at most its last this many probes, and read
  /// from at least trend_min (a line through fewer has no spread to test against).
  static constexpr size_t trend_probes = 32;
  static constexpr size_t trend_min = 4;
  /// At most this many plateau rounds grow (the start's heads times 4): a search that finds
  /// nothing then costs at most a 4-fold block until the window ends and takes them back.
  static constexpr size_t plateau_rounds_max = 2;
  /// A probe loss under this fraction of the run's first (the loss at chance) is a solved task:
  /// no round grows there, and shares are of at least that loss (every head looks needed on a
  /// solved task, and muting a round costs a share of almost nothing). At least loss_floor.
  static constexpr double solved_fraction = 0.05;
};

/// One validation probe as a round rule reads it.
struct ProbeReading {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double muted_loss = std::numeric_limits<double>::quiet_NaN();      // with the round's heads muted
  double muted_se = std::numeric_limits<double>::quiet_NaN();        // its paired standard error
  double accuracy = std::numeric_limits<double>::quiet_NaN();        // the probe's accuracy
  double muted_accuracy = std::numeric_limits<double>::quiet_NaN();  // with the round muted
  bool from_twin = false;  // muted_*: the model's twin without the round (share_from twin)
  size_t step = 0, total = 0;
  size_t check = 0;            // the policy's check index (probes are scheduled in checks)
  size_t batch = 0;            // training examples per step (the probe batch's rows)
  size_t steps_per_check = 0;  // training steps since the previous check
  size_t examples = 0;         // the probe's examples
};

/// The learning rule's state across probes (saved with the policy state).
struct LearningState {
  enum Phase : int { WarmUp = 0, Trial = 1, Stopped = 2, Review = 3 };
  int phase = WarmUp;
  double first = std::numeric_limits<double>::quiet_NaN();  // the phase's first probe loss
  size_t first_step = 0;                                    // and its step
  size_t phase_start = 0;                                   // the step growth last (re)opened at
  size_t round_step = 0;                                    // the step the waiting round grew at
  double prev = std::numeric_limits<double>::quiet_NaN();   // the probe loss it grew at
  std::vector<std::pair<size_t, long>> round;               // (block, head id) of the waiting round
  Vec shares, share_ses;          // the waiting round's share and its se at its last W probes
  Vec trend_steps, trend_shares;  // the waiting round's share at each of its probes (the trend)
  double best = std::numeric_limits<double>::quiet_NaN();  // stopped: the lowest probe loss since
  size_t rise = 0;  // stopped: consecutive probes over (1 + reopen_rise) x best
  size_t rounds = 0, rejected = 0, reopened = 0;
  size_t kept_unpaid = 0;  // rounds kept at the window's end without evidence they are useless
  // take_back useless: the waiting round was grown on its predecessor's promise, not its pay
  // (it must pay before another round grows); and the round about to grow will be
  bool on_promise = false, next_on_promise = false;
  long onset = -1;        // steps from the run's first probe to its learning onset (the
                          // first warm-up's): how long a round trains before it is judged
  size_t next_probe = 0;  // the check index of the next probe
  // the rounds grown before the waiting (or reviewed) round and still in the model: each head
  // (block, id), the round's number and the step it grew at (for the review, newest first)
  std::vector<std::pair<size_t, long>> past;
  Vec past_round, past_step;
  double round_no = 0;       // the number of the round in `round` (1: the first grown)
  size_t rejected_late = 0;  // rounds taken back by the review
  // plateau rounds grown in this warm-up (not on trial; the newest goes on trial at the onset)
  size_t plateau_rounds = 0;
  size_t plateau_grown = 0;  // plateau rounds grown in the run
  // the waiting round is a plateau round that doubled heads grown on the plateau: it must pay by
  // the window's end
  bool plateau_trial = false;
  double chance = std::numeric_limits<double>::quiet_NaN();  // the run's first probe loss

  /// A round's heads are on trial: while it waits for its verdict, and while it is reviewed.
  bool waiting() const { return phase == Trial || phase == Review; }

  /// The step at FRACTION of the steps (after a reopening, of those left then).
  double at_fraction(double fraction, size_t total) const {
    return double(phase_start) + fraction * double(total - std::min(total, phase_start));
  }
  /// The growth window's end (grow_until) and the review's (review_until).
  double window_end(size_t total, const RoundOptions& o) const {
    return at_fraction(o.grow_until, total);
  }
  double review_end(size_t total, const RoundOptions& o) const {
    return at_fraction(o.review_until, total);
  }
  /// Past the growth window.
  bool late(size_t step, size_t total, const RoundOptions& o) const {
    return total > 0 && double(step) > window_end(total, o);
  }
  /// Whether a round grown at STEP can still be judged inside the window: it is given as many
  /// steps as the last round took to pay (the first round: as many as the model took to start
  /// learning), so a round is not grown only to be taken back untested when the window ends.
  bool fits(size_t step, size_t total, size_t need, const RoundOptions& o) const {
    return total == 0 || double(step + need) <= window_end(total, o);
  }

  /// The t a round's share must reach at STEP: z_early inside the growth window, z at its end.
  double z_needed(size_t step, size_t total, const RoundOptions& o) const {
    return late(step, total, o) ? o.z : o.z_early;
  }

  /// Checks between two probes now: the fewest for which a probe (EXAMPLES examples, evaluated
  /// twice while a round waits) costs at most probe_cost of training BATCH examples for
  /// STEPS_PER_CHECK steps a check (a probe forward pass as a third of a training step's
  /// work); four times that once growth stopped (only the reopen watch reads it).
  size_t probe_interval(size_t batch, size_t steps_per_check, size_t probe_size) const {
    const double evals = waiting() ? 2.0 : 1.0;
    const double per_check = LearningConstants::probe_cost * 3.0 *
                             double(std::max<size_t>(batch, 1)) *
                             double(std::max<size_t>(steps_per_check, 1));
    const double need = evals * double(std::max<size_t>(probe_size, 1)) / per_check;
    size_t every = std::max<size_t>(1, static_cast<size_t>(std::ceil(need - 1e-9)));
    if (phase == Stopped) every *= LearningConstants::stopped_slowdown;
    return every;
  }

  /// One probe: what to do now. After Grow the caller grows a round and calls grown(); after
  /// Reject it removes `round`'s heads (the state has already stopped).
  RoundDecision observe(const ProbeReading& p, const RoundOptions& o) {
    RoundDecision out;
    if (!std::isfinite(p.loss)) return out;
    if (!std::isfinite(chance)) chance = p.loss;
    out.settled = p.loss;  // the probe the decision is taken at (the loss may still be falling)
    if (phase == Trial) return trial(p, o);
    if (phase == Review) return review(p, o);
    if (phase == Stopped) return stopped(p, o);
    // warm-up
    if (!std::isfinite(first)) {
      first = p.loss;
      first_step = p.step;
    }
    const bool learnt = p.loss <= first * (1.0 - LearningConstants::onset_fall);
    if (learnt && onset < 0) onset = long(p.step - first_step);
    if (late(p.step, p.total, o) && plateau_rounds > 0) {
      // the window ended before the plateau rounds' trial began (the loss where it started, or
      // leaving it only now): the heads grown to search found nothing in time, and every
      // plateau round goes
      out.kind = RoundDecision::Kind::Reject;
      out.evidence = "no_onset";
      out.heads = round;
      out.heads.insert(out.heads.end(), past.begin(), past.end());
      rejected += plateau_rounds;
      plateau_rounds = 0;
      round.clear();
      past.clear();
      past_round.clear();
      past_step.clear();
      stop(p.loss);
      return out;
    }
    if (late(p.step, p.total, o) || p.loss <= solved(o)) {
      // nothing learnt in the window, or nothing left for a round to capture
      out.kind = RoundDecision::Kind::Stop;
      stop(p.loss);
      return out;
    }
    if (!learnt) {
      if (plateau_due(p, o)) {
        out.kind = RoundDecision::Kind::Grow;
        out.evidence = "plateau";
      }
      return out;
    }
    if (plateau_rounds > 0 && !round.empty()) {
      // learning has begun with plateau rounds in the model: the newest is judged as the
      // onset's round would be (it must pay before another round grows)
      start_plateau_trial(p.loss);
      return out;
    }
    if (!o.take_back_useless && !fits(p.step, p.total, p.step - first_step, o)) {
      out.kind = RoundDecision::Kind::Stop;  // too late for a round to be judged
      stop(p.loss);
      return out;
    }
    out.kind = RoundDecision::Kind::Grow;
    return out;
  }

  /// The caller grew HEADS_ADDED heads at STEP (0: no room or no plane; growth stops).
  void grown(size_t heads_added, double loss, size_t step) {
    if (heads_added == 0) {
      stop(loss);
      return;
    }
    // the round before (paid, promising or a plateau round) stays in the model: remembered
    // for the review
    keep_round();
    rounds += 1;
    round_no = double(rounds);
    round_step = step;
    if (phase == WarmUp && onset < 0) {
      // a plateau round (the only round a warm-up grows before the onset): trained in full, not
      // on trial (its heads are told by the edits)
      plateau_rounds += 1;
      plateau_grown += 1;
      return;
    }
    plateau_rounds = 0;
    plateau_trial = false;
    phase = Trial;
    on_promise = next_on_promise;
    next_on_promise = false;
    prev = loss;
    round.clear();  // the round's heads are told by the edits, after this
    forget_shares();
  }

  /// The waiting round's share and t over its last W probes (medians; NaN while fewer).
  void fill(RoundDecision& out) const {
    if (shares.size() < LearningConstants::window) return;
    out.share = median(shares);
    Vec ses, ts;
    for (size_t i = 0; i < shares.size(); ++i) {
      if (!std::isfinite(share_ses[i])) return;  // no spread, no test
      ses.push_back(share_ses[i]);
      ts.push_back(share_ses[i] > 0 ? shares[i] / share_ses[i]
                                    : (shares[i] > 0   ? 1e300
                                       : shares[i] < 0 ? -1e300
                                                       : 0.0));
    }
    out.share_se = median(ses);
    out.t = median(ts);
  }

  static const StateFields<LearningState>& state_fields() {
    using L = LearningState;
    static const auto f = StateFields<L>()
                              .add("phase", &L::phase)
                              .add("first", &L::first)
                              .add("first_step", &L::first_step)
                              .add("phase_start", &L::phase_start)
                              .add("round_step", &L::round_step)
                              .add("prev", &L::prev)
                              .add("round", &L::round)
                              .add("shares", &L::shares)
                              .add("share_ses", &L::share_ses)
                              .add("best", &L::best)
                              .add("rise", &L::rise)
                              .add("rounds", &L::rounds)
                              .add("rejected", &L::rejected)
                              .add("reopened", &L::reopened)
                              .add("onset", &L::onset)
                              .add("next_probe", &L::next_probe)
                              .add("trend_steps", &L::trend_steps, 10)
                              .add("trend_shares", &L::trend_shares, 10)
                              .add("kept_unpaid", &L::kept_unpaid, 10)
                              .add("on_promise", &L::on_promise, 10)
                              .add("next_on_promise", &L::next_on_promise, 10)
                              .add("past", &L::past, 12)
                              .add("past_round", &L::past_round, 12)
                              .add("past_step", &L::past_step, 12)
                              .add("round_no", &L::round_no, 12)
                              .add("rejected_late", &L::rejected_late, 12)
                              .add("plateau_rounds", &L::plateau_rounds, 13)
                              .add("plateau_grown", &L::plateau_grown, 13)
                              .add("plateau_trial", &L::plateau_trial, 13)
                              .add("chance", &L::chance, 13);
    return f;
  }
  void save(std::ostringstream& os) const {
    os << "learning ";
    state_fields().save(os, *this);
  }
  /// The fields after the word `learning`.
  void load_fields(Reader& r) {
    state_fields().load(r, *this, r.version());
    if (phase < WarmUp || phase > Review)
      throw RuntimeError("incrt_geometric: policy state: bad phase");
    if (share_ses.size() != shares.size())
      throw RuntimeError("incrt_geometric: policy state: shares and their errors differ in length");
    if (trend_steps.size() != trend_shares.size())
      throw RuntimeError(
          "incrt_geometric: policy state: the share trend's steps and shares differ");
    if (past_round.size() != past.size() || past_step.size() != past.size())
      throw RuntimeError(
          "incrt_geometric: policy state: the past rounds' heads, numbers and steps differ");
  }

  /// Every head remembered (the round's, the past rounds'), mapped by TO: a new (block, id), or
  /// nothing when the head left the model (removed by this rule or another policy, or its block).
  template <class To>
  void remap(const To& to) {
    std::vector<std::pair<size_t, long>> r;
    for (const auto& h : round)
      if (auto n = to(h)) r.push_back(*n);
    round = r;
    std::vector<std::pair<size_t, long>> p;
    Vec pr, ps;
    for (size_t i = 0; i < past.size(); ++i)
      if (auto n = to(past[i])) {
        p.push_back(*n);
        pr.push_back(past_round[i]);
        ps.push_back(past_step[i]);
      }
    past = p;
    past_round = pr;
    past_step = ps;
  }

 private:
  /// The round's share at probe P (when measured), into its last W and its trend.
  void record(const ProbeReading& p, const RoundOptions& o) {
    if (std::isfinite(p.muted_loss)) {
      // a share of a negligible loss is negligible (on a solved task every head is used)
      const double scale = std::max(p.loss, solved(o));
      shares.push_back((p.muted_loss - p.loss) / scale);
      share_ses.push_back(std::isfinite(p.muted_se) ? p.muted_se / scale
                                                    : std::numeric_limits<double>::quiet_NaN());
      while (shares.size() > LearningConstants::window) {
        shares.erase(shares.begin());
        share_ses.erase(share_ses.begin());
      }
      trend_steps.push_back(double(p.step));
      trend_shares.push_back(shares.back());
      while (trend_shares.size() > LearningConstants::trend_probes) {
        trend_steps.erase(trend_steps.begin());
        trend_shares.erase(trend_shares.begin());
      }
    }
  }

  RoundDecision trial(const ProbeReading& p, const RoundOptions& o) {
    RoundDecision out;
    out.settled = p.loss;
    record(p, o);
    fill(out);
    const bool is_late = late(p.step, p.total, o);
    const bool pays = std::isfinite(out.share) && std::isfinite(out.t) &&
                      out.share >= o.min_share && out.t >= (is_late ? o.z : o.z_early);
    if (pays && o.pace_onset && !mature(p) && !is_late) {
      // paid while younger than the onset: the next round waits until this one is mature (a
      // share read so young says what its heads carry now, not that the task needs still more;
      // each doubling waits as long as the model took to start learning)
      out.evidence = "paid_young";
      return out;
    }
    if (pays) {
      out.evidence = "paid";
      // paid: the next round grows now, if the window leaves it the time this one needed (under
      // take_back useless a round that cannot be judged in time is kept, so it grows anyway)
      const bool next = !is_late && p.loss > solved(o) &&
                        (o.take_back_useless || fits(p.step, p.total, p.step - round_step, o));
      out.kind = next ? RoundDecision::Kind::Grow : RoundDecision::Kind::Stop;
      if (next)
        phase = WarmUp;  // the caller grows the next round now (grown() starts its trial)
      else
        stop(p.loss);  // paid: not reviewed
      return out;
    }
    if (!is_late && p.loss > solved(o) && promising(p, out, o)) {
      out.evidence = "promising";
      out.kind = RoundDecision::Kind::Grow;
      phase = WarmUp;
      next_on_promise = true;
      return out;
    }
    if (is_late) {
      // unpaid when the window ends: taken back on evidence that its heads are useless (or, with
      // take_back unproven, for want of evidence that they pay; a plateau round that doubled
      // plateau heads, for want of pay: it was grown on no evidence, and the heads before it
      // already hold what an onset round would); kept otherwise
      const bool useless = judge_unpaid(p, out, o);  // (its evidence, bound and trend)
      if (plateau_trial || useless) {
        if (plateau_trial) out.evidence = "plateau_unpaid";
        out.kind = RoundDecision::Kind::Reject;
        rejected += 1;
        round.clear();  // (the caller removes its heads)
        stop(p.loss);
      } else {
        out.kind = RoundDecision::Kind::Keep;
        kept_unpaid += 1;
        end_window(p, o, out.evidence);
      }
    }
    return out;
  }

  /// The growth window has ended keeping the waiting round on EVIDENCE: a round neither shown
  /// useless nor still learning (`not_shown_useless`: mature, its share not rising, its bound
  /// reaching min_share) is reviewed, if the review can reach a verdict in time; a round whose
  /// share is rising or that is younger than the onset is left to learn, and growth stops.
  void end_window(const ProbeReading& p, const RoundOptions& o, const std::string& evidence) {
    if (!o.review || evidence != "not_shown_useless" || !review_fits(p, o)) {
      stop(p.loss);
      return;
    }
    start_review();
  }

  /// Whether a review begun at P can reach a verdict by review_until: trend_min probes at the
  /// review's interval (a round's probes, evaluated twice) fit in the steps left. A review that
  /// cannot take a round back would only cost its probes.
  bool review_fits(const ProbeReading& p, const RoundOptions& o) const {
    LearningState as_review;
    as_review.phase = Review;
    const double every = double(as_review.probe_interval(p.batch, p.steps_per_check, p.examples)) *
                         double(std::max<size_t>(p.steps_per_check, 1));
    return double(p.step) + double(LearningConstants::trend_min) * every <= review_end(p.total, o);
  }

  /// The loss under which the task is solved: loss_floor, or solved_fraction of the run's first
  /// probe loss if more.
  double solved(const RoundOptions& o) const {
    return std::max(o.loss_floor,
                    std::isfinite(chance) ? LearningConstants::solved_fraction * chance : 0.0);
  }

  /// A plateau round is due at P: the run's first warm-up (no onset yet) has seen no learning
  /// for `plateau` of the run's steps since it began or since the last plateau round, fewer
  /// than plateau_rounds_max have grown, and P is within the first half of the growth window
  /// (a round grown later would have too little of the window left to be learnt and judged).
  bool plateau_due(const ProbeReading& p, const RoundOptions& o) const {
    if (o.plateau <= 0 || onset >= 0 || p.total == 0 ||
        plateau_rounds >= LearningConstants::plateau_rounds_max)
      return false;
    const double since = double(plateau_rounds > 0 ? round_step : first_step);
    return double(p.step) >= since + o.plateau * double(p.total) &&
           double(p.step) <= at_fraction(o.grow_until / 2.0, p.total);
  }

  /// The learning onset came with plateau rounds in the model: the newest (held in `round`,
  /// the older ones in `past`) goes on trial as a round grown without proof, so it must pay
  /// before another round grows; its age counts from its growth.
  void start_plateau_trial(double loss) {
    plateau_trial = !past.empty();  // (the first plateau round is judged as an onset round)
    plateau_rounds = 0;
    phase = Trial;
    on_promise = true;
    next_on_promise = false;
    prev = loss;
    forget_shares();
  }

  /// The waiting round's shares and their trend are forgotten (a new trial or review reads its
  /// own).
  void forget_shares() {
    shares.clear();
    share_ses.clear();
    trend_steps.clear();
    trend_shares.clear();
  }

  /// The newest past round becomes the round (its heads leave `past`).
  void pop_past() {
    round.clear();
    if (past.empty()) return;
    const double newest = *std::max_element(past_round.begin(), past_round.end());
    for (size_t i = 0; i < past.size();) {
      if (past_round[i] == newest) {
        round_no = newest;
        round.push_back(past[i]);
        round_step = size_t(past_step[i]);
        past.erase(past.begin() + long(i));
        past_round.erase(past_round.begin() + long(i));
        past_step.erase(past_step.begin() + long(i));
      } else {
        ++i;
      }
    }
  }

  void start_review() {
    phase = Review;
    forget_shares();
  }

  /// One probe of the review: the round under review is taken back when, after the window and
  /// at least trend_min probes of the review, the median share it carries is still under
  /// min_share and not rising (the round mature); kept when shown over min_share (the lower
  /// bound reaches it: the older rounds are not reviewed) or when the review's time ends. Inside
  /// the window a round goes only on a bound (its heads may not be used yet); by the review the
  /// model has trained with them for the window and more, so what they carry is judged as it
  /// is: a round worth under min_share of the loss costs under that share when it goes.
  RoundDecision review(const ProbeReading& p, const RoundOptions& o) {
    RoundDecision out;
    out.settled = p.loss;
    record(p, o);  // the review's own probes: its trend starts empty
    fill(out);
    out.trend_t = trend_t();
    if (std::isfinite(out.share) && std::isfinite(out.share_se))
      out.upper = out.share + o.z_back * out.share_se;
    const bool used = std::isfinite(out.share) && std::isfinite(out.share_se) &&
                      out.share - o.z_back * out.share_se >= o.min_share;
    const bool unused = trend_shares.size() >= LearningConstants::trend_min &&
                        std::isfinite(out.share) && out.share < o.min_share && !rising(out, o) &&
                        mature(p);
    const bool over = double(p.step) >= review_end(p.total, o);
    if (unused && !over) {
      out.kind = RoundDecision::Kind::Reject;
      out.evidence = "unused_late";
      rejected_late += 1;
      rejected += 1;
      pop_past();  // the caller removes the reviewed round's heads (its snapshot)
      if (round.empty() || !review_fits(p, o))
        stop(p.loss);
      else
        start_review();
      return out;
    }
    if (used || over) {
      out.kind = RoundDecision::Kind::Keep;
      out.evidence = used ? "used" : "not_shown_useless";
      stop(p.loss);
    }
    return out;
  }

  /// take_back useless: a round not yet paid, but not shown useless, whose heads have trained as
  /// long as the model took to start learning while the probe loss kept falling: the next round
  /// grows without waiting for proof (a missing head costs more than a spare one). Its share is
  /// positive and its upper bound reaches min_share; the loss fell onset_fall since it grew. A
  /// round itself grown on a promise must pay before another grows, so rounds grown on promise
  /// at most double what the paid rounds show the task uses.
  bool promising(const ProbeReading& p, RoundDecision& out, const RoundOptions& o) const {
    if (!o.take_back_useless || on_promise || !std::isfinite(out.share) ||
        !std::isfinite(out.share_se))
      return false;
    out.upper = out.share + o.z_back * out.share_se;
    // read from the twin, a share has no co-adaptation to inflate it, only noise: a promise
    // needs it one standard error over zero
    const bool over_noise = !o.twin || out.share >= out.share_se;
    return out.share > 0 && over_noise && out.upper >= o.min_share && mature(p) &&
           p.loss <= prev * (1.0 - LearningConstants::onset_fall);
  }

  /// The waiting round has trained as long as the model took to start learning (its onset):
  /// younger, what its heads carry says little of what they will carry, while the older heads
  /// still absorb what is easy to learn.
  bool mature(const ProbeReading& p) const {
    return double(p.step - round_step) >= double(std::max<long>(onset, 1));
  }

  /// The evidence on a round unpaid at the window's end (into OUT); true when it is taken back.
  /// useless: the median share's upper bound, share + z_back se, is under min_share, the share
  /// is not rising (its least-squares trend over the round's probes under z_back standard
  /// errors) and the round is mature. A share still rising, one whose bound reaches min_share,
  /// or a round younger than the onset keeps the round: the heads the model has not yet learnt
  /// to use are not judged by what they carry now.
  bool judge_unpaid(const ProbeReading& p, RoundDecision& out, const RoundOptions& o) const {
    out.trend_t = trend_t();
    if (std::isfinite(out.share) && std::isfinite(out.share_se))
      out.upper = out.share + o.z_back * out.share_se;
    if (!o.take_back_useless) {
      out.evidence = "unproven";
      return true;
    }
    const bool young = !mature(p);
    // read from the twin, a rising share keeps the round only if its trend reaches min_share by
    // the run's last step: what the heads will be worth by the end of the budget
    const bool rise = rising(out, o) && (!o.twin || reaches_by_end(p, out, o));
    const bool useless = std::isfinite(out.upper) && out.upper < o.min_share && !rise && !young;
    out.evidence = useless ? "useless" : rise ? "rising" : young ? "young" : "not_shown_useless";
    return useless;
  }

  /// The round's latest share plus its least-squares trend times the steps left to the run's
  /// end reaches min_share.
  bool reaches_by_end(const ProbeReading& p, const RoundDecision& out,
                      const RoundOptions& o) const {
    const double slope = trend_slope();
    if (!std::isfinite(slope) || !std::isfinite(out.share)) return false;
    const double left = double(p.total > p.step ? p.total - p.step : 0);
    return trend_shares.back() + slope * left >= o.min_share;
  }

  /// The share's trend rises: its t (in OUT) at least z_back.
  static bool rising(const RoundDecision& out, const RoundOptions& o) {
    return std::isfinite(out.trend_t) && out.trend_t >= o.z_back;
  }

  /// The least-squares slope of the round's share against the step (NaN as trend_t).
  double trend_slope() const { return trend().slope; }

  /// The t statistic of the least-squares slope of the round's share against the step (NaN
  /// with fewer than trend_min probes or no spread in the steps).
  double trend_t() const { return trend().t; }

  struct Trend {
    double slope = std::numeric_limits<double>::quiet_NaN();
    double t = std::numeric_limits<double>::quiet_NaN();
  };
  /// The least-squares fit of the round's share against the step over its last probes.
  Trend trend() const {
    const size_t n = trend_shares.size();
    Trend out;
    if (n < LearningConstants::trend_min) return out;
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; ++i) {
      mx += trend_steps[i] / double(n);
      my += trend_shares[i] / double(n);
    }
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; ++i) {
      sxx += (trend_steps[i] - mx) * (trend_steps[i] - mx);
      sxy += (trend_steps[i] - mx) * (trend_shares[i] - my);
    }
    if (!(sxx > 0)) return out;
    const double slope = sxy / sxx;
    double sse = 0;
    for (size_t i = 0; i < n; ++i) {
      const double r = trend_shares[i] - my - slope * (trend_steps[i] - mx);
      sse += r * r;
    }
    const double se = std::sqrt(sse / double(n - 2) / sxx);
    out.slope = slope;
    out.t = se > 0 ? slope / se : slope > 0 ? 1e300 : slope < 0 ? -1e300 : 0.0;
    return out;
  }

  RoundDecision stopped(const ProbeReading& p, const RoundOptions& o) {
    RoundDecision out;
    // the rise is measured against the best loss since the stop, at least the loss floor
    const double ref = std::max(std::isfinite(best) ? best : p.loss, solved(o));
    rise = p.loss > ref * (1.0 + o.reopen_rise) ? rise + 1 : 0;
    if (!std::isfinite(best) || p.loss < best) best = p.loss;
    if (rise < LearningConstants::window) return out;
    phase = WarmUp;
    phase_start = p.step;
    first = p.loss;
    first_step = p.step;
    rise = 0;
    reopened += 1;
    round.clear();
    out.kind = RoundDecision::Kind::Reopen;
    return out;
  }

  /// The heads in `round` stay in the model: they join the past rounds (for a later review).
  void keep_round() {
    for (const auto& h : round) {
      past.push_back(h);
      past_round.push_back(round_no);
      past_step.push_back(double(round_step));
    }
    round.clear();
  }

  /// Growth stops; a round still held (kept) joins the past rounds.
  void stop(double loss) {
    keep_round();
    plateau_trial = false;
    phase = Stopped;
    best = loss;
    rise = 0;
    forget_shares();
  }
};

}  // namespace gf::incrt
