// Baseline growth policies for INCRT ablations: `fixed_schedule` (one head every
// N steps up to K) and `random` (one head with probability p per check).
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/incrt_math.hpp>

namespace {

/// Common: how new heads start, the cap, the per-block bookkeeping.
class BaselineGrowth : public gf::GrowthPolicy {
 public:
  BaselineGrowth(const gf::Options& o, std::string name)
      : name_(std::move(name)),
        max_heads_(static_cast<size_t>(o.get_int("max_heads"))),
        value_variance_(o.has_value("value_variance") ? o.get_float("value_variance") : -1.0),
        preserve_(o.get_bool("preserve_function")) {}

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
      if (heads >= max_heads_) continue;
      gf::Edit e;
      e.kind = gf::Edit::Kind::AddHead;
      e.block = bv.index;
      e.init.mode = "random";
      e.init.value_variance = value_variance_;
      e.init.preserve_function = preserve_;
      e.cause.type = "grow";
      e.cause.block = long(bv.index);
      e.cause.numbers = {{"step", double(view.step)}, {"heads_before", double(heads)},
                         {"draw", u}};
      e.cause.strings = {{"policy", name_}};
      last_add_[bv.index] = long(view.step);
      ++grown_;
      edits.push_back(std::move(e));
    }
    return edits;
  }

  std::map<std::string, double> summary() const override { return {{"grown", double(grown_)}}; }

  std::string save_state() const override {
    std::ostringstream os;
    os << name_ << " 1 " << seeded_ << ' ' << rng_.state() << ' ' << rng_.increment() << ' '
       << grown_ << ' ' << last_add_.size() << ' ';
    for (const auto& kv : last_add_) os << kv.first << ' ' << kv.second << ' ';
    os << "end";
    return os.str();
  }

  void load_state(const std::string& s) override {
    auto opened = gf::incrt::Reader::open(s, name_, "1");
    if (!opened) return;
    gf::incrt::Reader& r = *opened;
    seeded_ = r.u64() != 0;
    const uint64_t st = r.u64(), inc = r.u64();
    rng_.restore(st, inc);
    grown_ = r.u64();
    const size_t n = r.u64();
    last_add_.clear();
    for (size_t i = 0; i < n; ++i) {
      const size_t b = r.u64();
      last_add_[b] = r.i64();
    }
    r.expect("end");
  }

 protected:
  /// True when block `b` should grow now; `draw` is logged with the edit.
  virtual bool decide(const gf::TrainView& view, size_t b, size_t heads, double* draw) = 0;

  std::string name_;
  size_t max_heads_;
  double value_variance_;
  bool preserve_;
  bool seeded_ = false;
  gf::Rng rng_;
  size_t grown_ = 0;
  std::map<size_t, long> last_add_;
};

class FixedSchedule : public BaselineGrowth {
 public:
  explicit FixedSchedule(const gf::Options& o)
      : BaselineGrowth(o, "fixed_schedule"),
        every_(o.get_int("every")),
        start_(o.get_int("start")) {}

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

class RandomGrowth : public BaselineGrowth {
 public:
  explicit RandomGrowth(const gf::Options& o)
      : BaselineGrowth(o, "random"), p_(o.get_float("probability")) {}

 protected:
  bool decide(const gf::TrainView& view, size_t b, size_t heads, double* draw) override {
    (void)view; (void)b; (void)heads;
    *draw = rng_.uniform();  // drawn every check, so decisions depend only on the seed
    return *draw < p_;
  }

 private:
  double p_;
};

gf::OptionSpecs common() {
  using gf::OptType;
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"max_heads", OptType::Int, "8", "stop growing a block at this many heads", 1, 1e6, {}},
      {"value_variance", OptType::Float, "~", "Var(W_V) of a new head; unset = the head's default",
       0.0, inf, {}},
      {"preserve_function", OptType::Bool, "true", "new head's W_O starts at zero", -inf, inf, {}},
  };
}

void register_baselines(gf::Registry& r) {
  using gf::OptType;
  gf::OptionSpecs fixed = common();
  fixed.push_back({"every", OptType::Int, "100", "steps between two growths", 1, 1e12, {}});
  fixed.push_back({"start", OptType::Int, "0", "no growth before this step", 0, 1e12, {}});
  r.add_growth({"fixed_schedule", "add a randomly initialised head every N steps up to K", fixed},
               [](const gf::Options& o) { return std::make_unique<FixedSchedule>(o); });
  gf::OptionSpecs rnd = common();
  rnd.push_back({"probability", OptType::Float, "0.1", "chance of adding a head at each check",
                 0.0, 1.0, {}});
  r.add_growth({"random", "add a randomly initialised head with probability p per check", rnd},
               [](const gf::Options& o) { return std::make_unique<RandomGrowth>(o); });
}

}  // namespace

GROWFORMER_PLUGIN("growth_baselines", "0.1.0", register_baselines)
