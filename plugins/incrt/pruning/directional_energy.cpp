// INCRT pruning rule (`directional_energy`): remove a head whose directional
// energy stays under phi_g for `patience` consecutive checks after a `grace`
// period since its birth. A head's energy is measured on the same footing as the
// threshold: its share sym(C M_a,h) of S = sym(C M_a) (Frobenius norm), by default
// the part that the other heads do not explain (`energy: residual`), against
// phi_g x ||S||_F of the same check (scale-invariant). C comes from the rule's own probe.
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/incrt/math.hpp>
#include <growformer/incrt/stats.hpp>

namespace {

using gf::incrt::Mat;
using gf::incrt::Thresholds;
using gf::incrt::Vec;

struct PruneBlockState {
  size_t checks = 0;
  gf::incrt::Calibration calib;  // E_t of the first checks and their median Gamma0
  double phi_g = 0.0;
  std::map<long, long> below;  // head id -> consecutive checks under phi_g

  static const gf::StateFields<PruneBlockState>& state_fields() {
    using P = PruneBlockState;
    using C = gf::incrt::Calibration;
    static const auto f = gf::StateFields<P>()
                              .add("checks", &P::checks)
                              .add("calib_norms", &P::calib, &C::norms)
                              .add("calibrated", &P::calib, &C::done)
                              .add("gamma0", &P::calib, &C::gamma0)
                              .add("phi_g", &P::phi_g)
                              .add("below", &P::below);
    return f;
  }
};

/// The rule's options, each declared once.
struct PruneSettings {
  gf::incrt::ProbeSettings probe;
  bool residual = true, footing_sym = true;
  gf::incrt::CalibrationSettings calibration;  // fixed: `calibration_checks` checks
  Thresholds thresholds = Thresholds::Relative;
  double theta_w = 0.1, phi_g = 0.02;
  long patience = 3;
  size_t grace = 100, min_heads = 1, max_per_check = 1;
  bool release_direction = true;

