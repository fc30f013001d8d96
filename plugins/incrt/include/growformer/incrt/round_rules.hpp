// The criteria of `incrt_geometric` that decide *whether* to grow from the validation probe, as
// strategy classes behind one interface (`RoundRule`): `learning` (the default: rounds while the
// model learns, learning_rounds.hpp) and `gain` (rounds at plateaus, gain_rounds.hpp). INCRT's
// geometry says *where* a round's heads go in both; the policy owns that, the probe's plumbing
// and the edits. The third criterion, `energy` (the paper's threshold on the uncaptured energy),
// reads no probe and is the policy's per-block geometry check.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <growformer/incrt/gain_rounds.hpp>
#include <growformer/incrt/learning_rounds.hpp>

namespace gf::incrt {

/// What a rule was before a decision (for the decision's events).
struct RoundSnapshot {
  std::vector<std::pair<size_t, long>> round;
  size_t round_step = 0;
  double prev = std::numeric_limits<double>::quiet_NaN();  // the settled loss before the round
  double patience = 0.0;                                   // the steps a round is given
  bool stopped = false;
  double stopped_at = std::numeric_limits<double>::quiet_NaN();  // the loss growth stopped at
};

using RoundHeads = std::vector<std::pair<size_t, long>>;

/// A criterion that grows in rounds, each judged on the validation probe.
class RoundRule {
 public:
  virtual ~RoundRule() = default;
  virtual const char* name() const = 0;
  /// Whether the check with index CHECK evaluates the probe.
  virtual bool wants_probe(size_t check) const = 0;
  virtual size_t probe_examples() const = 0;
  /// Whether rounds wait for every block's INCRT calibration.
  virtual bool needs_calibration() const = 0;
  /// A round waits for its test (its heads may still be taken back).
  virtual bool waiting() const = 0;
  /// The probe also measures the waiting round with its heads muted.
  virtual bool measures_round() const = 0;
  /// The run keeps a twin of the model without the round in `round()` (share_from twin: on
  /// trial, where its share is read from the twin, and from the growth of a round that goes on
  /// trial later).
  virtual bool keeps_twin() const { return false; }
  /// The waiting round's heads sit out every N-th training step (0: never).
  virtual size_t mute_every() const = 0;
  /// The share of every training batch's examples the waiting round's heads sit out on.
  virtual double mute_examples() const = 0;
  virtual RoundHeads& round() = 0;
  virtual const RoundHeads& round() const = 0;
  virtual RoundSnapshot snapshot() const = 0;
  /// Every head the rule remembers (its round's, and the learning rule's past rounds), each
  /// mapped by TO: a new (block, id), or nothing when the head left the model.
  virtual void remap(
      const std::function<std::optional<std::pair<size_t, long>>(const std::pair<size_t, long>&)>&
          to) {
    RoundHeads kept;
    for (const auto& h : round())
      if (auto n = to(h)) kept.push_back(*n);
    round() = kept;
  }
  /// Every probe, whether or not the rule may decide at it (before calibration ends too).
  virtual void watch(double loss, size_t step) {
    (void)loss;
    (void)step;
  }
  /// One probe (at a check where the rule may decide): the decision.
  virtual RoundDecision observe(const ProbeReading& p) = 0;
  /// The policy grew ADDED heads (0: none; growth stops) at STEP after a Grow.
  virtual void grown(size_t added, double settled, size_t step) = 0;
  /// The rule's own numbers for the `probe` event (non-finite ones are left out) and its phase.
  virtual std::vector<std::pair<std::string, double>> probe_numbers(
      const ProbeReading& p) const = 0;
  virtual std::string phase() const = 0;
  virtual std::string plot() const = 0;  // the `probe` event's numbers `growformer report` draws
  virtual void summarize(std::map<std::string, double>& out) const = 0;
  /// The state, behind a word naming the rule.
  virtual void save(std::ostringstream& os) const = 0;
  /// The state, after the word naming the rule (read by the caller).
  virtual void load(Reader& r) = 0;
};

/// `criterion: gain`: rounds at plateaus of the probe loss (GainState).
class GainRule final : public RoundRule {
 public:
  explicit GainRule(const RoundOptions& o) : o_(o) {}
  const char* name() const override { return "gain"; }
  bool wants_probe(size_t check) const override { return check % s_.probe_interval(o_) == 0; }
  size_t probe_examples() const override { return o_.probe_examples; }
  bool needs_calibration() const override { return true; }
  bool waiting() const override { return s_.has_prev && !s_.done; }
  bool measures_round() const override { return o_.attribution || o_.paired; }
  size_t mute_every() const override { return o_.paired ? o_.mute_every : 0; }
  double mute_examples() const override { return o_.paired ? o_.mute_examples : 0.0; }
  RoundHeads& round() override { return s_.round; }
  const RoundHeads& round() const override { return s_.round; }
  RoundSnapshot snapshot() const override {
    return {s_.round, s_.round_step, s_.prev, s_.patience_steps(o_), s_.done, s_.done_at};
  }
  RoundDecision observe(const ProbeReading& p) override {
    return s_.observe(p.loss, p.step, p.total, o_, p.muted_loss, p.muted_se);
  }
  /// Every probe, calibrated or not: the learning onset.
  void watch(double loss, size_t step) override { s_.watch(loss, step, o_.min_gain); }
  void grown(size_t added, double settled, size_t step) override { s_.grown(added, settled, step); }
  std::vector<std::pair<std::string, double>> probe_numbers(const ProbeReading&) const override {
    const auto w = s_.windows(std::max<size_t>(o_.settle_probes, 1));
    return {{"window", w.first},
            {"window_before", w.second},
            {"onset_steps",
             s_.onset >= 0 ? double(s_.onset) : std::numeric_limits<double>::quiet_NaN()}};
  }
  std::string phase() const override { return s_.done ? "stopped" : "settling"; }
  std::string plot() const override { return "probe_loss window window_before"; }
  void summarize(std::map<std::string, double>& out) const override {
    out["rounds"] = double(s_.rounds);
    out["rounds_rejected"] = double(s_.rejected);
    out["reopened"] = double(s_.reopened);
  }
  void save(std::ostringstream& os) const override { s_.save(os); }
  void load(Reader& r) override { GainState::state_fields().load(r, s_, r.version()); }
  GainState& state() { return s_; }

