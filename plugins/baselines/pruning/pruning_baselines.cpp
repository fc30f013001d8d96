// Baseline pruning rules for INCRT ablations:
//  `magnitude`: remove a head whose output map W_O has a small Frobenius norm;
//  `head_importance`: Michel et al. 2019, accumulated |d loss / d mask_h|;
//  `ablation`: remove a head whose removal costs the validation probe almost nothing;
//  `mlp_magnitude` (mlp_magnitude.cpp): remove MLP units of small weight norms;
//  `block_ablation` (block_ablation.cpp): remove a block whose leaving-out costs the probe little.
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/fields.hpp>

#include "block_ablation.hpp"
#include "mlp_magnitude.hpp"

namespace {

/// A scored head: lower scores are pruned first.
struct Scored {
  size_t index;
  int id;
  double score;
  size_t age;
};

/// Turns the candidates of one block into RemoveHead edits (lowest first).
void emit_prunes(const gf::TrainView& view, const gf::BlockView& bv, std::vector<Scored> cand,
                 size_t heads, size_t min_heads, size_t max_n, const std::string& policy,
                 double threshold, std::vector<gf::Edit>& edits) {
  std::sort(cand.begin(), cand.end(), [](const Scored& a, const Scored& b) {
    return a.score < b.score || (a.score == b.score && a.id < b.id);
  });
  size_t remaining = heads, n = 0;
  for (const Scored& c : cand) {
    if (n >= max_n || remaining <= min_heads) break;
    gf::Edit e;
    e.kind = gf::Edit::Kind::RemoveHead;
    e.block = bv.index;
    e.head_id = c.id;
    e.cause.type = "prune";
    e.cause.block = long(bv.index);
    e.cause.head = c.id;
    e.cause.numbers = {{"step", double(view.step)},
                       {"score", c.score},
                       {"threshold", threshold},
                       {"age", double(c.age)},
                       {"heads_before", double(remaining)}};
    e.cause.strings = {{"policy", policy}};
    edits.push_back(std::move(e));
    --remaining;
    ++n;
  }
}

/// The options every pruning baseline has (GRACE: the default of `grace`).
struct PruneCommon {
  size_t grace = 100, min_heads = 1, max_per_check = 1;

  static gf::OptionTable<PruneCommon> table(const std::string& grace) {
    return gf::OptionTable<PruneCommon>()
        .add("grace", &PruneCommon::grace, grace,
             "steps after a head's birth before it can be pruned", 0, 1e12)
        .add("min_heads", &PruneCommon::min_heads, "1",
             "never prune a block below this many heads (a block keeps one at least)", 1, 1e6)
        .add("max_per_check", &PruneCommon::max_per_check, "1",
             "heads removed per block and check at most", 1, 1e6);
  }
};

size_t age_of(const gf::TrainView& v, const gf::HeadInfo& h) {
  return v.step >= h.born_step ? v.step - h.born_step : 0;
}

struct MagnitudeSettings {
  PruneCommon common;
  double threshold = 0.01;
  bool relative = false;

  static const gf::OptionTable<MagnitudeSettings>& table() {
    static const auto t = gf::OptionTable<MagnitudeSettings>()
                              .include(PruneCommon::table("100"), &MagnitudeSettings::common)
                              .add("threshold", &MagnitudeSettings::threshold, "0.01",
                                   "prune when ||W_O||_F is under this", 0.0)
                              .add("relative", &MagnitudeSettings::relative, "false",
                                   "compare ||W_O||_F / max over the block's heads instead");
    return t;
  }
};

class Magnitude : public gf::GrowthPolicy {
 public:
  explicit Magnitude(const MagnitudeSettings& s)
      : threshold_(s.threshold),
        relative_(s.relative),
        grace_(s.common.grace),
        min_heads_(s.common.min_heads),
        max_per_check_(s.common.max_per_check) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      std::vector<double> norms;
      double top = 0.0;
      for (const gf::HeadInfo& h : heads) {
        double s = 0.0;
        if (h.w_o && h.w_o->defined()) {
          const gf::Tensor& w = h.w_o->value();
          for (size_t i = 0; i < w.size(); ++i) s += double(w[i]) * w[i];
        }
        norms.push_back(std::sqrt(s));
        top = std::max(top, norms.back());
      }
      std::vector<Scored> cand;
      std::vector<double> scores, ids;
      for (size_t i = 0; i < heads.size(); ++i) {
        const double score = relative_ ? (top > 0 ? norms[i] / top : 0.0) : norms[i];
        scores.push_back(score);
        ids.push_back(heads[i].id);
        if (age_of(view, heads[i]) >= grace_ && score < threshold_)
          cand.push_back({i, heads[i].id, score, age_of(view, heads[i])});
      }
      if (view.events) {
        gf::Event ev;
        ev.type = "check";
        ev.block = long(bv.index);
        ev.numbers = {{"step", double(view.step)},
                      {"threshold", threshold_},
                      {"heads", double(heads.size())}};
        ev.strings = {{"policy", "magnitude"}};
        ev.lists = {{"head_ids", ids}, {"w_o_norm", scores}};
        view.events->emit(ev);
      }
      emit_prunes(view, bv, cand, heads.size(), min_heads_, max_per_check_, "magnitude", threshold_,
                  edits);
    }
    return edits;
  }

 private:
  double threshold_;
  bool relative_;
  size_t grace_, min_heads_, max_per_check_;
};

