// `block_ablation`: the block pruning baseline. A block's use is what leaving it out of the
// validation probe costs: (the probe's loss with the whole block left out - its loss) / its
// loss (an ablation of the whole block, HeadRef::kWholeBlock: the residual stream passes it
// unchanged). Every `every` steps from `from` of the budget on, each block that is not within
// `grace` of the budget of its insertion is left out in turn, and the one of least use is
// removed through the structure editor's RemoveBlock edit when its use is under `min_use`: one
// block a judgment, never below `min_blocks`. Late by design: on the chain_r family a block
// inserted at a plateau lowered the probe's loss when left out for the first 1,000 steps
// (its use -3.3 .. -0.7 %) and then became what solved the task (docs/STRUCTURE.md).
#include "block_ablation.hpp"

#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/registry.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr const char* kRule = "block_ablation";

struct BlockAblationSettings {
  size_t probe = 512;
  double min_use = 0.01;
  double from = 0.5;
  double grace = 0.25;
  size_t every = 250;
  size_t min_blocks = 1;

  static const gf::OptionTable<BlockAblationSettings>& table() {
    static const auto t =
        gf::OptionTable<BlockAblationSettings>()
            .add("probe", &BlockAblationSettings::probe, "512",
                 "validation examples evaluated at each judgment, once per block left out", 1,
                 1 << 24)
            .add("min_use", &BlockAblationSettings::min_use, "0.01",
                 "remove a block whose leaving-out raises the probe's loss by less than this "
                 "fraction",
                 -1e9, 1e9)
            .add("from", &BlockAblationSettings::from, "0.5",
                 "judge no block before this fraction of the run's steps", 0.0, 1.0)
            .add("grace", &BlockAblationSettings::grace, "0.25",
                 "judge no block within this fraction of the run's steps of its insertion", 0.0,
                 1.0)
            .add("every", &BlockAblationSettings::every, "250",
                 "steps between judgments (each a probe per block: about `probe` x blocks "
                 "examples evaluated)",
                 1, 1e12)
            .add("min_blocks", &BlockAblationSettings::min_blocks, "1",
                 "never remove a block from a model of this many blocks", 1, 1 << 20);
    return t;
  }
};

class BlockAblation : public gf::GrowthPolicy {
 public:
  explicit BlockAblation(const BlockAblationSettings& s) : set_(s) {}

  void on_start(const gf::TrainView& view) override {
    total_ = view.total_steps;
    blocks_ = view.blocks.size();
  }

  /// A probe at a judgment, unless the model was at min_blocks when last seen (nothing to judge).
  size_t validation_probe(size_t step) const override {
    return due(step) && (blocks_ == 0 || blocks_ > set_.min_blocks) ? set_.probe : 0;
  }

  /// Each block it may judge at VIEW's step, left out alone.
  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView& view) const override {
    std::vector<std::vector<gf::HeadRef>> sets;
    if (!due(view.step) || view.blocks.size() <= set_.min_blocks) return sets;
    for (size_t b = 0; b < view.blocks.size(); ++b)
      if (judged(b, view)) sets.push_back({{b, gf::HeadRef::kWholeBlock}});
    return sets;
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    total_ = view.total_steps;
    blocks_ = view.blocks.size();
    if (!due(view.step) || blocks_ <= set_.min_blocks) return {};
    const double loss = view.metrics.probe_loss;
    if (!(loss > 0) || !std::isfinite(loss)) return {};
    last_ = view.step;
    double least = std::numeric_limits<double>::infinity();
    size_t which = 0;
    const gf::Ablation* of_least = nullptr;
    for (size_t b = 0; b < view.blocks.size(); ++b) {
      if (!judged(b, view)) continue;
      const gf::Ablation* a = view.metrics.ablation({{b, gf::HeadRef::kWholeBlock}});
      if (!a || !std::isfinite(a->loss)) continue;
      const double use = (a->loss - loss) / loss;
      if (use < least) least = use, which = b, of_least = a;
    }
    if (!of_least || least >= set_.min_use) return {};
    gf::Edit e;
    e.kind = gf::Edit::Kind::RemoveBlock;
    e.block = which;
    e.cause.type = "prune";
    e.cause.numbers = {{"use", least},
                       {"min_use", set_.min_use},
                       {"probe_loss", loss},
                       {"loss_left_out", of_least->loss},
                       {"diff_sd", of_least->diff_sd},
                       {"blocks_before", double(view.blocks.size())}};
    e.cause.strings = {{"rule", kRule}, {"evidence", "ablation"}};
    return {e};
  }

  void edited(const gf::Edit& e, int first, const gf::TrainView& view) override {
    (void)first;
    if (!e.edits_blocks()) return;
    blocks_ = view.blocks.size();  // the view after the edit
    gf::move_blocks(born_, e);
    if (e.kind == gf::Edit::Kind::InsertBlock) born_[e.block] = view.step;
    if (e.kind == gf::Edit::Kind::RemoveBlock && gf::made_by(e, kRule)) ++removed_;
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    std::map<std::string, double> out = fields().summary(*this);
    out["blocks"] = double(view.blocks.size());
    return out;
  }

  std::vector<std::string> summary_columns() const override { return {"blocks", "blocks_removed"}; }

  std::string save_state() const override { return fields().text(kRule, 1, *this); }
  void load_state(const std::string& s) override { fields().read_text(s, kRule, 1, *this); }

 private:
  /// Whether a judgment falls at STEP: the budget known (from the run's start, or the first
  /// check of a policy that joined later), STEP at or past `from` of it, and `every` steps
  /// since the last judgment.
  bool due(size_t step) const {
    if (total_ == 0 || double(step) < set_.from * double(total_)) return false;
    return last_ < 0 || double(step) >= double(last_) + double(set_.every);
  }
  /// Whether block B is out of its grace at VIEW's step.
  bool judged(size_t b, const gf::TrainView& view) const {
    const auto born = born_.find(b);
    return born == born_.end() ||
           double(view.step) >= double(born->second) + set_.grace * double(view.total_steps);
  }

  static const gf::StateFields<BlockAblation>& fields() {
    static const auto f = gf::StateFields<BlockAblation>()
                              .add("total_steps", &BlockAblation::total_)
                              .add("last_judged", &BlockAblation::last_)
                              .add("blocks_seen", &BlockAblation::blocks_)
                              .add("inserted_at", &BlockAblation::born_)
                              .add("blocks_removed", &BlockAblation::removed_)
                              .report("blocks_removed");
    return f;
  }

  BlockAblationSettings set_;
  size_t total_ = 0;               // the run's steps (0: not known yet)
  long last_ = -1;                 // the step of the last judgment
  size_t blocks_ = 0;              // the model's blocks when last seen (0: not yet)
  std::map<size_t, size_t> born_;  // the step each block inserted during the run came in
  size_t removed_ = 0;             // blocks this rule removed
};

}  // namespace

void register_block_ablation(gf::Registry& r) {
  r.add_pruning({kRule,
                 "remove the block whose leaving-out costs the validation probe least, when "
                 "that is under min_use (late in the run, one block a judgment)",
                 BlockAblationSettings::table().specs()},
                [](const gf::Options& o) {
                  return std::make_unique<BlockAblation>(BlockAblationSettings::table().read(o));
                });
}