  static const gf::OptionTable<PruneSettings>& table() {
    using S = PruneSettings;
    static const gf::OptionTable<S> built = [] {
      gf::OptionTable<S> t;
      t.include(gf::incrt::ProbeSettings::table(), &S::probe)
          .choice("energy", &S::residual, "residual",
                  "residual: the part of a head's matrix not explained by the other heads (catches "
                  "duplicates); plain: the head's whole matrix",
                  {{"plain", false}, {"residual", true}})
          .choice("footing", &S::footing_sym, "sym",
                  "a head's matrix: sym (sym(C M_a,h), the footing of the threshold's ||sym(C "
                  "M_a)||_F) or "
                  "cm (C M_a,h, the reference code's E_h, about 3x larger)",
                  {{"sym", true}, {"cm", false}});
      gf::incrt::add_calibration_checks(
          t, &S::calibration,
          "checks before pruning can start; their median ||sym(C M_a)||_F is Gamma0");
      gf::incrt::add_thresholds(
          t, &S::thresholds,
          "relative: phi_g x ||sym(C M_a)||_F of the same check (scale-invariant); calibrated: "
          "phi_g x theta_w x Gamma0; absolute: phi_g as given");
      t.add("theta_w", &S::theta_w, "0.1", "theta_w relative to Gamma0 (thresholds: calibrated)",
            0.0)
          .add("phi_g", &S::phi_g, "0.02",
               "pruning threshold: fraction of ||sym(C M_a)||_F (relative), x theta_w Gamma0 "
               "(calibrated), or absolute",
               0.0)
          .add("patience", &S::patience, "3", "consecutive checks under phi_g before a prune", 1,
               1e9)
          .add("grace", &S::grace, "100", "steps after a head's birth before it can be pruned", 0,
               1e12)
          .add("min_heads", &S::min_heads, "1",
               "never prune a block below this many heads (a block keeps one at least)", 1, 1e6)
          .add("max_per_check", &S::max_per_check, "1", "heads removed per block and check at most",
               1, 1e6)
          .add("release_direction", &S::release_direction, "true",
               "tell the growth policy to free the pruned head's birth direction");
      return t;
    }();
    return built;
  }
};

/// Energies of the part of each v_h not explained by the other heads' v_j
/// (least squares in the Frobenius inner product): sqrt(G_hh - g^T G_oo^-1 g).
Vec residual_energies(const std::vector<Mat>& cm) {
  const size_t k = cm.size();
  std::vector<std::vector<double>> g(k, std::vector<double>(k, 0.0));
  for (size_t i = 0; i < k; ++i)
    for (size_t j = i; j < k; ++j) {
      double s = 0.0;
      for (size_t t = 0; t < cm[i].a.size(); ++t) s += cm[i].a[t] * cm[j].a[t];
      g[i][j] = g[j][i] = s;
    }
  Vec out(k, 0.0);
  for (size_t h = 0; h < k; ++h) {
    if (k == 1) {
      out[h] = std::sqrt(std::max(g[0][0], 0.0));
      continue;
    }
    // Solve (G_oo + ridge) c = g_o by Gaussian elimination with partial pivoting.
    const size_t m = k - 1;
    std::vector<size_t> idx;
    for (size_t j = 0; j < k; ++j)
      if (j != h) idx.push_back(j);
    double tr = 0.0;
    for (size_t j : idx) tr += g[j][j];
    const double ridge = 1e-10 * (tr / double(m) + 1e-300);
    std::vector<std::vector<double>> a(m, std::vector<double>(m + 1));
    for (size_t r = 0; r < m; ++r) {
      for (size_t c = 0; c < m; ++c) a[r][c] = g[idx[r]][idx[c]] + (r == c ? ridge : 0.0);
      a[r][m] = g[idx[r]][h];
    }
    for (size_t col = 0; col < m; ++col) {
      size_t piv = col;
      for (size_t r = col + 1; r < m; ++r)
        if (std::fabs(a[r][col]) > std::fabs(a[piv][col])) piv = r;
      std::swap(a[col], a[piv]);
      const double p = a[col][col];
      if (std::fabs(p) < 1e-300) continue;
      for (size_t r = col + 1; r < m; ++r) {
        const double f = a[r][col] / p;
        if (f == 0.0) continue;
        for (size_t c = col; c <= m; ++c) a[r][c] -= f * a[col][c];
      }
    }
    Vec x(m, 0.0);
    for (size_t r = m; r-- > 0;) {
      double s = a[r][m];
      for (size_t c = r + 1; c < m; ++c) s -= a[r][c] * x[c];
      x[r] = std::fabs(a[r][r]) < 1e-300 ? 0.0 : s / a[r][r];
    }
    double explained = 0.0;
    for (size_t r = 0; r < m; ++r) explained += x[r] * g[idx[r]][h];
    out[h] = std::sqrt(std::max(g[h][h] - explained, 0.0));
  }
  return out;
}

class DirectionalEnergy : public gf::GrowthPolicy {
 public:
  explicit DirectionalEnergy(const gf::Options& o) : set_(PruneSettings::table().read(o)) {
    if (set_.thresholds == Thresholds::Absolute && !o.is_set("phi_g"))
      o.fail("phi_g", "thresholds: absolute needs an explicit phi_g");
  }

