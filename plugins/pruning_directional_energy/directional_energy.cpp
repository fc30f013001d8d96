// INCRT pruning rule (`directional_energy`): remove a head whose directional
// energy stays under phi_g for `patience` consecutive checks after a `grace`
// period since its birth. A head's energy is measured on the same footing as the
// threshold: its share sym(C M_a,h) of S = sym(C M_a) (Frobenius norm), by default
// the part that the other heads do not explain (`energy: residual`), against
// phi_g x ||S||_F of the same check (scale-invariant). C comes from the rule's own probe.
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

#include <growformer/incrt_math.hpp>

namespace {

using gf::incrt::Mat;
using gf::incrt::Vec;

struct PruneBlockState {
  size_t checks = 0;
  Vec calib_norms;
  bool calibrated = false;
  double gamma0 = 0.0, phi_g = 0.0;
  std::map<long, long> below;  // head id -> consecutive checks under phi_g
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
  explicit DirectionalEnergy(const gf::Options& o)
      : first_sequence_(o.get_string("probe") == "first_sequence"),
        normalize_c_(o.get_bool("normalize_c")),
        residual_(o.get_string("energy") == "residual"),
        calibration_checks_(static_cast<size_t>(o.get_int("calibration_checks"))),
        absolute_(o.get_string("thresholds") == "absolute"),
        track_scale_(o.get_string("thresholds") == "relative"),
        footing_sym_(o.get_string("footing") == "sym"),
        theta_rel_(o.get_float("theta_w")),
        phi_g_opt_(o.get_float("phi_g")),
        patience_(o.get_int("patience")),
        grace_(static_cast<size_t>(o.get_int("grace"))),
        min_heads_(static_cast<size_t>(o.get_int("min_heads"))),
        max_per_check_(static_cast<size_t>(o.get_int("max_per_check"))),
        release_(o.get_bool("release_direction")) {
    if (absolute_ && !o.is_set("phi_g"))
      o.fail("phi_g", "thresholds: absolute needs an explicit phi_g");
  }

  bool needs_probe() const override { return true; }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    std::vector<gf::Edit> edits;
    for (const gf::BlockView& bv : view.blocks) {
      if (!bv.block || !bv.block->can_edit_heads()) continue;
      if (!bv.probe || !bv.probe->input.defined())
        throw gf::RuntimeError("directional_energy: the trainer gave no probe for block " +
                               std::to_string(bv.index) + " (needs_probe() is true)");
      check_block(view, bv, blocks_[bv.index], edits);
    }
    return edits;
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    (void)new_head_id;
    (void)view;
    if (e.kind == gf::Edit::Kind::RemoveHead) {
      auto it = blocks_.find(e.block);
      if (it != blocks_.end()) it->second.below.erase(e.head_id);
    }
  }

  std::map<std::string, double> summary() const override {
    std::map<std::string, double> out;
    for (const auto& kv : blocks_) {
      const std::string p = blocks_.size() > 1 ? "block" + std::to_string(kv.first) + "." : "";
      out[p + "prune_gamma_res0"] = kv.second.gamma0;
      out[p + "phi_g"] = kv.second.phi_g;
    }
    out["pruned"] = double(pruned_);
    return out;
  }

  std::string save_state() const override {
    std::ostringstream os;
    os << "directional_energy 1 " << pruned_ << ' ' << blocks_.size() << ' ';
    for (const auto& kv : blocks_) {
      const PruneBlockState& s = kv.second;
      os << kv.first << ' ' << s.checks << ' ';
      gf::incrt::put_vec(os, s.calib_norms);
      os << s.calibrated << ' ';
      gf::incrt::put(os, s.gamma0);
      gf::incrt::put(os, s.phi_g);
      os << s.below.size() << ' ';
      for (const auto& b : s.below) os << b.first << ' ' << b.second << ' ';
    }
    os << "end";
    return os.str();
  }

