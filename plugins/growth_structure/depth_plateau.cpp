// `depth_plateau`: a depth rule. The validation probe's loss (the first `probe` validation
// examples, at every check) is the signal. When it has not fallen by `min_gain` (relative) for
// `patience` checks, the model has learnt what its depth lets it learn, and one block is
// inserted, computing the identity at insertion (attention output maps and MLP output weights
// zero), by default before the first block: below the trained blocks, which stay on top (on the
// compose family a block inserted there is what answers unseen triples,
// docs/results/structure.md). No plateau counts before the loss has fallen `onset` below its
// first value: a model that has not started to learn is not limited by its depth (on the pair
// family the loss of a model that needs no second block stays at its start for hundreds of
// steps). The rule stops for good when `misses` blocks in a row brought no gain (the loss never
// fell by `min_gain` between a block's insertion and the next plateau: one block alone may not
// show a gain that two or three together bring), at `max_blocks`, and after `until` of the
// budget. Every decision and its evidence is in events.jsonl.
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/registry.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "structure_rules.hpp"

namespace {

constexpr const char* kRule = "depth_plateau";

struct DepthPlateauSettings {
  size_t probe = 512;
  double onset = 0.05;
  double min_gain = 0.01;
  size_t patience = 4;
  size_t misses = 2;
  long index = 0;
  size_t max_blocks = 8;
  double until = 0.5;

  static const gf::OptionTable<DepthPlateauSettings>& table() {
    static const auto t =
        gf::OptionTable<DepthPlateauSettings>()
            .add("probe", &DepthPlateauSettings::probe, "512",
                 "validation examples evaluated at each check (the signal)", 1, 1 << 24)
            .add("onset", &DepthPlateauSettings::onset, "0.05",
                 "no plateau counts before the probe's loss has fallen this fraction below its "
                 "first value (a model that has not started to learn is not limited by depth)",
                 0.0, 1.0)
            .add("min_gain", &DepthPlateauSettings::min_gain, "0.01",
                 "a fall of the probe's loss by this fraction of its best counts as progress", 0.0,
                 1.0)
            .add("patience", &DepthPlateauSettings::patience, "4",
                 "checks without progress that make a plateau", 1, 1 << 20)
            .add("misses", &DepthPlateauSettings::misses, "2",
                 "stop growing after this many blocks in a row brought no gain (no progress "
                 "between a block's insertion and the next plateau); 0 = never",
                 0, 1 << 20)
            .add("index", &DepthPlateauSettings::index, "0",
                 "where a new block goes: its index (0 = before the first block); -1 = after the "
                 "last",
                 -1, 1023)
            .add("max_blocks", &DepthPlateauSettings::max_blocks, "8",
                 "insert no block into a model of this many blocks", 1, 1024)
            .add("until", &DepthPlateauSettings::until, "0.5",
                 "insert no block after this fraction of the run's steps", 0.0, 1.0);
    return t;
  }
};

class DepthPlateau : public gf::GrowthPolicy {
 public:
  explicit DepthPlateau(const DepthPlateauSettings& s) : set_(s) {}

