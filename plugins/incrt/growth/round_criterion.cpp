// `criterion: learning` (the default) and `criterion: gain`: growth in rounds judged on the
// validation probe (docs/INCRT.md). At each check with a probe (step): the rule
// (<growformer/incrt/round_rules.hpp>: LearningState::observe or GainState::observe) reads the
// probe and the waiting round's share of its loss and decides: grow a round (grow_round: each
// editable block's heads doubled, aimed at the planes of sym(C M_a) no head carries), keep the
// round, take it back (take_back: its heads removed), stop, or reopen growth.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <growformer/incrt/round_rules.hpp>

#include "criterion.hpp"

namespace gf::incrt::policy {
namespace {

class RoundCriterion final : public Criterion {
 public:
  RoundCriterion(const IncrtSettings& s, const BlockGeometry& g, std::unique_ptr<RoundRule> rule)
      : set_(s), geometry_(g), rule_(std::move(rule)) {}

  const char* state_word() const override { return rule_->name(); }

  size_t validation_probe() const override {
    return rule_->wants_probe(checks_) ? rule_->probe_examples() : 0;
  }

  /// At a probe while a round waits for its test: the round's heads muted.
  std::vector<std::vector<gf::HeadRef>> probe_ablations() const override {
    if (!rule_->measures_round() || !rule_->waiting() || rule_->round().empty() ||
        validation_probe() == 0 || rule_->keeps_twin())
      return {};
    return {round_heads()};
  }

  /// share_from twin: while a round is on trial, the run keeps a twin of the model without it.
  std::vector<gf::HeadRef> twin_without() const override {
    return rule_->keeps_twin() ? round_heads() : std::vector<gf::HeadRef>{};
  }

  /// The waiting round's heads sit out every `round_mute_every`-th training step, so that the
  /// older heads keep working without them and the round's ablation measures what it adds, not
  /// what the older heads came to lean on.
  std::vector<gf::HeadRef> muted_in_training(size_t step) const override {
    const size_t every = rule_->mute_every();
    if (every == 0 || step % every != 0 || !rule_->waiting()) return {};
    return round_heads();
  }

  /// With round_mute_examples the waiting round's heads sit out on that share of every
  /// training batch instead: they train on every step, and the older heads still learn to work
  /// without them.
  gf::GrowthPolicy::ExampleMute muted_on_examples(size_t step) const override {
    (void)step;
    if (rule_->mute_examples() <= 0.0 || !rule_->waiting()) return {};
    return {round_heads(), rule_->mute_examples()};
  }

  /// A waiting round's heads may still be taken back, so the run's best checkpoint is never one
  /// with a waiting round.
  bool on_trial() const override { return rule_->waiting(); }

  /// Reads the probe only at the checks it asked for one: a probe another policy asked for at
  /// another check (a depth or pruning rule beside it) comes without this rule's ablation and
  /// would change the cadence its windows count in, so its decisions would depend on which
  /// other policies run.
  void checked(const gf::TrainView& view, const Blocks& blocks,
               std::map<size_t, RoundInputs>& inputs, std::vector<gf::Edit>& edits) override {
    if (view.metrics.probe_examples > 0 && validation_probe() > 0)
      step(view, blocks, inputs, edits);
    checks_ += 1;
  }

  bool round_head_added(const gf::Edit& e, int new_head_id) override {
    if (pending_ == 0) return false;
    pending_ -= 1;  // a head of this criterion's round
    rule_->round().emplace_back(e.block, new_head_id);
    return true;
  }

  void head_removed(const gf::Edit& e) override {
    const auto gone = std::make_pair(e.block, static_cast<long>(e.head_id));
    rule_->remap([&](const std::pair<size_t, long>& h) -> std::optional<std::pair<size_t, long>> {
      if (h == gone) return std::nullopt;
      return h;
    });
  }

  void blocks_moved(const gf::Edit& e) override {
    rule_->remap([&](const std::pair<size_t, long>& h) -> std::optional<std::pair<size_t, long>> {
      if (std::optional<size_t> to = gf::block_after(e, h.first))
        return std::make_pair(*to, h.second);
      return std::nullopt;
    });
  }