  void load_state(const std::string& text) override {
    auto opened = gf::incrt::Reader::open(text, "directional_energy", "1");
    if (!opened) return;
    gf::incrt::Reader& r = *opened;
    pruned_ = r.u64();
    const size_t nb = r.u64();
    blocks_.clear();
    for (size_t b = 0; b < nb; ++b) {
      PruneBlockState& s = blocks_[r.u64()];
      s.checks = r.u64();
      s.calib_norms = r.vec();
      s.calibrated = r.u64() != 0;
      s.gamma0 = r.num();
      s.phi_g = r.num();
      const size_t n = r.u64();
      for (size_t i = 0; i < n; ++i) {
        const long id = r.i64();
        s.below[id] = r.i64();
      }
    }
    r.expect("end");
  }

 private:
  void check_block(const gf::TrainView& view, const gf::BlockView& bv, PruneBlockState& st,
                   std::vector<gf::Edit>& edits) {
    const std::vector<gf::HeadInfo> heads = bv.block->heads();
    const size_t d = bv.probe->input.dim(2);
    const Mat c = gf::incrt::gram_from_probe(bv.probe->input, bv.probe->mask(), first_sequence_,
                                             normalize_c_);
    std::vector<Mat> cm;
    Mat ma(d);
    for (const gf::HeadInfo& h : heads) {
      const Mat m = h.head ? gf::incrt::head_motor(*h.head, d) : Mat(d);
      for (size_t i = 0; i < ma.a.size(); ++i) ma.a[i] += m.a[i];
      cm.push_back(footing_sym_ ? gf::incrt::sym_cm(c, m) : gf::incrt::matmul(c, m));
    }
    Vec energy(heads.size(), 0.0);
    if (residual_) {
      energy = residual_energies(cm);
    } else {
      for (size_t i = 0; i < cm.size(); ++i) energy[i] = gf::incrt::frobenius(cm[i]);
    }
    const size_t check_index = st.checks++;

    const double total = gf::incrt::frobenius(gf::incrt::sym_cm(c, ma));  // E_t
    if (!st.calibrated) {
      st.calib_norms.push_back(total);
      if (absolute_ || st.calib_norms.size() >= calibration_checks_) {
        st.gamma0 = gf::incrt::median(st.calib_norms);
        st.calibrated = true;
      }
    }
    if (st.calibrated) {
      if (absolute_) st.phi_g = phi_g_opt_;
      else if (track_scale_) st.phi_g = phi_g_opt_ * total;
      else st.phi_g = phi_g_opt_ * theta_rel_ * st.gamma0;
    }

    // Consecutive checks under phi_g, counted only after the grace period.
    std::vector<size_t> candidates;
    Vec ages(heads.size(), 0.0);
    for (size_t i = 0; i < heads.size(); ++i) {
      const long id = heads[i].id;
      const size_t age = view.step >= heads[i].born_step ? view.step - heads[i].born_step : 0;
      ages[i] = double(age);
      long& below = st.below[id];
      if (st.calibrated && age >= grace_ && energy[i] < st.phi_g) {
        below += 1;
      } else {
        below = 0;
      }
      if (below >= patience_) candidates.push_back(i);
    }
    // Forget counters of heads that disappeared for another reason.
    for (auto it = st.below.begin(); it != st.below.end();) {
      bool alive = false;
      for (const gf::HeadInfo& h : heads) alive = alive || h.id == it->first;
      it = alive ? std::next(it) : st.below.erase(it);
    }

    gf::Event ev;
    ev.type = "check";
    ev.block = long(bv.index);
    ev.numbers = {{"step", double(view.step)},
                  {"phi_g", st.phi_g},
                  {"gamma_res0", st.gamma0},
                  {"total_energy", total},
                  {"heads", double(heads.size())}};
    ev.strings = {{"policy", "directional_energy"},
                  {"phase", st.calibrated ? "active" : "calibrating"},
                  {"energy", residual_ ? "residual" : "plain"}};
    Vec ids;
    for (const gf::HeadInfo& h : heads) ids.push_back(h.id);
    ev.lists = {{"head_ids", ids}, {"energy", energy}};
    if (view.events) view.events->emit(ev);
    (void)check_index;

    // Lowest energy first; at most max_per_check; never below min_heads.
    std::sort(candidates.begin(), candidates.end(),
              [&](size_t x, size_t y) { return energy[x] < energy[y]; });
    size_t remaining = heads.size();
    size_t n = 0;
    for (size_t i : candidates) {
      if (n >= max_per_check_ || remaining <= min_heads_) break;
      gf::Edit e;
      e.kind = gf::Edit::Kind::RemoveHead;
      e.block = bv.index;
      e.head_id = heads[i].id;
      e.release_direction = release_;
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
                         {"release_direction", release_ ? "true" : "false"},
                         {"energy", residual_ ? "residual" : "plain"}};
      edits.push_back(std::move(e));
      --remaining;
      ++n;
      ++pruned_;
    }
  }

  bool first_sequence_, normalize_c_, residual_;
  size_t calibration_checks_;
  bool absolute_, track_scale_, footing_sym_;
  double theta_rel_, phi_g_opt_;
  long patience_;
  size_t grace_, min_heads_, max_per_check_;
  bool release_;
  size_t pruned_ = 0;
  std::map<size_t, PruneBlockState> blocks_;
};

