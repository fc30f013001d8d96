// What decides whether `incrt_geometric` grows: three strategies behind one interface.
// - learning (the default) and gain: rounds judged on the validation probe
//   (round_criterion.cpp, over the round rules of <growformer/incrt/round_rules.hpp>: a
//   round's heads are decided in LearningState::observe / GainState::observe, placed by
//   RoundCriterion::grow_round and taken back by RoundCriterion::take_back);
// - energy: the paper's threshold on the uncaptured energy of A_res, decided per block at each
//   check (energy_criterion.cpp, EnergyCriterion::block_checked).
// Each is created in one place (make_criterion) from the policy's options; the policy
// (incrt_geometric.cpp) owns the blocks' geometry, the state text and the edits' bookkeeping.
#pragma once

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <growformer/growth.hpp>
#include <growformer/state_text.hpp>

#include "block_geometry.hpp"
#include "policy.hpp"

namespace gf::incrt::policy {

/// A growth criterion of `incrt_geometric`.
class Criterion {
 public:
  virtual ~Criterion() = default;
  /// The word its state is saved under (`learning`, `gain`; `none` for energy).
  virtual const char* state_word() const = 0;
  /// Validation examples the probe at the check after STEP should hold (0: no probe).
  virtual size_t validation_probe() const { return 0; }
  /// The probe also measures these sets of heads muted.
  virtual std::vector<std::vector<gf::HeadRef>> probe_ablations() const { return {}; }
  /// Heads that sit out the training step STEP.
  virtual std::vector<gf::HeadRef> muted_in_training(size_t step) const {
    (void)step;
    return {};
  }
  /// Heads that sit out a share of the training step STEP's examples.
  virtual gf::GrowthPolicy::ExampleMute muted_on_examples(size_t step) const {
    (void)step;
    return {};
  }
  /// The structure may still be taken back (the best checkpoint waits).
  virtual bool on_trial() const { return false; }
  virtual std::vector<gf::HeadRef> twin_without() const { return {}; }
  /// A block's check, after its geometry was read (CHECK; null with energy_stats off).
  virtual void block_checked(const gf::TrainView& view, const gf::BlockView& bv, BlockState& st,
                             const BlockGeometry::Check* check, std::vector<gf::Edit>& edits) {
    (void)view, (void)bv, (void)st, (void)check, (void)edits;
  }
  /// After every block's check: BLOCKS' states, INPUTS what the round reads of this check.
  virtual void checked(const gf::TrainView& view, const Blocks& blocks,
                       std::map<size_t, RoundInputs>& inputs, std::vector<gf::Edit>& edits) {
    (void)view, (void)blocks, (void)inputs, (void)edits;
  }
  /// An AddHead this policy returned was applied: true when the head belongs to a round.
  virtual bool round_head_added(const gf::Edit& e, int new_head_id) {
    (void)e, (void)new_head_id;
    return false;
  }
  /// A head was removed (by this policy's edit or another's).
  virtual void head_removed(const gf::Edit& e) { (void)e; }
  /// A block was inserted or removed (another policy's edit): the blocks after it moved.
  virtual void blocks_moved(const gf::Edit& e) { (void)e; }
  virtual void summarize(std::map<std::string, double>& out) const { (void)out; }
  /// The state: the word, the criterion's fields, its check and pending counters.
  virtual void save(std::ostringstream& os) const = 0;
  /// The state saved by VERSION (>= 4; before that none was saved).
  virtual void load(gf::state::Reader& r, int version) = 0;
};

/// The criterion the options name; GEOMETRY gives the new heads' variance.
std::unique_ptr<Criterion> make_criterion(const IncrtSettings& s, const BlockGeometry& geometry);

/// The word a state saved by VERSION names its criterion by (before 9: `gain`, whatever the
/// criterion).
std::string read_state_word(gf::state::Reader& r, int version);
/// A state saved by criterion SAVED (its word) is refused by name when it is not MINE.
void refuse_other_criterion(const std::string& saved, const std::string& mine);

std::unique_ptr<Criterion> make_energy_criterion(const IncrtSettings& s,
                                                 const BlockGeometry& geometry);
std::unique_ptr<Criterion> make_round_criterion(const IncrtSettings& s,
                                                const BlockGeometry& geometry);

}  // namespace gf::incrt::policy
