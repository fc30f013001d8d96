// grow_on_plateau, the C++ twin of examples/python/grow_on_plateau.py: add a head to every
// block when the training loss stops improving.
//   growth: {plugin: grow_on_plateau, patience: 2, min_delta: 0.01, max_heads: 8}
// The loss each check sees is the mean over the steps since the previous check (view.metrics).
// best, waited and grown are its whole state, saved in checkpoints: a resumed run decides alike.
// Its check events' `plot` names what `growformer report` draws; summary_columns() names the
// summary keys the sweep table shows.
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/state_text.hpp>

#include <cmath>
#include <cstdio>

namespace {
// Each option once: its name, member, default, help and bounds (the spec, the parsing and the
// summary come from this one list).
struct Settings {
  long patience = 3, max_heads = 8;
  double min_delta = 0.01;
  static const gf::OptionTable<Settings>& table() {
    static const auto t = gf::OptionTable<Settings>()
                              .add("patience", &Settings::patience, "3",
                                   "checks without improvement before growing", 1, 1e6)
                              .add("min_delta", &Settings::min_delta, "0.01",
                                   "an improvement smaller than this is none", 0, 1e9)
                              .add("max_heads", &Settings::max_heads, "8",
                                   "stop growing a block at this many heads", 1, 1e6);
    return t;
  }
};

struct GrowOnPlateau : gf::GrowthPolicy {
  Settings set;
  double best = NAN;           // lowest training loss since the last growth (NaN: none yet)
  long waited = 0, grown = 0;  // checks without an improvement of min_delta; heads added
  explicit GrowOnPlateau(const Settings& s) : set(s) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    double loss = view.metrics.train_loss;
    std::vector<gf::Edit> edits;
    if (std::isnan(best) || loss < best - set.min_delta)
      best = loss, waited = 0;
    else
      ++waited;
    if (waited >= set.patience) {
      best = NAN, waited = 0;
      char reason[64];
      std::snprintf(reason, sizeof reason, "plateau at loss %.4f", loss);
      for (const gf::BlockView& b : view.blocks)
        if (b.block->can_edit_heads() && long(b.block->num_heads()) < set.max_heads) {
          gf::Edit e;
          e.block = b.index;
          e.init.preserve_function = true;  // W_O starts at zero: the model's output is kept
          e.cause = {"grow", -1, -1, {{"train_loss", loss}}, {{"reason", reason}}, {}};
          edits.push_back(e);
        }
      grown += long(edits.size());
    }
    if (view.events)
      view.events->emit({"check",
                         -1,
                         -1,
                         {{"train_loss", loss}, {"waited", double(waited)}},
                         {{"policy", "grow_on_plateau"}, {"plot", "train_loss waited"}},
                         {}});
    return edits;
  }
  // Each state field once: saved, loaded and (grown) summarised from this one list.
  static const gf::StateFields<GrowOnPlateau>& fields() {
    static const auto f = gf::StateFields<GrowOnPlateau>()
                              .add("best", &GrowOnPlateau::best)
                              .add("waited", &GrowOnPlateau::waited)
                              .add("grown", &GrowOnPlateau::grown)
                              .report("grown");
    return f;
  }
  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;
    return fields().summary(*this);
  }
  std::vector<std::string> summary_columns() const override { return {"grown"}; }
  std::string save_state() const override {
    std::ostringstream os;
    os << "grow_on_plateau 1 ";
    fields().save(os, *this);
    os << "end";
    return os.str();
  }
  void load_state(const std::string& s) override {
    auto r = gf::state::Reader::open(s, "grow_on_plateau", "1");
    if (!r) return;
    fields().load(*r, *this);
    r->expect("end");
  }
};

void reg(gf::Registry& r) {
  r.add_growth({"grow_on_plateau", "add a head to every block when the training loss plateaus",
                Settings::table().specs()},
               [](const gf::Options& o) {
                 return std::make_unique<GrowOnPlateau>(Settings::table().read(o));
               });
}
}  // namespace
GROWFORMER_PLUGIN("grow_on_plateau", "1.0.0", reg)