 private:
  RoundOptions o_;
  GainState s_;
};

/// `criterion: learning`: rounds while the model learns (LearningState).
class LearningRule final : public RoundRule {
 public:
  explicit LearningRule(const RoundOptions& o) : o_(o) {}
  const char* name() const override { return "learning"; }
  bool wants_probe(size_t check) const override { return check >= s_.next_probe; }
  size_t probe_examples() const override { return o_.probe_examples; }
  bool needs_calibration() const override { return false; }
  bool waiting() const override { return s_.waiting(); }
  bool measures_round() const override { return true; }
  /// On trial; and from a plateau round's growth (the newest plateau round goes on trial at the
  /// onset, so its twin is the model that never grew it, as an onset round's is).
  bool keeps_twin() const override {
    if (!o_.twin || s_.round.empty()) return false;
    return s_.phase == LearningState::Trial ||
           (s_.phase == LearningState::WarmUp && s_.plateau_rounds > 0);
  }
  /// In the review the round sits out only with review_sit_out (it is trained in full otherwise).
  size_t mute_every() const override {
    return s_.phase == LearningState::Review && !o_.review_sit_out ? 0 : o_.mute_every;
  }
  double mute_examples() const override {
    if (s_.phase != LearningState::Review) return o_.mute_examples;
    if (o_.review_mute_examples >= 0.0) return o_.review_mute_examples;
    return o_.review_sit_out ? o_.mute_examples : 0.0;
  }
  RoundHeads& round() override { return s_.round; }
  const RoundHeads& round() const override { return s_.round; }
  RoundSnapshot snapshot() const override {
    return {s_.round, s_.round_step, s_.prev, 0.0, s_.phase == LearningState::Stopped, s_.best};
  }
  void remap(
      const std::function<std::optional<std::pair<size_t, long>>(const std::pair<size_t, long>&)>&
          to) override {
    s_.remap(to);
  }
  RoundDecision observe(const ProbeReading& p) override {
    const RoundDecision d = s_.observe(p, o_);
    schedule(p);
    return d;
  }
  void grown(size_t added, double settled, size_t step) override { s_.grown(added, settled, step); }
  /// The next probe, from the phase after this check's decision (a waiting round is probed twice).
  void schedule(const ProbeReading& p) {
    s_.next_probe = p.check + s_.probe_interval(p.batch, p.steps_per_check, p.examples);
  }
  std::vector<std::pair<std::string, double>> probe_numbers(const ProbeReading& p) const override {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {{"onset_steps", s_.onset >= 0 ? double(s_.onset) : nan},
            {"round_heads", double(s_.round.size())},
            {"round_age", s_.waiting() ? double(p.step - s_.round_step) : nan},
            {"z_needed", s_.waiting() ? s_.z_needed(p.step, p.total, o_) : nan},
            {"min_share", o_.min_share},
            {"probe_every_checks", double(s_.next_probe > p.check ? s_.next_probe - p.check : 1)}};
  }
  std::string phase() const override {
    return s_.phase == LearningState::WarmUp   ? "warm-up"
           : s_.phase == LearningState::Trial  ? "trial"
           : s_.phase == LearningState::Review ? "review"
                                               : "stopped";
  }
  std::string plot() const override { return "probe_loss round_t,z_needed round_share,min_share"; }
  void summarize(std::map<std::string, double>& out) const override {
    out["rounds"] = double(s_.rounds);
    out["rounds_rejected"] = double(s_.rejected);
    out["rounds_kept_unpaid"] = double(s_.kept_unpaid);
    out["rounds_taken_back_late"] = double(s_.rejected_late);
    out["rounds_on_plateau"] = double(s_.plateau_grown);
    out["reopened"] = double(s_.reopened);
    if (s_.onset >= 0) out["onset_steps"] = double(s_.onset);
  }
  void save(std::ostringstream& os) const override { s_.save(os); }
  void load(Reader& r) override { s_.load_fields(r); }
  LearningState& state() { return s_; }

 private:
  RoundOptions o_;
  LearningState s_;
};

}  // namespace gf::incrt
