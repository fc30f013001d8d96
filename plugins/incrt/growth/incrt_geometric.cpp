// INCRT growth policy (`incrt_geometric`; docs/INCRT.md, spec/INCRT.md): heads grown where the
// residual directional energy A_res = P_perp sym(C M_a) P_perp shows structure no head carries.
// Where each decision is made:
// - whether and when to grow: the criterion (criterion.hpp), one of three strategies:
//   `learning` (the default) and `gain` decide on the validation probe in rounds
//   (round_criterion.cpp; the rules themselves in <growformer/incrt/learning_rounds.hpp> and
//   <growformer/incrt/gain_rounds.hpp>), `energy` on each block's energy at each check
//   (energy_criterion.cpp);
// - where a new head points: the block's geometry (block_geometry.cpp: C, the spectrum and the
//   trackers; a round aims at the planes no head carries, <growformer/incrt/rounds.hpp>);
// - this file: the check over the blocks, the heads' birth directions Q after each edit, the
//   summary and the policy state's text (versions 2 to 13).
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "block_geometry.hpp"
#include "criterion.hpp"
#include "policy.hpp"

namespace gf::incrt::policy {

std::unique_ptr<Criterion> make_criterion(const IncrtSettings& s, const BlockGeometry& geometry) {
  if (s.criterion == CriterionKind::Energy) return make_energy_criterion(s, geometry);
  return make_round_criterion(s, geometry);
}

std::string read_state_word(gf::state::Reader& r, int version) {
  if (version >= 9) return r.word();
  r.expect("gain");  // before version 9 the gain rule's state, written whatever the criterion
  return "gain";
}

void refuse_other_criterion(const std::string& saved, const std::string& mine) {
  if (saved == mine) return;
  auto named = [](const std::string& w) { return w == "none" ? std::string("energy") : w; };
  throw gf::RuntimeError("incrt_geometric: the policy state was saved by criterion " +
                         named(saved) + ", the config says criterion " + named(mine) +
                         ": resume with --set growth.criterion=" + named(saved));
}

namespace {

class IncrtGeometric : public gf::GrowthPolicy {
 public:
  explicit IncrtGeometric(const gf::Options& o)
      : set_(IncrtSettings::table().read(o)), geometry_(set_) {
    if (set_.thresholds == Thresholds::Absolute && !o.is_set("theta_w"))
      o.fail("theta_w", "thresholds: absolute needs an explicit theta_w");
    // probe_examples unset: 256 for the learning rule (its probe interval keeps the cost at 15 %
    // of training), 512 for the gain rule (the paired test's power at a plateau)
    const bool gain = set_.criterion == CriterionKind::Gain;
    if (set_.rounds.probe_examples == 0) set_.rounds.probe_examples = gain ? 512 : 256;
    // z unset: 1 for learning (the last look decides keep or take back: a round whose heads carry
    // min_share of the loss at one standard error is kept), 2 for gain
    set_.rounds.z = std::isfinite(set_.z) ? set_.z : gain ? 2.0 : 1.0;
    // round_mute_every unset: 0 for learning (a round on trial trains in full; docs/INCRT.md,
    // "Why a round on trial trains in full"), 2 for gain (its paired test at a plateau)
    if (std::isfinite(set_.mute_every) && set_.mute_every != std::floor(set_.mute_every))
      o.fail("round_mute_every", "must be a whole number of steps");
    set_.rounds.mute_every = std::isfinite(set_.mute_every) ? size_t(set_.mute_every)
                             : gain                         ? 2
                                                            : 0;
    if (set_.rounds.twin && set_.criterion != CriterionKind::Learning)
      o.fail("share_from", "twin is read by criterion learning only");
    if (set_.energy_stats == EnergyStats::Off && set_.criterion != CriterionKind::Learning)
      o.fail("energy_stats", std::string("criterion ") + (gain ? "gain" : "energy") +
                                 " decides on the energy statistics: they cannot be off");
    stats_ = set_.energy_stats == EnergyStats::On || set_.criterion != CriterionKind::Learning;
    criterion_ = make_criterion(set_, geometry_);
  }
  IncrtGeometric(const IncrtGeometric&) = delete;  // the criterion holds references to set_
  IncrtGeometric& operator=(const IncrtGeometric&) = delete;

