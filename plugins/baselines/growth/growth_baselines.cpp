// Baseline growth policies for INCRT ablations: `fixed_schedule` (one head every
// N steps up to K) and `random` (one head with probability p per check); `mlp_schedule` (MLP
// units at given steps) is in mlp_schedule.cpp, `depth_schedule` (blocks at given steps) in
// depth_schedule.cpp.
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/fields.hpp>

#include "mlp_schedule.hpp"

namespace {

/// The options every baseline has: how new heads start and the cap.
struct BaselineSettings {
  size_t max_heads = 8;
  double value_variance = -1.0;  // unset: the head's default
  bool preserve_function = true;

  static const gf::OptionTable<BaselineSettings>& table() {
    static const auto t = gf::OptionTable<BaselineSettings>()
                              .add("max_heads", &BaselineSettings::max_heads, "8",
                                   "stop growing a block at this many heads", 1, 1e6)
                              .add("value_variance", &BaselineSettings::value_variance, "~",
                                   "Var(W_V) of a new head; unset = the head's default", 0.0)
                              .add("preserve_function", &BaselineSettings::preserve_function,
                                   "true", "new head's W_O starts at zero");
    return t;
  }
};

/// Common: how new heads start, the cap, the per-block bookkeeping.
class BaselineGrowth : public gf::GrowthPolicy {
 public:
  BaselineGrowth(const BaselineSettings& s, std::string name) : name_(std::move(name)), set_(s) {}

  void on_start(const gf::TrainView& view) override {
    if (seeded_) return;
    rng_ = gf::Rng(view.rng ? view.rng->next_u64() : 0xba5eULL, name_);
    seeded_ = true;
    for (const gf::BlockView& bv : view.blocks) last_add_[bv.index] = long(view.step);
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    if (!seeded_) on_start(view);
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      const size_t heads = bv.block->num_heads();
      if (!last_add_.count(bv.index)) last_add_[bv.index] = long(view.step);
      double u = 0.0;
      if (!decide(view, bv.index, heads, &u)) continue;
      if (heads >= set_.max_heads) continue;
      gf::Edit e;
      e.kind = gf::Edit::Kind::AddHead;
      e.block = bv.index;
      e.init.mode = "random";
      e.init.value_variance = set_.value_variance;
      e.init.preserve_function = set_.preserve_function;
      e.cause.type = "grow";
      e.cause.block = long(bv.index);
      e.cause.numbers = {{"step", double(view.step)}, {"heads_before", double(heads)}, {"draw", u}};
      e.cause.strings = {{"policy", name_}};
      last_add_[bv.index] = long(view.step);
      ++grown_;
      edits.push_back(std::move(e));
    }
    return edits;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    (void)new_head_id;
    (void)view;
    if (e.edits_blocks()) gf::move_blocks(last_add_, e);  // the steps move with their blocks
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;
    return fields().summary(*this);
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << name_ << " 1 ";
    fields().save(os, *this);
    os << "end";
    return os.str();
  }

  void load_state(const std::string& s) override {
    auto opened = gf::state::Reader::open(s, name_, "1");
    if (!opened) return;
    fields().load(*opened, *this);
    opened->expect("end");
  }

 protected:
  /// True when block `b` should grow now; `draw` is logged with the edit.
  virtual bool decide(const gf::TrainView& view, size_t b, size_t heads, double* draw) = 0;

  std::string name_;
  BaselineSettings set_;
  bool seeded_ = false;
  gf::Rng rng_;
  size_t grown_ = 0;
  std::map<size_t, long> last_add_;

 private:
  static const gf::StateFields<BaselineGrowth>& fields() {
    static const auto f = gf::StateFields<BaselineGrowth>()
                              .add("seeded", &BaselineGrowth::seeded_)
                              .add("rng", &BaselineGrowth::rng_)
                              .add("grown", &BaselineGrowth::grown_)
                              .report("grown")
                              .add("last_add", &BaselineGrowth::last_add_);
    return f;
  }
};

struct FixedSettings {
  BaselineSettings common;
  long every = 100, start = 0;

  static const gf::OptionTable<FixedSettings>& table() {
    static const auto t =
        gf::OptionTable<FixedSettings>()
            .include(BaselineSettings::table(), &FixedSettings::common)
            .add("every", &FixedSettings::every, "100", "steps between two growths", 1, 1e12)
            .add("start", &FixedSettings::start, "0", "no growth before this step", 0, 1e12);
    return t;
  }
};

class FixedSchedule : public BaselineGrowth {
 public:
  explicit FixedSchedule(const FixedSettings& s)
      : BaselineGrowth(s.common, "fixed_schedule"), every_(s.every), start_(s.start) {}

 protected:
  bool decide(const gf::TrainView& view, size_t b, size_t heads, double* draw) override {
    (void)heads;
    *draw = 0.0;
    const long step = long(view.step);
    return step >= start_ && step - last_add_[b] >= every_;
  }

 private:
  long every_, start_;
};

struct RandomSettings {
  BaselineSettings common;
  double probability = 0.1;

  static const gf::OptionTable<RandomSettings>& table() {
    static const auto t = gf::OptionTable<RandomSettings>()
                              .include(BaselineSettings::table(), &RandomSettings::common)
                              .add("probability", &RandomSettings::probability, "0.1",
                                   "chance of adding a head at each check", 0.0, 1.0);
    return t;
  }
};

class RandomGrowth : public BaselineGrowth {
 public:
  explicit RandomGrowth(const RandomSettings& s)
      : BaselineGrowth(s.common, "random"), p_(s.probability) {}

 protected:
  bool decide(const gf::TrainView& view, size_t b, size_t heads, double* draw) override {
    (void)view;
    (void)b;
    (void)heads;
    *draw = rng_.uniform();  // drawn every check, so decisions depend only on the seed
    return *draw < p_;
  }

 private:
  double p_;
};

void register_baselines(gf::Registry& r) {
  r.add_growth({"fixed_schedule", "add a randomly initialised head every N steps up to K",
                FixedSettings::table().specs()},
               [](const gf::Options& o) {
                 return std::make_unique<FixedSchedule>(FixedSettings::table().read(o));
               });
  r.add_growth({"random", "add a randomly initialised head with probability p per check",
                RandomSettings::table().specs()},
               [](const gf::Options& o) {
                 return std::make_unique<RandomGrowth>(RandomSettings::table().read(o));
               });
  register_mlp_schedule(r);
  register_depth_schedule(r);
}

}  // namespace

GROWFORMER_PLUGIN("growth_baselines", "0.1.0", register_baselines)