struct ImportanceSettings {
  PruneCommon common;
  bool mode_fraction = false;
  double threshold = 0.05, fraction = 0.1;
  bool normalize = true, reset_after_check = true;

  static const gf::OptionTable<ImportanceSettings>& table() {
    using S = ImportanceSettings;
    static const auto t =
        gf::OptionTable<S>()
            .include(PruneCommon::table("100"), &S::common)
            .choice("mode", &S::mode_fraction, "threshold",
                    "threshold: prune heads under `threshold`; fraction: the lowest `fraction`",
                    {{"threshold", false}, {"fraction", true}})
            .add("threshold", &S::threshold, "0.05", "importance threshold (mode: threshold)", 0.0)
            .add("fraction", &S::fraction, "0.1", "share of heads pruned per check (fraction)", 0.0,
                 1.0)
            .add("normalize", &S::normalize, "true",
                 "divide importances by their L2 norm per block")
            .add("reset_after_check", &S::reset_after_check, "true",
                 "restart the accumulation after every check");
    return t;
  }
};

class HeadImportance : public gf::GrowthPolicy {
 public:
  explicit HeadImportance(const ImportanceSettings& s)
      : mode_fraction_(s.mode_fraction),
        threshold_(s.threshold),
        fraction_(s.fraction),
        normalize_(s.normalize),
        grace_(s.common.grace),
        min_heads_(s.common.min_heads),
        max_per_check_(s.common.max_per_check),
        reset_(s.reset_after_check) {}

  bool needs_head_mask_grads() const override { return true; }

  void on_start(const gf::TrainView& view) override {
    for (const gf::BlockView& bv : view.blocks)
      if (bv.block) bv.block->set_head_masks(true);
  }

  void after_backward(const gf::TrainView& view) override {
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block) continue;
      Acc& acc = acc_[bv.index];
      for (const gf::HeadInfo& h : bv.block->heads())
        acc.sum[h.id] += std::fabs(bv.block->head_mask_grad(h.id));
      acc.count += 1;
    }
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    (void)view;
    if (e.edits_blocks()) gf::move_blocks(acc_, e);  // the sums move with their blocks
    if (!e.edits_heads()) return;                    // an MLP or block edit: no head came or went
    Acc& acc = acc_[e.block];
    if (e.kind == gf::Edit::Kind::RemoveHead)
      acc.sum.erase(e.head_id);
    else
      acc.sum[new_head_id] = 0.0;
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      Acc& acc = acc_[bv.index];
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      std::vector<double> imp(heads.size(), 0.0), ids;
      double l2 = 0.0;
      for (size_t i = 0; i < heads.size(); ++i) {
        imp[i] = acc.count ? acc.sum[heads[i].id] / double(acc.count) : 0.0;
        l2 += imp[i] * imp[i];
        ids.push_back(heads[i].id);
      }
      l2 = std::sqrt(l2);
      // Michel et al. normalise importance by its L2 norm within a layer.
      if (normalize_ && l2 > 0)
        for (double& v : imp) v /= l2;
      std::vector<Scored> eligible;
      for (size_t i = 0; i < heads.size(); ++i)
        if (age_of(view, heads[i]) >= grace_)
          eligible.push_back({i, heads[i].id, imp[i], age_of(view, heads[i])});
      std::vector<Scored> cand;
      size_t max_n = max_per_check_;
      if (acc.count > 0) {
        if (mode_fraction_) {
          const size_t k = fraction_ > 0
                               ? std::max<size_t>(1, size_t(std::lround(fraction_ * heads.size())))
                               : 0;
          cand = eligible;
          max_n = std::min(max_n, k);
        } else {
          for (const Scored& s : eligible)
            if (s.score < threshold_) cand.push_back(s);
        }
      }
      if (view.events) {
        gf::Event ev;
        ev.type = "check";
        ev.block = long(bv.index);
        ev.numbers = {{"step", double(view.step)},
                      {"threshold", threshold_},
                      {"backwards", double(acc.count)},
                      {"heads", double(heads.size())}};
        ev.strings = {{"policy", "head_importance"}};
        ev.lists = {{"head_ids", ids}, {"importance", imp}};
        view.events->emit(ev);
      }
      emit_prunes(view, bv, cand, heads.size(), min_heads_, max_n, "head_importance",
                  mode_fraction_ ? fraction_ : threshold_, edits);
      if (reset_) {
        acc.sum.clear();
        acc.count = 0;
      }
    }
    return edits;
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "head_importance 1 ";
    gf::fields_detail::write(os, acc_);
    os << "end";
    return os.str();
  }

  void load_state(const std::string& text) override {
    auto opened = gf::state::Reader::open(text, "head_importance", "1");
    if (!opened) return;
    gf::fields_detail::read(*opened, acc_);
    opened->expect("end");
  }

 private:
  struct Acc {
    std::map<int, double> sum;
    size_t count = 0;
    static const gf::StateFields<Acc>& state_fields() {
      static const auto f = gf::StateFields<Acc>().add("count", &Acc::count).add("sum", &Acc::sum);
      return f;
    }
  };
  bool mode_fraction_;
  double threshold_, fraction_;
  bool normalize_;
  size_t grace_, min_heads_, max_per_check_;
  bool reset_;
  std::map<size_t, Acc> acc_;
};

