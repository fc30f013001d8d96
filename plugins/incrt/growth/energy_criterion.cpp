// `criterion: energy`, the paper's rule (docs/INCRT.md, spec/INCRT.md): a head at the leading
// uncaptured direction of A_res when its energy stayed over the threshold theta_w for
// `patience` checks, the dwell time has passed and there is room. Decided per block at each
// check (block_checked), on the block's geometry (block_geometry.hpp); it reads no probe.
#include <algorithm>
#include <memory>
#include <utility>

#include <growformer/incrt/gain_rounds.hpp>

#include "criterion.hpp"

namespace gf::incrt::policy {
namespace {

class EnergyCriterion final : public Criterion {
 public:
  EnergyCriterion(const IncrtSettings& s, const BlockGeometry& g) : set_(s), geometry_(g) {}
  const char* state_word() const override { return "none"; }

  /// Stage "decide": after calibration, at the leading half's tracker direction.
  void block_checked(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                     const BlockGeometry::Check* check, std::vector<gf::Edit>& edits) override {
    if (!check || !st.calib.done || check->rd.calibrated_now) return;
    const BlockGeometry::Check& c = *check;
    const size_t d = c.sp.eig.values.size();
    const size_t cap = std::min(set_.max_heads > 0 ? set_.max_heads : static_cast<size_t>(-1),
                                bv.block->max_heads());
    const bool enough = st.over >= std::max<size_t>(set_.patience, 1);
    // The paper's second condition; vacuous for the traceless A_res (kept for the
    // positive-half rule).
    const bool minor = set_.both_halves || st.lambda_min < st.phi_w;
    const size_t room = set_.both_halves ? 2 : 1;
    const long since = static_cast<long>(c.rd.check_index) - st.last_growth_check;
    if (!(enough && minor && since >= c.rd.dwell && c.heads.size() < cap &&
          st.q.size() + room <= d))
      return;
    const Vec& dir = c.rd.minus_first ? st.tracker.um : st.tracker.up;
    gf::Edit e;
    e.kind = gf::Edit::Kind::AddHead;
    e.block = bv.index;
    e.init.mode = set_.directed ? "directed" : "random";
    e.init.direction.assign(dir.begin(), dir.end());
    e.init.preserve_function = set_.preserve_function;
    e.init.value_variance = geometry_.new_head_variance(c.heads, d, c.ps.seq_len);
    e.cause.type = "grow";
    e.cause.block = static_cast<long>(bv.index);
    e.cause.numbers = {{"step", double(view.step)},
                       {"lambda_max", st.lambda_max},
                       {"lambda_min", st.lambda_min},
                       {"energy", c.rd.lead},
                       {"a_res_norm", c.sp.a_norm},
                       {"total_energy", c.ps.energy},
                       {"theta_w", st.theta_w},
                       {"phi_w", st.phi_w},
                       {"gap_top", c.sp.gap_top},
                       {"W_t", st.w_t},
                       {"heads_before", double(c.heads.size())},
                       {"checks_over", double(st.over)},
                       {"value_variance", e.init.value_variance}};
    e.cause.strings = {{"policy", "incrt_geometric"},
                       {"init", e.init.mode},
                       {"half", c.rd.minus_first ? "negative" : "positive"}};
    st.pending = true;
    st.pending_dir = dir;
    st.pending_dir2.clear();
    if (set_.both_halves) st.pending_dir2 = c.rd.minus_first ? st.tracker.up : st.tracker.um;
    st.last_growth_check = static_cast<long>(c.rd.check_index);
    st.over = 0;  // A_res changes with the new head's directions in Q
    edits.push_back(std::move(e));
  }

  /// Its state is the blocks' own: the word and two counters the round criteria use.
  void save(std::ostringstream& os) const override { os << "none 0 0 "; }
  void load(gf::state::Reader& r, int version) override {
    const std::string saved = read_state_word(r, version);
    if (version < 9) {  // the gain rule's state, written whatever the criterion: read, dropped
      GainState dropped;
      GainState::state_fields().load(r, dropped, version);
    } else {
      refuse_other_criterion(saved, "none");
    }
    r.u64();  // checks and pending round heads: none under this criterion
    r.u64();
  }

 private:
  const IncrtSettings& set_;
  const BlockGeometry& geometry_;
};

}  // namespace

std::unique_ptr<Criterion> make_energy_criterion(const IncrtSettings& s,
                                                 const BlockGeometry& geometry) {
  return std::make_unique<EnergyCriterion>(s, geometry);
}

}  // namespace gf::incrt::policy
