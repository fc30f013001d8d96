// `mlp_schedule`: the ablation baseline of MLP growth. At the given steps it adds K units to
// every block's MLP (input weights as the model initialises fc1, output weights zero, so the
// function is unchanged at the edit), through the structure editor's AddMlpUnits edit.
#include "mlp_schedule.hpp"

#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/registry.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace {

struct MlpScheduleSettings {
  std::vector<int64_t> at;
  size_t units = 16;

  static const gf::OptionTable<MlpScheduleSettings>& table() {
    static const auto t =
        gf::OptionTable<MlpScheduleSettings>()
            .add("at", &MlpScheduleSettings::at, "",
                 "the steps to grow at, increasing (each at the first structure check at or "
                 "after it: train.check_every)")
            .add("units", &MlpScheduleSettings::units, "16",
                 "hidden units added to every block's MLP at each of those steps", 1, 1 << 20);
    return t;
  }
};

class MlpSchedule : public gf::GrowthPolicy {
 public:
  explicit MlpSchedule(const MlpScheduleSettings& s) : at_(s.at), units_(s.units) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    if (next_ >= at_.size() || static_cast<int64_t>(view.step) < at_[next_]) return edits;
    const int64_t due = at_[next_];
    while (next_ < at_.size() && static_cast<int64_t>(view.step) >= at_[next_]) ++next_;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.mlp) continue;  // the trainer edits no MLP here
      gf::Edit e;
      e.kind = gf::Edit::Kind::AddMlpUnits;
      e.block = bv.index;
      e.units = units_;
      e.cause.type = "grow";
      e.cause.numbers = {{"scheduled", static_cast<double>(due)},
                         {"width_before", static_cast<double>(bv.mlp->width())}};
      e.cause.strings = {{"rule", "mlp_schedule"}};
      edits.push_back(std::move(e));
    }
    return edits;
  }

  void edited(const gf::Edit& e, int first, const gf::TrainView& view) override {
    (void)first;
    (void)view;
    if (e.kind == gf::Edit::Kind::AddMlpUnits && gf::made_by(e, "mlp_schedule")) added_ += e.units;
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;
    return fields().summary(*this);
  }

  std::string save_state() const override { return fields().text("mlp_schedule", 1, *this); }

  void load_state(const std::string& s) override {
    fields().read_text(s, "mlp_schedule", 1, *this);
    if (next_ > at_.size())
      throw gf::RuntimeError("mlp_schedule state: " + std::to_string(next_) +
                             " growth steps passed, but `at` names " + std::to_string(at_.size()));
  }

 private:
  static const gf::StateFields<MlpSchedule>& fields() {
    static const auto f = gf::StateFields<MlpSchedule>()
                              .add("next", &MlpSchedule::next_)
                              .add("units_added", &MlpSchedule::added_)
                              .report("units_added");
    return f;
  }

  std::vector<int64_t> at_;
  size_t units_;
  size_t next_ = 0;   // the first step of at_ not yet grown at
  size_t added_ = 0;  // units this policy added, over all blocks
};

MlpScheduleSettings read_settings(const gf::Options& o) {
  MlpScheduleSettings s = MlpScheduleSettings::table().read(o);
  check_schedule_steps(o, s.at, "grow");
  return s;
}

}  // namespace

void check_schedule_steps(const gf::Options& o, const std::vector<int64_t>& at, const char* what) {
  if (at.empty())
    o.fail("at", std::string("name the steps to ") + what + " at, e.g. `at: [100, 200]`");
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] < 1) o.fail("at", "steps start at 1; got " + std::to_string(at[i]));
    if (i && at[i] <= at[i - 1])
      o.fail("at", "the steps must increase; " + std::to_string(at[i]) + " follows " +
                       std::to_string(at[i - 1]));
  }
}

void register_mlp_schedule(gf::Registry& r) {
  r.add_growth(
      {"mlp_schedule",
       "add K hidden units to every block's MLP at the given steps (output weights zero)",
       MlpScheduleSettings::table().specs()},
      [](const gf::Options& o) { return std::make_unique<MlpSchedule>(read_settings(o)); });
}