/// `ablation`: every probe_every checks the validation probe is evaluated once more per head
/// past its grace, with that head muted; its cost is (L_muted - L) / max(L, loss_floor). A head
/// under max_cost at `patience` probes in a row is removed, the cheapest first. Unlike
/// |d loss / d mask| this is the loss without the head, not its first-order estimate, and it is
/// measured on held-out examples.
struct AblationSettings {
  PruneCommon common;
  size_t probe_examples = 128, probe_every = 10;
  double max_cost = 0.02, loss_floor = 0.05;
  size_t patience = 2;

  static const gf::OptionTable<AblationSettings>& table() {
    using S = AblationSettings;
    static const auto t =
        gf::OptionTable<S>()
            .include(PruneCommon::table("300"), &S::common)
            .add("probe_examples", &S::probe_examples, "128", "validation examples per probe", 1,
                 1e7)
            .add("probe_every", &S::probe_every, "10",
                 "a probe every N checks (each probe evaluates the examples once per head past its "
                 "grace)",
                 1, 1e6)
            .add("max_cost", &S::max_cost, "0.02",
                 "prune a head whose removal raises the probe loss by less than this fraction")
            .add("loss_floor", &S::loss_floor, "0.05",
                 "the cost's denominator is max(probe loss, loss_floor): near-zero losses do not "
                 "magnify "
                 "float noise",
                 1e-12)
            .add("patience", &S::patience, "2",
                 "probes in a row under max_cost before a head is pruned", 1, 1e6);
    return t;
  }
};

class AblationRule : public gf::GrowthPolicy {
 public:
  explicit AblationRule(const AblationSettings& s)
      : probe_examples_(s.probe_examples),
        probe_every_(std::max<size_t>(1, s.probe_every)),
        max_cost_(s.max_cost),
        loss_floor_(s.loss_floor),
        patience_(std::max<size_t>(1, s.patience)),
        grace_(s.common.grace),
        min_heads_(s.common.min_heads),
        max_per_check_(s.common.max_per_check) {}

