// `depth_schedule`: the ablation baseline of depth growth. At the given steps it inserts one
// block at a given index (the model's block kind and starting structure, its attention output
// maps and MLP output weights zero, so the function is unchanged at the edit), through the
// structure editor's InsertBlock edit, up to a number of blocks.
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/registry.hpp>

#include <memory>
#include <string>
#include <vector>

#include "mlp_schedule.hpp"

namespace {

struct DepthScheduleSettings {
  std::vector<int64_t> at;
  long index = -1;
  size_t max_blocks = 8;

  static const gf::OptionTable<DepthScheduleSettings>& table() {
    static const auto t =
        gf::OptionTable<DepthScheduleSettings>()
            .add("at", &DepthScheduleSettings::at, "",
                 "the steps to insert a block at, increasing (each at the first structure check "
                 "at or after it: train.check_every)")
            .add("index", &DepthScheduleSettings::index, "-1",
                 "where the new block goes: its index (0 = before the first block); -1 = after "
                 "the last",
                 -1, 1023)
            .add("max_blocks", &DepthScheduleSettings::max_blocks, "8",
                 "insert no block into a model of this many blocks", 1, 1024);
    return t;
  }
};

class DepthSchedule : public gf::GrowthPolicy {
 public:
  explicit DepthSchedule(const DepthScheduleSettings& s) : set_(s) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    if (next_ >= set_.at.size() || static_cast<int64_t>(view.step) < set_.at[next_]) return edits;
    const int64_t due = set_.at[next_];
    while (next_ < set_.at.size() && static_cast<int64_t>(view.step) >= set_.at[next_]) ++next_;
    const size_t blocks = view.blocks.size();
    if (blocks >= set_.max_blocks) return edits;  // as deep as this policy grows
    gf::Edit e;
    e.kind = gf::Edit::Kind::InsertBlock;
    e.block = set_.index < 0 ? blocks : static_cast<size_t>(set_.index);
    e.cause.type = "grow";
    e.cause.numbers = {{"scheduled", static_cast<double>(due)},
                       {"blocks_before", static_cast<double>(blocks)}};
    e.cause.strings = {{"rule", "depth_schedule"}};
    edits.push_back(std::move(e));
    return edits;
  }

  void edited(const gf::Edit& e, int first, const gf::TrainView& view) override {
    (void)first;
    (void)view;
    if (e.kind == gf::Edit::Kind::InsertBlock && gf::made_by(e, "depth_schedule")) inserted_ += 1;
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;
    return fields().summary(*this);
  }

  std::string save_state() const override { return fields().text("depth_schedule", 1, *this); }

  void load_state(const std::string& s) override {
    fields().read_text(s, "depth_schedule", 1, *this);
    if (next_ > set_.at.size())
      throw gf::RuntimeError("depth_schedule state: " + std::to_string(next_) +
                             " growth steps passed, but `at` names " +
                             std::to_string(set_.at.size()));
  }

 private:
  static const gf::StateFields<DepthSchedule>& fields() {
    static const auto f = gf::StateFields<DepthSchedule>()
                              .add("next", &DepthSchedule::next_)
                              .add("blocks_inserted", &DepthSchedule::inserted_)
                              .report("blocks_inserted");
    return f;
  }

  DepthScheduleSettings set_;
  size_t next_ = 0;      // the first step of `at` not yet grown at
  size_t inserted_ = 0;  // blocks this policy inserted
};

DepthScheduleSettings read_settings(const gf::Options& o) {
  DepthScheduleSettings s = DepthScheduleSettings::table().read(o);
  check_schedule_steps(o, s.at, "insert a block");
  return s;
}

}  // namespace

void register_depth_schedule(gf::Registry& r) {
  r.add_growth(
      {"depth_schedule",
       "insert a block (computing the identity at insertion) at a given index at the "
       "given steps",
       DepthScheduleSettings::table().specs()},
      [](const gf::Options& o) { return std::make_unique<DepthSchedule>(read_settings(o)); });
}