gf::OptionSpecs options() {
  using gf::OptType;
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"probe", OptType::String, "batch", "tokens for C: first_sequence or batch", -inf, inf,
       {"first_sequence", "batch"}},
      {"normalize_c", OptType::Bool, "true", "divide C by the token count", -inf, inf, {}},
      {"energy", OptType::String, "residual",
       "residual: the part of a head's matrix not explained by the other heads (catches "
       "duplicates); plain: the head's whole matrix",
       -inf, inf, {"plain", "residual"}},
      {"footing", OptType::String, "sym",
       "a head's matrix: sym (sym(C M_a,h), the footing of the threshold's ||sym(C M_a)||_F) or "
       "cm (C M_a,h, the reference code's E_h, about 3x larger)",
       -inf, inf, {"sym", "cm"}},
      {"calibration_checks", OptType::Int, "16",
       "checks before pruning can start; their median ||sym(C M_a)||_F is Gamma0", 1, 1e6, {}},
      {"thresholds", OptType::String, "relative",
       "relative: phi_g x ||sym(C M_a)||_F of the same check (scale-invariant); calibrated: "
       "phi_g x theta_w x Gamma0; absolute: phi_g as given",
       -inf, inf, {"relative", "calibrated", "absolute"}},
      {"theta_w", OptType::Float, "0.1", "theta_w relative to Gamma0 (thresholds: calibrated)",
       0.0, inf, {}},
      {"phi_g", OptType::Float, "0.02",
       "pruning threshold: fraction of ||sym(C M_a)||_F (relative), x theta_w Gamma0 "
       "(calibrated), or absolute",
       0.0, inf, {}},
      {"patience", OptType::Int, "3", "consecutive checks under phi_g before a prune", 1, 1e9, {}},
      {"grace", OptType::Int, "100", "steps after a head's birth before it can be pruned", 0, 1e12,
       {}},
      {"min_heads", OptType::Int, "1", "never prune a block below this many heads", 0, 1e6, {}},
      {"max_per_check", OptType::Int, "1", "heads removed per block and check at most", 1, 1e6,
       {}},
      {"release_direction", OptType::Bool, "true",
       "tell the growth policy to free the pruned head's birth direction", -inf, inf, {}},
  };
}

void register_rules(gf::Registry& r) {
  r.add_pruning({"directional_energy",
                 "INCRT: prune heads whose directional energy ||sym(C M_a,h)||_F stays under phi_g",
                 options()},
                [](const gf::Options& o) { return std::make_unique<DirectionalEnergy>(o); });
}

}  // namespace

GROWFORMER_PLUGIN("pruning_directional_energy", "0.1.0", register_rules)
