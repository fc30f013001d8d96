// `mlp_magnitude`: the MLP-unit pruning baseline. A unit's importance is the product of its input
// weights' and its output weights' norms (||fc1 column|| x ||fc2 row||: what it can add to the
// residual stream per unit of input); at each check, units whose importance is under
// `threshold` x the block's largest are removed through the structure editor's RemoveMlpUnits
// edit, the smallest first, at most `max_fraction` of the block's units a check, never below
// `min_units`, and not within `grace` steps of the block's last growth (new units start with
// zero output weights, so they would look unused).
#include "mlp_magnitude.hpp"

#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/registry.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr const char* kRule = "mlp_magnitude";

struct MlpMagnitudeSettings {
  double threshold = 0.05;
  double max_fraction = 0.25;
  size_t min_units = 1;
  size_t grace = 100;

  static const gf::OptionTable<MlpMagnitudeSettings>& table() {
    static const auto t =
        gf::OptionTable<MlpMagnitudeSettings>()
            .add("threshold", &MlpMagnitudeSettings::threshold, "0.05",
                 "remove units whose importance is under this fraction of the block's largest", 0.0,
                 1.0)
            .add("max_fraction", &MlpMagnitudeSettings::max_fraction, "0.25",
                 "units removed per block and check at most, as a fraction of its units", 0.0, 1.0)
            .add("min_units", &MlpMagnitudeSettings::min_units, "1",
                 "never prune a block's MLP below this many units", 1, 1 << 20)
            .add("grace", &MlpMagnitudeSettings::grace, "100",
                 "steps after the run's start and after a block's MLP grew before it is pruned", 0,
                 1e12);
    return t;
  }
};

/// Each unit's ||fc1 column|| x ||fc2 row|| of MLP.
std::vector<double> importance(const gf::Mlp& mlp) {
  const gf::Tensor& w1 = mlp.fc1_w().value();  // (d, H)
  const gf::Tensor& w2 = mlp.fc2_w().value();  // (H, d)
  const size_t d = mlp.d_model(), h = mlp.width();
  std::vector<double> in(h, 0.0), out(h, 0.0);
  for (size_t r = 0; r < d; ++r)
    for (size_t u = 0; u < h; ++u) in[u] += double(w1[r * h + u]) * w1[r * h + u];
  for (size_t u = 0; u < h; ++u)
    for (size_t c = 0; c < d; ++c) out[u] += double(w2[u * d + c]) * w2[u * d + c];
  for (size_t u = 0; u < h; ++u) in[u] = std::sqrt(in[u]) * std::sqrt(out[u]);
  return in;
}

class MlpMagnitude : public gf::GrowthPolicy {
 public:
  explicit MlpMagnitude(const MlpMagnitudeSettings& s) : set_(s) {}

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.mlp || view.step < set_.grace) continue;
      const auto grew = grew_.find(bv.index);
      if (grew != grew_.end() && view.step < grew->second + set_.grace) continue;
      const std::vector<double> imp = importance(*bv.mlp);
      const double top = *std::max_element(imp.begin(), imp.end());
      std::vector<std::pair<double, size_t>> low;
      for (size_t u = 0; u < imp.size(); ++u)
        if (imp[u] < set_.threshold * top) low.push_back({imp[u], u});
      std::sort(low.begin(), low.end());
      const size_t width = imp.size();
      const size_t room = width > set_.min_units ? width - set_.min_units : 0;
      const size_t most = std::min(room, size_t(std::floor(set_.max_fraction * double(width))));
      if (low.size() > most) low.resize(most);
      if (low.empty()) continue;
      gf::Edit e;
      e.kind = gf::Edit::Kind::RemoveMlpUnits;
      e.block = bv.index;
      for (const auto& [score, u] : low) e.unit_indices.push_back(u);
      std::sort(e.unit_indices.begin(), e.unit_indices.end());
      e.cause.type = "prune";
      e.cause.numbers = {{"threshold", set_.threshold},
                         {"largest_importance", top},
                         {"width_before", double(width)}};
      e.cause.strings = {{"rule", kRule}};
      std::vector<double> scores;
      for (const auto& [score, u] : low) scores.push_back(score / (top > 0 ? top : 1.0));
      e.cause.lists = {{"relative_importance", scores}};
      edits.push_back(std::move(e));
    }
    return edits;
  }

  void edited(const gf::Edit& e, int first, const gf::TrainView& view) override {
    (void)first;
    if (e.edits_blocks()) gf::move_blocks(grew_, e);
    if (e.kind == gf::Edit::Kind::AddMlpUnits) grew_[e.block] = view.step;
    if (e.kind == gf::Edit::Kind::RemoveMlpUnits && gf::made_by(e, kRule))
      removed_ += e.unit_indices.size();
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;
    return fields().summary(*this);
  }

  std::string save_state() const override { return fields().text(kRule, 1, *this); }
  void load_state(const std::string& s) override { fields().read_text(s, kRule, 1, *this); }

 private:
  static const gf::StateFields<MlpMagnitude>& fields() {
    static const auto f = gf::StateFields<MlpMagnitude>()
                              .add("grew", &MlpMagnitude::grew_)
                              .add("units_removed", &MlpMagnitude::removed_)
                              .report("units_removed");
    return f;
  }

  MlpMagnitudeSettings set_;
  std::map<size_t, size_t> grew_;  // each block's last MLP growth, by step
  size_t removed_ = 0;             // units this rule removed
};

}  // namespace

void register_mlp_magnitude(gf::Registry& r) {
  r.add_pruning({kRule,
                 "prune MLP units whose ||fc1 column|| x ||fc2 row|| is small against the "
                 "block's largest",
                 MlpMagnitudeSettings::table().specs()},
                [](const gf::Options& o) {
                  return std::make_unique<MlpMagnitude>(MlpMagnitudeSettings::table().read(o));
                });
}