  bool needs_probe() const override { return true; }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      if ((!bv.probe || !bv.probe->input.defined()) && inserted_.contains(bv.index, view.step))
        continue;  // inserted at this check: probed from the next one on
      if (!bv.probe || !bv.probe->input.defined())
        throw gf::RuntimeError("directional_energy: the trainer gave no probe for block " +
                               std::to_string(bv.index) + " (needs_probe() is true)");
      check_block(view, bv, blocks_[bv.index], edits);
    }
    return edits;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    (void)new_head_id;
    inserted_.note(e, view.step);
    if (e.edits_blocks()) gf::move_blocks(blocks_, e);  // the states move with their blocks
    if (e.kind == gf::Edit::Kind::RemoveHead) {
      auto it = blocks_.find(e.block);
      if (it != blocks_.end()) it->second.below.erase(e.head_id);
    }
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;
    std::map<std::string, double> out;
    for (const auto& kv : blocks_) {
      const std::string p = blocks_.size() > 1 ? "block" + std::to_string(kv.first) + "." : "";
      out[p + "prune_gamma_res0"] = kv.second.calib.gamma0;
      out[p + "phi_g"] = kv.second.phi_g;
    }
    out["pruned"] = double(pruned_);
    return out;
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "directional_energy 1 ";
    gf::fields_detail::write(os, pruned_);
    gf::fields_detail::write(os, blocks_);
    os << "end";
    return os.str();
  }

  void load_state(const std::string& text) override {
    auto opened = gf::state::Reader::open(text, "directional_energy", "1");
    if (!opened) return;
    gf::fields_detail::read(*opened, pruned_);
    gf::fields_detail::read(*opened, blocks_);
    opened->expect("end");
  }

 private:
  /// One block's check: probe -> energy (E_t and each head's share) -> calibrate -> threshold ->
  /// decide (the heads under the threshold long enough, then the removals).
  void check_block(const gf::TrainView& view, const gf::BlockView& bv, PruneBlockState& st,
                   std::vector<gf::Edit>& edits) {
    const std::vector<gf::HeadInfo> heads = bv.block->heads();
    const gf::incrt::ProbeStats ps = gf::incrt::ProbeStats::measure(bv, heads, set_.probe);
    const Vec energy = head_energies(ps);
    st.checks += 1;
    const bool absolute = set_.thresholds == Thresholds::Absolute;  // no calibration needed
    st.calib.observe(ps.energy, view.step, view.total_steps, set_.calibration, absolute);
    if (st.calib.done) st.phi_g = threshold(st, ps.energy);
    Vec ages;
    std::vector<size_t> candidates = count_below(view, st, heads, energy, ages);
    emit_check(view, bv, st, heads, energy, ps.energy);
    decide(view, bv, st, heads, energy, ages, candidates, edits);
  }

  /// Stage "threshold": phi_g of a check with total energy E_t: phi_g x E_t (relative),
  /// phi_g x theta_w x Gamma_res(0) (calibrated) or phi_g (absolute).
  double threshold(const PruneBlockState& st, double energy) const {
    const double w = set_.thresholds == Thresholds::Calibrated ? set_.theta_w : 1.0;
    return set_.phi_g * w * gf::incrt::threshold_scale(set_.thresholds, energy, st.calib);
  }

  /// Each head's energy: its share of sym(C M_a) (or C M_a,h), the part the other heads do not
  /// explain with `energy: residual`.
  Vec head_energies(const gf::incrt::ProbeStats& ps) const {
    std::vector<Mat> cm;
    for (const Mat& m : ps.motors)
      cm.push_back(set_.footing_sym ? gf::incrt::sym_cm(ps.c, m) : gf::incrt::matmul(ps.c, m));
    if (set_.residual) return residual_energies(cm);
    Vec energy(cm.size(), 0.0);
    for (size_t i = 0; i < cm.size(); ++i) energy[i] = gf::incrt::frobenius(cm[i]);
    return energy;
  }

  /// Consecutive checks under phi_g, counted only after the grace period; the heads at
  /// `patience` of them (their ages in AGES).
  std::vector<size_t> count_below(const gf::TrainView& view, PruneBlockState& st,
                                  const std::vector<gf::HeadInfo>& heads, const Vec& energy,
                                  Vec& ages) const {
    std::vector<size_t> candidates;
    ages.assign(heads.size(), 0.0);
    for (size_t i = 0; i < heads.size(); ++i) {
      const long id = heads[i].id;
      const size_t age = view.step >= heads[i].born_step ? view.step - heads[i].born_step : 0;
      ages[i] = double(age);
      long& below = st.below[id];
      if (st.calib.done && age >= set_.grace && energy[i] < st.phi_g) {
        below += 1;
      } else {
        below = 0;
      }
      if (below >= set_.patience) candidates.push_back(i);
    }
    // Forget counters of heads that disappeared for another reason.
    for (auto it = st.below.begin(); it != st.below.end();) {
      bool alive = false;
      for (const gf::HeadInfo& h : heads) alive = alive || h.id == it->first;
      it = alive ? std::next(it) : st.below.erase(it);
    }
    return candidates;
  }

  void emit_check(const gf::TrainView& view, const gf::BlockView& bv, const PruneBlockState& st,
                  const std::vector<gf::HeadInfo>& heads, const Vec& energy, double total) const {
    if (!view.events) return;
    gf::Event ev;
    ev.type = "check";
    ev.block = long(bv.index);
    ev.numbers = {{"step", double(view.step)},
                  {"phi_g", st.phi_g},
                  {"gamma_res0", st.calib.gamma0},
                  {"total_energy", total},
                  {"heads", double(heads.size())}};
    ev.strings = {{"policy", "directional_energy"},
                  {"phase", st.calib.done ? "active" : "calibrating"},
                  {"energy", set_.residual ? "residual" : "plain"}};
    Vec ids;
    for (const gf::HeadInfo& h : heads) ids.push_back(h.id);
    ev.lists = {{"head_ids", ids}, {"energy", energy}};
    view.events->emit(ev);
  }

  /// Lowest energy first; at most max_per_check; never below min_heads.
  void decide(const gf::TrainView& view, const gf::BlockView& bv, PruneBlockState& st,
              const std::vector<gf::HeadInfo>& heads, const Vec& energy, const Vec& ages,
              std::vector<size_t> candidates, std::vector<gf::Edit>& edits) {
    std::sort(candidates.begin(), candidates.end(),
              [&](size_t x, size_t y) { return energy[x] < energy[y]; });
    size_t remaining = heads.size();
    size_t n = 0;
    for (size_t i : candidates) {
      if (n >= set_.max_per_check || remaining <= set_.min_heads) break;
      gf::Edit e;
      e.kind = gf::Edit::Kind::RemoveHead;
      e.block = bv.index;
      e.head_id = heads[i].id;
      e.release_direction = set_.release_direction;
      e.cause.type = "prune";
      e.cause.block = long(bv.index);
      e.cause.head = heads[i].id;
      e.cause.numbers = {{"step", double(view.step)},
                         {"energy", energy[i]},
                         {"phi_g", st.phi_g},
                         {"checks_below", double(st.below[heads[i].id])},
                         {"age", ages[i]},
                         {"heads_before", double(remaining)}};
      e.cause.strings = {{"policy", "directional_energy"},
                         {"release_direction", set_.release_direction ? "true" : "false"},
                         {"energy", set_.residual ? "residual" : "plain"}};
      edits.push_back(std::move(e));
      --remaining;
      ++n;
      ++pruned_;
    }
  }

  PruneSettings set_;
  size_t pruned_ = 0;
  std::map<size_t, PruneBlockState> blocks_;
  gf::InsertedBlocks inserted_;  // blocks inserted at this check (no probe yet)
};

void register_rules(gf::Registry& r) {
  r.add_pruning({"directional_energy",
                 "INCRT: prune heads whose directional energy ||sym(C M_a,h)||_F stays under phi_g",
                 PruneSettings::table().specs()},
                [](const gf::Options& o) { return std::make_unique<DirectionalEnergy>(o); });
}

}  // namespace

GROWFORMER_PLUGIN("pruning_directional_energy", "0.1.0", register_rules)
