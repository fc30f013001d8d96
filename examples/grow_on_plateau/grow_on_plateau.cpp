// grow_on_plateau, the C++ twin of examples/python/grow_on_plateau.py: add a head to every
// block when the training loss stops improving.
//   growth: {plugin: grow_on_plateau, patience: 2, min_delta: 0.01, max_heads: 8}
// The loss each check sees is the mean over the steps since the previous check (view.metrics).
// best, waited and grown are its whole state, saved in checkpoints: a resumed run decides alike.
// Its check events' `plot` names what `growformer report` draws; summary_columns() names the
// summary keys the sweep table shows.
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/state_text.hpp>

#include <cmath>
#include <cstdio>

namespace {
struct GrowOnPlateau : gf::GrowthPolicy {
  long patience, max_heads;
  double min_delta, best = NAN;  // lowest training loss since the last growth (NaN: none yet)
  long waited = 0, grown = 0;    // checks without an improvement of min_delta; heads added
  explicit GrowOnPlateau(const gf::Options& o)
      : patience(o.get_int("patience")), max_heads(o.get_int("max_heads")), min_delta(o.get_float("min_delta")) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    double loss = view.metrics.train_loss;
    std::vector<gf::Edit> edits;
    if (std::isnan(best) || loss < best - min_delta) best = loss, waited = 0;
    else ++waited;
    if (waited >= patience) {
      best = NAN, waited = 0;
      char reason[64];
      std::snprintf(reason, sizeof reason, "plateau at loss %.4f", loss);
      for (const gf::BlockView& b : view.blocks)
        if (b.block->can_edit_heads() && long(b.block->num_heads()) < max_heads) {
          gf::Edit e;
          e.block = b.index;
          e.init.preserve_function = true;  // W_O starts at zero: the model's output is kept
          e.cause = {"grow", -1, -1, {{"train_loss", loss}}, {{"reason", reason}}, {}};
          edits.push_back(e);
        }
      grown += long(edits.size());
    }
    if (view.events)
      view.events->emit({"check", -1, -1, {{"train_loss", loss}, {"waited", double(waited)}},
                         {{"policy", "grow_on_plateau"}, {"plot", "train_loss waited"}}, {}});
    return edits;
  }
  std::map<std::string, double> summary() const override { return {{"grown", double(grown)}}; }
  std::vector<std::string> summary_columns() const override { return {"grown"}; }
  std::string save_state() const override {
    std::ostringstream os;
    os << "grow_on_plateau 1 ";
    gf::state::put(os, best);
    os << waited << ' ' << grown;
    return os.str();
  }
  void load_state(const std::string& s) override {
    if (auto r = gf::state::Reader::open(s, "grow_on_plateau", "1", "grow_on_plateau"))
      best = r->num(), waited = r->i64(), grown = r->i64();
  }
};

void reg(gf::Registry& r) {
  r.add_growth({"grow_on_plateau", "add a head to every block when the training loss plateaus",
                {{"patience", gf::OptType::Int, "3", "checks without improvement before growing", 1, 1e6},
                 {"min_delta", gf::OptType::Float, "0.01", "an improvement smaller than this is none", 0, 1e9},
                 {"max_heads", gf::OptType::Int, "8", "stop growing a block at this many heads", 1, 1e6}}},
               [](const gf::Options& o) { return std::make_unique<GrowOnPlateau>(o); });
}
}  // namespace
GROWFORMER_PLUGIN("grow_on_plateau", "1.0.0", reg)