  bool needs_probe() const override { return true; }

  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView& view) const override {
    (void)view;
    return criterion_->probe_ablations();
  }

  std::vector<gf::HeadRef> muted_in_training(size_t step) const override {
    return criterion_->muted_in_training(step);
  }
  ExampleMute muted_on_examples(size_t step) const override {
    return criterion_->muted_on_examples(step);
  }

  bool on_trial(size_t step) const override {
    (void)step;
    return criterion_->on_trial();
  }

  std::vector<gf::HeadRef> twin_without(size_t step) const override {
    (void)step;
    return criterion_->twin_without();
  }

  size_t validation_probe(size_t step) const override {
    (void)step;
    return criterion_->validation_probe();
  }

  void on_start(const gf::TrainView& view) override {
    if (!seeded_) {
      const uint64_t seed = view.rng ? view.rng->next_u64() : 0x1ec27ULL;
      rng_ = gf::Rng(seed, "incrt_geometric");
      seeded_ = true;
    }
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    if (!seeded_) on_start(view);
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      if ((!bv.probe || !bv.probe->input.defined()) && inserted_.contains(bv.index, view.step))
        continue;  // inserted at this check: probed from the next one on
      if (!bv.probe || !bv.probe->input.defined())
        throw gf::RuntimeError("incrt_geometric: the trainer gave no probe for block " +
                               std::to_string(bv.index) + " (needs_probe() is true)");
      check_block(view, bv, blocks_[bv.index], edits);
    }
    criterion_->checked(view, blocks_, round_inputs_, edits);
    return edits;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    inserted_.note(e, view.step);
    if (e.edits_blocks()) {  // another policy's block edit: the states move with their blocks
      gf::move_blocks(blocks_, e);
      gf::move_blocks(round_inputs_, e);
      criterion_->blocks_moved(e);
      return;
    }
    if (!e.edits_heads()) return;  // another policy's MLP edit: no head came or went
    auto it = blocks_.find(e.block);
    if (it == blocks_.end()) return;
    BlockState& st = it->second;
    if (e.kind == gf::Edit::Kind::AddHead && criterion_->round_head_added(e, new_head_id)) {
      st.grown += 1;
      return;
    }
    if (e.kind == gf::Edit::Kind::AddHead) {
      if (st.pending) born(st, new_head_id);  // else someone else's growth edit
      return;
    }
    criterion_->head_removed(e);
    if (!e.release_direction.value_or(set_.release_direction)) return;
    for (size_t i = 0; i < st.q_owner.size();)
      if (st.q_owner[i] == e.head_id) {
        st.q.erase(st.q.begin() + static_cast<long>(i));
        st.q_owner.erase(st.q_owner.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
  }

  std::vector<std::string> summary_columns() const override {
    if (!stats_) return {"K_obs"};  // K_pred reads the spectrum at the end of calibration
    return {"K_obs", "K_pred"};
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    std::map<std::string, double> out;
    double k_pred_total = 0.0, k_obs_total = 0.0, w_total = 0.0;
    bool first = true;
    for (const auto& kv : blocks_) {
      const BlockState& st = kv.second;
      size_t heads = 0;  // K_obs: the block's heads as the run ends, read from the model
      for (const gf::BlockView& bv : view.blocks)
        if (bv.index == kv.first && bv.block) heads = bv.block->num_heads();
      std::map<std::string, double> b = geometry_.summary(st, heads);
      k_pred_total += b["K_pred"];
      k_obs_total += b["K_obs"];
      w_total += b["W_t"];
      if (first) {
        out = b;  // the first block's quantities unprefixed
        first = false;
      }
      if (blocks_.size() > 1)
        for (const auto& q : b) out["block" + std::to_string(kv.first) + "." + q.first] = q.second;
    }
    criterion_->summarize(out);
    if (blocks_.size() > 1) {
      out["K_pred"] = k_pred_total;
      out["K_obs"] = k_obs_total;
      out["ratio"] = k_pred_total > 0 ? k_obs_total / k_pred_total : 0.0;
      out["W_t"] = w_total;
    }
    return out;
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "incrt_geometric 13 " << (seeded_ ? 1 : 0) << ' ' << rng_.state() << ' '
       << rng_.increment() << ' ' << blocks_.size() << ' ';
    for (const auto& [index, st] : blocks_) {
      os << "block " << index << ' ';
      BlockState::state_fields().save(os, st);
    }
    criterion_->save(os);
    os << "end";
    return os.str();
  }

  /// Versions 2 to 9 load: 2 (before growth patience) without the over-threshold counter (0);
  /// 3 (before growth in rounds) without round state; 4 (before the round patience) without
  /// the learning onset; 5 (before growth_until counted from a reopening) as never reopened;
  /// 6 (before the round's shares) with none measured; 7 (before the paired test) without the
  /// shares' standard errors; 4 to 8 hold the gain rule's state whatever the criterion (9: the
  /// criterion's own, named: `gain`, `learning`, or `none` for energy); 10 adds the learning
  /// rule's share trend and its count of rounds kept unpaid (9: none); before 11 each block's
  /// head count (since read from the model: the summary's K_obs) is read and dropped; 12 adds
  /// the learning rule's past rounds and review (11: none remembered, no review under way); 13
  /// its plateau rounds (12: none).
  void load_state(const std::string& text) override {
    auto opened = gf::state::Reader::open(text, "incrt_geometric", 2, 13, "incrt");
    if (!opened) return;
    gf::state::Reader& r = *opened;
    const int version = r.version();
    seeded_ = r.u64() != 0;
    gf::fields_detail::read(r, rng_);
    const size_t nb = r.count();
    blocks_.clear();
    for (size_t b = 0; b < nb; ++b) {
      r.expect("block");
      BlockState::state_fields().load(r, blocks_[r.u64()], version);
    }
    criterion_ = make_criterion(set_, geometry_);  // a fresh one (before version 4: no state)
    if (version >= 4) criterion_->load(r, version);
    r.expect("end");
  }

 private:
  /// One block's check: its geometry (unless energy_stats is off), then the criterion's
  /// decision for the block.
  void check_block(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                   std::vector<gf::Edit>& edits) {
    st.pending = false;  // an edit returned by the last check that was not applied
    round_inputs_.erase(bv.index);
    if (!stats_) {  // the learning rule: C is measured where a round grows
      geometry_.forget_dead_heads(st, bv.block->heads());
      criterion_->block_checked(view, bv, st, nullptr, edits);
      return;
    }
    const BlockGeometry::Check c = geometry_.measure(view, bv, st, rng_);
    if (set_.criterion != CriterionKind::Energy)
      round_inputs_[bv.index] = {c.ps.c, c.ps.present_motors(), c.ps.seq_len};
    criterion_->block_checked(view, bv, st, &c, edits);
  }

  /// The energy rule's head NEW_HEAD_ID was added: its directions join Q, and the trackers
  /// restart in the new complement.
  void born(BlockState& st, int new_head_id) {
    st.pending = false;
    const size_t d = st.tracker.up.size();
    for (const Vec* dir : {&st.pending_dir, &st.pending_dir2}) {
      Vec u = *dir;
      if (u.size() != d) continue;
      orthogonalize(u, st.q);
      if (normalize(u) && st.q.size() < d) {
        st.q.push_back(u);
        st.q_owner.push_back(new_head_id);
      }
    }
    st.grown += 1;
    if (stats_) st.tracker.reset(d, rng_, st.q);
  }

  IncrtSettings set_;
  BlockGeometry geometry_;
  std::unique_ptr<Criterion> criterion_;
  std::map<size_t, RoundInputs> round_inputs_;  // what a round reads of this check, per block
  bool stats_ = true;  // checks measure the energy statistics (energy_stats)
  bool seeded_ = false;
  gf::Rng rng_;
  Blocks blocks_;
  gf::InsertedBlocks inserted_;  // blocks inserted at this check (no probe yet)
};

void register_incrt(gf::Registry& r) {
  r.add_growth({"incrt_geometric",
                "INCRT: grow a head at the largest uncaptured directional energy of A_res",
                IncrtSettings::table().specs()},
               [](const gf::Options& o) { return std::make_unique<IncrtGeometric>(o); });
}

}  // namespace
}  // namespace gf::incrt::policy

GROWFORMER_PLUGIN("growth_incrt", "0.1.0", gf::incrt::policy::register_incrt)