  void summarize(std::map<std::string, double>& out) const override { rule_->summarize(out); }

  void save(std::ostringstream& os) const override {
    rule_->save(os);
    os << checks_ << ' ' << pending_ << ' ';
  }

  void load(gf::state::Reader& r, int version) override {
    refuse_other_criterion(read_state_word(r, version), rule_->name());
    rule_->load(r);
    checks_ = r.u64();
    pending_ = r.u64();
  }

 private:
  /// The heads of the round waiting for its test.
  std::vector<gf::HeadRef> round_heads() const {
    std::vector<gf::HeadRef> set;
    for (const auto& [b, id] : rule_->round()) set.push_back({b, static_cast<int>(id)});
    return set;
  }

  static bool done(const Blocks& blocks, size_t b) {
    auto it = blocks.find(b);
    return it != blocks.end() && it->second.calib.done;
  }

  /// The round rule at a check with a validation probe (criterion: gain): the probe's reading,
  /// then the decision: reopen, stop, take the last round back, or grow a round.
  void step(const gf::TrainView& view, const Blocks& blocks, std::map<size_t, RoundInputs>& inputs,
            std::vector<gf::Edit>& edits) {
    pending_ = 0;  // edits returned by an earlier check and not applied
    const gf::RunMetrics& m = view.metrics;
    rule_->watch(m.probe_loss, view.step);
    const RoundSnapshot before = rule_->snapshot();
    // The gain rule's rounds begin once every block's calibration has ended (its first heads
    // have learned: before that the probe loss can sit flat at chance and look settled).
    bool calibrated = true;
    if (rule_->needs_calibration())
      for (const gf::BlockView& bv : view.blocks)
        if (bv.block && bv.block->can_edit_heads())
          calibrated = calibrated && done(blocks, bv.index);
    ProbeReading p;
    p.loss = m.probe_loss;
    p.accuracy = m.probe_accuracy;
    p.step = view.step;
    p.total = view.total_steps;
    p.check = checks_;
    p.steps_per_check = m.train_steps;
    p.examples = m.probe_examples;
    for (const gf::BlockView& bv : view.blocks)
      if (bv.probe && bv.probe->input.defined() && p.batch == 0) p.batch = bv.probe->input.dim(0);
    if (!rule_->round().empty() && rule_->keeps_twin()) {
      if (const gf::TwinProbe* t = m.twin_without(round_heads())) {
        p.muted_loss = t->loss;  // the twin: the model trained without the round
        p.from_twin = true;
        p.muted_accuracy = t->accuracy;
        if (m.probe_examples > 1) p.muted_se = t->diff_sd / std::sqrt(double(m.probe_examples));
      }
    } else if (!rule_->round().empty()) {
      if (const gf::Ablation* a = m.ablation(round_heads())) {
        p.muted_loss = a->loss;  // the probe without the round
        p.muted_accuracy = a->accuracy;
        if (m.probe_examples > 1) p.muted_se = a->diff_sd / std::sqrt(double(m.probe_examples));
      }
    }
    const std::string phase = !calibrated ? "calibrating" : rule_->phase();
    // a verdict at the growth window's end, or in the late review that follows it
    const std::string stage = phase == "review" ? "review" : "window_end";
    const RoundDecision dec = calibrated ? rule_->observe(p) : RoundDecision{};
    emit_probe(view, p, dec, phase);
    using K = RoundDecision::Kind;
    if (dec.kind == K::Reopen) {
      note(view, "reopen", {{"probe_loss", m.probe_loss}, {"settled_before", before.stopped_at}});
    } else if (dec.kind == K::Stop) {
      note(view, "growth_stop", {{"settled", dec.settled}, {"grow_until", set_.rounds.grow_until}});
    } else if (dec.kind == K::Reject) {
      take_back(view, before, dec, stage, edits);
    } else if (dec.kind == K::Keep) {
      note(view, "round_kept",
           {{"round_heads", double(before.round.size())},
            {"round_age", double(view.step - before.round_step)},
            {"round_share", dec.share},
            {"round_t", dec.t},
            {"upper", dec.upper},
            {"trend_t", dec.trend_t},
            {"min_share", set_.rounds.min_share}},
           dec.evidence, stage);
      if (!rule_->waiting()) rule_->round().clear();  // (a review goes on with the round kept)
    } else if (dec.kind == K::Grow) {
      grow_round(view, dec, inputs, edits);
    }
  }

