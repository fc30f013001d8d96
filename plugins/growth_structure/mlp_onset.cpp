// `mlp_onset`: a width rule for the blocks' MLPs. Units added once the model has fitted what a
// narrow MLP can learn are worth little (docs/results/structure.md: on the pair family 2,032
// units added at step 50 end at 0.968, the same units at step 400 at 0.763), while the training
// losses of narrow and wide MLPs run together until the model starts to learn. So the rule grows
// while the loss has not yet started to fall and stops for good at the learning onset: at each
// check, while the window's mean training loss is within `onset` of the first check's, every
// block's MLP is multiplied in width by `factor` (new units: fc1 drawn as the model draws it,
// output weights zero, so the function is unchanged), up to `max_units`, and only within the
// first `until` of the budget. The evidence of each decision is in events.jsonl.
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

constexpr const char* kRule = "mlp_onset";

struct MlpOnsetSettings {
  double factor = 4.0;
  size_t max_units = 0;
  double onset = 0.05;
  double until = 0.1;

  static const gf::OptionTable<MlpOnsetSettings>& table() {
    static const auto t =
        gf::OptionTable<MlpOnsetSettings>()
            .add("factor", &MlpOnsetSettings::factor, "4",
                 "each growth multiplies every block's MLP width by this (rounded up)", 1.01,
                 1024.0)
            .add("max_units", &MlpOnsetSettings::max_units, "0",
                 "grow no MLP past this many units; 0 = the most the model allows (64 x d_model)",
                 0, 1 << 20)
            .add("onset", &MlpOnsetSettings::onset, "0.05",
                 "growth ends for good once the training loss of a check's window has fallen "
                 "this fraction below the first check's",
                 1e-4, 1.0)
            .add("until", &MlpOnsetSettings::until, "0.1",
                 "no growth after this fraction of the run's steps", 0.0, 1.0);
    return t;
  }
};

class MlpOnset : public gf::GrowthPolicy {
 public:
  explicit MlpOnset(const MlpOnsetSettings& s) : set_(s) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    const double loss = view.metrics.train_loss;
    if (done_ || !std::isfinite(loss)) return {};
    if (!std::isfinite(first_)) first_ = loss;
    const double fall = 1.0 - loss / first_;
    if (fall >= set_.onset) return stop(view, "onset", fall);
    if (double(view.step) > set_.until * double(view.total_steps))
      return stop(view, "window", fall);
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.mlp) continue;  // the trainer edits no MLP here
      const size_t width = bv.mlp->width();
      const size_t target = std::min(cap(*bv.mlp), size_t(std::ceil(double(width) * set_.factor)));
      if (target <= width) continue;
      gf::Edit e;
      e.kind = gf::Edit::Kind::AddMlpUnits;
      e.block = bv.index;
      e.units = target - width;
      e.cause.type = "grow";
      e.cause.numbers = {{"train_loss", loss},
                         {"first_loss", first_},
                         {"fall", fall},
                         {"onset", set_.onset},
                         {"width_before", double(width)}};
      e.cause.strings = {{"rule", kRule}, {"evidence", "the loss has not started to fall"}};
      edits.push_back(std::move(e));
    }
    if (edits.empty()) return stop(view, "cap", fall);
    return edits;
  }

  void edited(const gf::Edit& e, int first, const gf::TrainView& view) override {
    (void)first;
    (void)view;
    if (e.kind == gf::Edit::Kind::AddMlpUnits && gf::made_by(e, kRule)) added_ += e.units;
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    std::map<std::string, double> out = fields().summary(*this);
    size_t widest = 0;
    for (const gf::BlockView& bv : view.blocks)
      if (bv.mlp) widest = std::max(widest, bv.mlp->width());
    out["mlp_width_max"] = double(widest);
    return out;
  }

  std::vector<std::string> summary_columns() const override {
    return {"mlp_width_max", "stopped_at"};
  }

  std::string save_state() const override { return fields().text(kRule, 1, *this); }
  void load_state(const std::string& s) override { fields().read_text(s, kRule, 1, *this); }

 private:
  size_t cap(const gf::Mlp& mlp) const {
    return set_.max_units ? std::min(set_.max_units, mlp.max_width()) : mlp.max_width();
  }

  /// Ends growth for good at VIEW's check, for REASON ("onset", "window", "cap"), and says so.
  std::vector<gf::Edit> stop(const gf::TrainView& view, const char* reason, double fall) {
    done_ = true;
    stopped_at_ = double(view.step);
    if (view.events) {
      gf::Event ev;
      ev.type = "check";
      ev.numbers = {{"train_loss", view.metrics.train_loss},
                    {"first_loss", first_},
                    {"fall", fall},
                    {"units_added", double(added_)}};
      ev.strings = {{"rule", kRule}, {"decision", "stop growing"}, {"evidence", reason}};
      view.events->emit(ev);
    }
    return {};
  }

  static const gf::StateFields<MlpOnset>& fields() {
    static const auto f = gf::StateFields<MlpOnset>()
                              .add("first_loss", &MlpOnset::first_)
                              .add("done", &MlpOnset::done_)
                              .add("stopped_at", &MlpOnset::stopped_at_)
                              .report("stopped_at")
                              .add("units_added", &MlpOnset::added_)
                              .report("units_added");
    return f;
  }

  MlpOnsetSettings set_;
  double first_ = std::numeric_limits<double>::quiet_NaN();  // the first check's training loss
  bool done_ = false;                                        // growth has ended for good
  double stopped_at_ = -1;  // the step growth ended at (-1: not yet)
  size_t added_ = 0;        // units this rule added, over all blocks
};

}  // namespace

void register_mlp_onset(gf::Registry& r) {
  r.add_growth({kRule,
                "widen every block's MLP by a factor at each check until the training loss "
                "starts to fall (output weights zero), early in the budget",
                MlpOnsetSettings::table().specs()},
               [](const gf::Options& o) {
                 return std::make_unique<MlpOnset>(MlpOnsetSettings::table().read(o));
               });
}