  size_t validation_probe(size_t step) const override {
    (void)step;
    return done_ ? 0 : set_.probe;
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    const double loss = view.metrics.probe_loss;
    if (done_ || !std::isfinite(loss)) return {};
    if (!std::isfinite(first_)) first_ = loss;
    if (!std::isfinite(best_) || loss < best_ * (1.0 - set_.min_gain)) {
      best_ = loss;
      flat_ = 0;
      gained_ = true;
    } else {
      ++flat_;
    }
    if (best_ > first_ * (1.0 - set_.onset)) flat_ = 0;  // not yet learning: no plateau
    if (flat_ < set_.patience) return {};
    const size_t blocks = view.blocks.size();
    if (inserted_ > 0) missed_ = gained_ ? 0 : missed_ + 1;
    if (set_.misses && missed_ >= set_.misses)
      return stop(view, "no gain since the last blocks inserted");
    if (blocks >= set_.max_blocks) return stop(view, "max_blocks");
    if (double(view.step) > set_.until * double(view.total_steps)) return stop(view, "window");
    gf::Edit e;
    e.kind = gf::Edit::Kind::InsertBlock;
    e.block = set_.index < 0 ? blocks : std::min(size_t(set_.index), blocks);
    e.cause.type = "grow";
    e.cause.numbers = {{"probe_loss", loss},
                       {"best_loss", best_},
                       {"checks_without_gain", double(flat_)},
                       {"blocks_without_gain", double(missed_)},
                       {"min_gain", set_.min_gain},
                       {"blocks_before", double(blocks)}};
    e.cause.strings = {{"rule", kRule}, {"evidence", "plateau"}};
    flat_ = 0;
    gained_ = false;
    return {e};
  }

  void edited(const gf::Edit& e, int first, const gf::TrainView& view) override {
    (void)first;
    (void)view;
    if (e.kind == gf::Edit::Kind::InsertBlock && gf::made_by(e, kRule)) ++inserted_;
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    std::map<std::string, double> out = fields().summary(*this);
    out["blocks"] = double(view.blocks.size());
    return out;
  }

  std::vector<std::string> summary_columns() const override { return {"blocks", "stopped_at"}; }

  std::string save_state() const override { return fields().text(kRule, 1, *this); }
  void load_state(const std::string& s) override { fields().read_text(s, kRule, 1, *this); }

 private:
  /// Ends growth for good at VIEW's check for REASON, and says so in events.jsonl.
  std::vector<gf::Edit> stop(const gf::TrainView& view, const char* reason) {
    done_ = true;
    stopped_at_ = double(view.step);
    if (view.events) {
      gf::Event ev;
      ev.type = "check";
      ev.numbers = {{"probe_loss", view.metrics.probe_loss},
                    {"best_loss", best_},
                    {"checks_without_gain", double(flat_)},
                    {"blocks", double(view.blocks.size())}};
      ev.strings = {{"rule", kRule}, {"decision", "stop growing"}, {"evidence", reason}};
      view.events->emit(ev);
    }
    return {};
  }

  static const gf::StateFields<DepthPlateau>& fields() {
    static const auto f = gf::StateFields<DepthPlateau>()
                              .add("first_loss", &DepthPlateau::first_)
                              .add("best_loss", &DepthPlateau::best_)
                              .add("checks_without_gain", &DepthPlateau::flat_)
                              .add("gained", &DepthPlateau::gained_)
                              .add("blocks_without_gain", &DepthPlateau::missed_)
                              .add("done", &DepthPlateau::done_)
                              .add("stopped_at", &DepthPlateau::stopped_at_)
                              .report("stopped_at")
                              .add("blocks_inserted", &DepthPlateau::inserted_)
                              .report("blocks_inserted");
    return f;
  }

  DepthPlateauSettings set_;
  double first_ = std::numeric_limits<double>::quiet_NaN();  // the first check's probe loss
  double best_ = std::numeric_limits<double>::quiet_NaN();   // lowest loss counted as progress
  size_t flat_ = 0;                                          // checks since the last progress
  bool gained_ = false;                                      // progress since the last insertion
  size_t missed_ = 0;  // blocks inserted in a row that brought no gain
  bool done_ = false;  // growth ended for good
  double stopped_at_ = -1;
  size_t inserted_ = 0;  // blocks this rule inserted
};

}  // namespace

void register_depth_plateau(gf::Registry& r) {
  r.add_growth({kRule,
                "insert a block (the identity at insertion; before the first by default) when "
                "the validation probe's loss has stopped falling, until blocks in a row bring "
                "no gain",
                DepthPlateauSettings::table().specs()},
               [](const gf::Options& o) {
                 return std::make_unique<DepthPlateau>(DepthPlateauSettings::table().read(o));
               });
}