  /// An event of the round rule with the step and NUMS.
  /// EVIDENCE, when given, is the `evidence` string: what decided a round at the window's end.
  /// STAGE, when given, says when: `window_end` or `review`.
  static void note(const gf::TrainView& view, const char* type,
                   std::vector<std::pair<std::string, double>> nums,
                   const std::string& evidence = "", const std::string& stage = "") {
    gf::Event e;
    e.type = type;
    e.numbers = {{"step", double(view.step)}};
    for (auto& kv : nums)
      if (std::isfinite(kv.second)) e.numbers.push_back(kv);  // unmeasured: left out, not null
    e.strings = {{"policy", "incrt_geometric"}};
    if (!evidence.empty()) e.strings.push_back({"evidence", evidence});
    if (!stage.empty()) e.strings.push_back({"stage", stage});
    if (view.events) view.events->emit(e);
  }

  /// The `probe` event: what the round rule read of this probe, and the decision's signal.
  void emit_probe(const gf::TrainView& view, const ProbeReading& p, const RoundDecision& dec,
                  const std::string& phase) const {
    const gf::RunMetrics& m = view.metrics;
    gf::Event pe;
    pe.type = "probe";
    pe.numbers = {{"step", double(view.step)},          {"probe_loss", m.probe_loss},
                  {"probe_accuracy", m.probe_accuracy}, {"examples", double(m.probe_examples)},
                  {"train_loss", m.train_loss},         {"train_steps", double(m.train_steps)},
                  {"val_step", double(m.val_step)},     {"val_loss", m.val_loss}};
    for (const auto& kv : rule_->probe_numbers(p)) pe.numbers.push_back(kv);
    pe.numbers.insert(pe.numbers.end(), {{"probe_loss_without_round", p.muted_loss},
                                         {"probe_accuracy_without_round", p.muted_accuracy},
                                         {"round_share", dec.share},
                                         {"round_share_se", dec.share_se},
                                         {"round_t", dec.t}});
    // numbers not measured yet (no validation, no full window) are left out, not written as null
    pe.numbers.erase(std::remove_if(pe.numbers.begin(), pe.numbers.end(),
                                    [](const auto& kv) { return !std::isfinite(kv.second); }),
                     pe.numbers.end());
    pe.strings = {{"policy", "incrt_geometric"},
                  {"phase", phase},
                  {"plot", rule_->plot()}};  // drawn by `growformer report`
    if (std::isfinite(p.muted_loss))
      pe.strings.push_back({"share_from", p.from_twin ? "twin" : "muted"});
    // a probe that decided nothing may still say why (paid_young: paid, the next round waits)
    if (dec.kind == RoundDecision::Kind::None && *dec.evidence)
      pe.strings.push_back({"evidence", dec.evidence});
    if (view.events) view.events->emit(pe);
  }

  /// The last round did not pay: its heads go.
  void take_back(const gf::TrainView& view, const RoundSnapshot& before, const RoundDecision& dec,
                 const std::string& stage, std::vector<gf::Edit>& edits) {
    const RoundHeads& gone = dec.heads.empty() ? before.round : dec.heads;
    for (const auto& [b, id] : gone) {
      gf::Edit e;
      e.kind = gf::Edit::Kind::RemoveHead;
      e.block = b;
      e.head_id = static_cast<int>(id);
      e.cause.type = "prune";
      e.cause.block = static_cast<long>(b);
      e.cause.numbers = {{"step", double(view.step)},
                         {"gain", dec.gain},
                         {"min_gain", set_.rounds.min_gain},
                         {"settled_before", before.prev},
                         {"settled", dec.settled},
                         {"share", std::isfinite(dec.share) ? dec.share : -1.0}};
      e.cause.strings = {{"policy", "incrt_geometric"}, {"reason", "round_rejected"}};
      if (*dec.evidence) e.cause.strings.push_back({"evidence", dec.evidence});
      edits.push_back(std::move(e));
    }
    // the rejected heads are forgotten (a review may have gone on to the round before)
    auto& r = rule_->round();
    for (const auto& h : gone) r.erase(std::remove(r.begin(), r.end(), h), r.end());
    note(view, "round_rejected",
         {{"gain", dec.gain},
          {"min_gain", set_.rounds.min_gain},
          {"settled_before", before.prev},
          {"settled", dec.settled},
          {"heads_removed", double(gone.size())},
          {"round_share", std::isfinite(dec.share) ? dec.share : -1.0},
          {"round_age", double(view.step - before.round_step)},
          {"round_t", std::isfinite(dec.t) ? dec.t : -1.0},
          {"test", set_.rounds.paired ? 1.0 : 0.0},
          {"patience_steps", before.patience},
          {"upper", dec.upper},
          {"trend_t", dec.trend_t}},
         dec.evidence, stage);
  }