  size_t validation_probe(size_t step) const override {
    (void)step;
    return probing() ? probe_examples_ : 0;
  }

  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView& view) const override {
    std::vector<std::vector<gf::HeadRef>> out;
    if (!probing()) return out;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      if (heads.size() <= min_heads_) continue;
      for (const gf::HeadInfo& h : heads)
        if (age_of(view, h) >= grace_) out.push_back({{bv.index, h.id}});
    }
    return out;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    (void)new_head_id;
    (void)view;
    if (e.edits_blocks()) {  // the counts move with their blocks
      std::map<std::pair<size_t, int>, size_t> moved;
      for (const auto& [at, n] : low_)
        if (std::optional<size_t> to = gf::block_after(e, at.first)) moved[{*to, at.second}] = n;
      low_.swap(moved);
    }
    if (e.kind == gf::Edit::Kind::RemoveHead) low_.erase({e.block, e.head_id});
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    const gf::RunMetrics& m = view.metrics;
    const bool measured = probing() && m.probe_examples > 0 && std::isfinite(m.probe_loss);
    checks_ += 1;
    if (!measured) return edits;
    const double denom = std::max(m.probe_loss, loss_floor_);
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      const std::vector<gf::HeadInfo> heads = bv.block->heads();
      std::vector<Scored> cand;
      std::vector<double> ids, costs, counts, spreads;
      for (size_t i = 0; i < heads.size(); ++i) {
        // a head in its grace is not judged, even when another policy had it ablated
        if (age_of(view, heads[i]) < grace_ || heads.size() <= min_heads_) continue;
        const gf::Ablation* a = m.ablation({{bv.index, heads[i].id}});
        if (!a || !std::isfinite(a->loss)) continue;
        const double cost = (a->loss - m.probe_loss) / denom;
        size_t& low = low_[{bv.index, heads[i].id}];
        low = cost < max_cost_ ? low + 1 : 0;
        ids.push_back(heads[i].id);
        costs.push_back(cost);
        counts.push_back(double(low));
        // the paired spread of the cost over the probe's examples (its noise), on the same scale
        spreads.push_back(std::isfinite(a->diff_sd) ? a->diff_sd / denom : -1.0);
        if (low >= patience_) cand.push_back({i, heads[i].id, cost, age_of(view, heads[i])});
      }
      if (view.events && !ids.empty()) {
        gf::Event ev;
        ev.type = "check";
        ev.block = long(bv.index);
        ev.numbers = {{"step", double(view.step)},
                      {"max_cost", max_cost_},
                      {"probe_loss", m.probe_loss},
                      {"probe_accuracy", m.probe_accuracy},
                      {"examples", double(m.probe_examples)},
                      {"heads", double(heads.size())}};
        ev.strings = {{"policy", "ablation"}};
        ev.lists = {
            {"head_ids", ids}, {"cost", costs}, {"cost_sd", spreads}, {"checks_under", counts}};
        view.events->emit(ev);
      }
      const size_t before = edits.size();
      emit_prunes(view, bv, cand, heads.size(), min_heads_, max_per_check_, "ablation", max_cost_,
                  edits);
      for (size_t k = before; k < edits.size(); ++k) {
        edits[k].cause.numbers.push_back({"probe_loss", m.probe_loss});
        edits[k].cause.strings.push_back({"reason", "removal_costs_under_max_cost"});
      }
    }
    return edits;
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "ablation 1 ";
    fields().save(os, *this);
    os << "end";
    return os.str();
  }

  void load_state(const std::string& text) override {
    auto opened = gf::state::Reader::open(text, "ablation", "1");
    if (!opened) return;
    fields().load(*opened, *this);
    opened->expect("end");
  }

 private:
  bool probing() const { return checks_ % probe_every_ == 0; }

  size_t probe_examples_, probe_every_;
  double max_cost_, loss_floor_;
  size_t patience_, grace_, min_heads_, max_per_check_;
  size_t checks_ = 0;                             // checks seen
  std::map<std::pair<size_t, int>, size_t> low_;  // probes in a row under max_cost, per head

  static const gf::StateFields<AblationRule>& fields() {
    static const auto f = gf::StateFields<AblationRule>()
                              .add("checks", &AblationRule::checks_)
                              .add("low", &AblationRule::low_);
    return f;
  }
};

void register_rules(gf::Registry& r) {
  r.add_pruning({"magnitude", "prune heads whose output map W_O has a small Frobenius norm",
                 MagnitudeSettings::table().specs()},
                [](const gf::Options& o) {
                  return std::make_unique<Magnitude>(MagnitudeSettings::table().read(o));
                });
  r.add_pruning({"head_importance",
                 "Michel et al. 2019: prune heads with small accumulated |d loss / d head mask|",
                 ImportanceSettings::table().specs()},
                [](const gf::Options& o) {
                  return std::make_unique<HeadImportance>(ImportanceSettings::table().read(o));
                });
  r.add_pruning(
      {"ablation", "prune heads whose removal costs the validation probe less than max_cost",
       AblationSettings::table().specs()},
      [](const gf::Options& o) {
        return std::make_unique<AblationRule>(AblationSettings::table().read(o));
      });
  register_mlp_magnitude(r);
  register_block_ablation(r);
}

}  // namespace

GROWFORMER_PLUGIN("pruning_baselines", "0.1.0", register_rules)