  /// Grow: one round over the editable blocks, each sized and aimed by its uncaptured planes.
  void grow_round(const gf::TrainView& view, const RoundDecision& dec,
                  std::map<size_t, RoundInputs>& inputs, std::vector<gf::Edit>& edits) {
    size_t added = 0;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      if (!inputs.count(bv.index) && bv.probe && bv.probe->input.defined()) {
        // energy_stats off: C is measured here, where a round grows
        const ProbeStats ps = ProbeStats::measure(bv, heads, set_.probe);
        inputs[bv.index] = {ps.c, ps.present_motors(), ps.seq_len};
      }
      auto in = inputs.find(bv.index);
      if (in == inputs.end()) continue;
      const size_t cap = std::min(set_.max_heads > 0 ? set_.max_heads : static_cast<size_t>(-1),
                                  bv.block->max_heads());
      const size_t room = cap > heads.size() ? cap - heads.size() : 0;
      const PlaneResidual pr =
          plane_residual(in->second.c, in->second.motors, set_.plane_threshold);
      size_t n = set_.round == Round::One      ? 1
                 : set_.round == Round::Double ? heads.size()
                                               : std::min(pr.planes, heads.size());
      n = pr.vectors.empty() ? 0 : std::min(n, room);
      for (size_t i = 0; i < n; ++i) {
        const size_t v = std::min(2 * i, pr.vectors.size() - 1);
        gf::Edit e;
        e.kind = gf::Edit::Kind::AddHead;
        e.block = bv.index;
        e.init.mode = set_.directed ? "directed" : "random";
        e.init.direction.assign(pr.vectors[v].begin(), pr.vectors[v].end());
        e.init.preserve_function = set_.preserve_function;
        e.init.value_variance =
            geometry_.new_head_variance(heads, in->second.c.n, in->second.seq_len);
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
        e.cause.strings = {
            {"policy", "incrt_geometric"}, {"init", e.init.mode}, {"criterion", rule_->name()}};
        if (*dec.evidence) e.cause.strings.push_back({"evidence", dec.evidence});
        edits.push_back(std::move(e));
      }
      if (n == 0)
        note(view, "no_plane",
             {{"block", double(bv.index)},
              {"planes", double(pr.planes)},
              {"captured_scale", pr.captured_scale},
              {"room", double(room)},
              {"settled", dec.settled}});
      added += n;
    }
    rule_->grown(added, dec.settled, view.step);
    pending_ = added;
  }

  const IncrtSettings& set_;
  const BlockGeometry& geometry_;
  std::unique_ptr<RoundRule> rule_;
  size_t checks_ = 0;   // checks seen (a probe every so many of them)
  size_t pending_ = 0;  // AddHead edits of a round returned and not yet confirmed
};

}  // namespace

std::unique_ptr<Criterion> make_round_criterion(const IncrtSettings& s,
                                                const BlockGeometry& geometry) {
  std::unique_ptr<RoundRule> rule;
  if (s.criterion == CriterionKind::Gain)
    rule = std::make_unique<GainRule>(s.rounds);
  else
    rule = std::make_unique<LearningRule>(s.rounds);
  return std::make_unique<RoundCriterion>(s, geometry, std::move(rule));
}

}  // namespace gf::incrt::policy
