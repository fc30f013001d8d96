// The options of `incrt_geometric`, each declared once (spec, parsing and member): the
// criterion, the rounds and their test (learning, gain), the probe, trackers and calibration
// (every criterion's geometry), and the energy rule.
#include <growformer/fields.hpp>

#include "policy.hpp"

namespace gf::incrt::policy {
namespace {

using IncrtTable = gf::OptionTable<IncrtSettings>;

/// criterion: gain and its round rule.
void round_options(IncrtTable& t) {
  using S = IncrtSettings;
  using G = RoundOptions;
  t.choice(
       "criterion", &S::criterion, "learning",
       "learning: grow in rounds while the model learns: a round (doubling the heads, aimed at "
       "the planes no head carries) grows as soon as the validation probe shows learning and "
       "again each time the last round's heads carry min_share of the probe loss at a paired t of "
       "z_early (z when grow_until ends); a round unpaid at grow_until is taken back "
       "(docs/INCRT.md); "
       "gain: the same rounds, grown only at plateaus of the probe loss (the earlier default); "
       "energy: grow while the uncaptured energy of A_res exceeds theta_w (thresholds: calibrated "
       "is the paper's rule)",
       {{"learning", CriterionKind::Learning},
        {"gain", CriterionKind::Gain},
        {"energy", CriterionKind::Energy}})
      .choice("energy_stats", &S::energy_stats, "auto",
              "whether each check measures the block's residual energy, spectrum and trackers "
              "(the `check` events, the report's INCRT chart, K_pred): auto = for the energy and "
              "gain criteria, which decide on them; on = for learning too (its decisions do not "
              "change; the checks cost more); off = learning only",
              {{"auto", EnergyStats::Auto}, {"on", EnergyStats::On}, {"off", EnergyStats::Off}})
      .choice("round", &S::round, "double",
              "learning, gain: heads per round: double (as many as the block has), planes (the "
              "uncaptured planes "
              "over plane_threshold, at most doubling) or one",
              {{"double", Round::Double}, {"planes", Round::Planes}, {"one", Round::One}})
      .add("plane_threshold", &S::plane_threshold, "0.5",
           "learning, gain: an uncaptured plane counts when over this fraction of the median "
           "head's top plane",
           0.0)
      .add("probe_examples", &S::rounds, &G::probe_examples, "~",
           "learning, gain: validation examples per probe (at most the validation split); unset = "
           "256 "
           "for learning (its probes every so many checks that they cost at most 15 % of the "
           "training work), 512 for gain",
           1, 1e7)
      .add("probe_every", &S::rounds, &G::probe_every, "2",
           "gain: a validation probe every N checks while the rule waits for the loss to settle", 1,
           1e6)
      .add("round_probe_every", &S::rounds, &G::round_probe_every, "2",
           "gain, round_test paired: a probe every N checks while a round waits for its test (each "
           "probe is evaluated twice, with and without the round's heads)",
           1, 1e6)
      .add("stopped_probe_every", &S::rounds, &G::stopped_probe_every, "8",
           "gain: a probe every N checks once growth stopped (only the reopen watch reads it)", 1,
           1e6)
      .add("settle_probes", &S::rounds, &G::settle_probes, "4",
           "gain: W, settled when the median probe loss of the last W probes fell by less than "
           "settle_tolerance against the W before",
           1, 1e6)
      .add("settle_tolerance", &S::rounds, &G::settle_tolerance, "0.01",
           "gain: settled when the windowed median fell by less than this fraction", 0.0, 1.0)
      .add("min_gain", &S::rounds, &G::min_gain, "0.05",
           "gain: a round is kept when the settled probe loss fell by this fraction", 0.0, 1.0)
      .add("reopen_rise", &S::rounds, &G::reopen_rise, "0.25",
           "learning, gain: after growth stopped, a probe loss this fraction over the settled one "
           "(learning: the best since) for settle_probes probes (learning: 3) reopens growth (a "
           "changed task)",
           0.0)
      .add("round_patience", &S::rounds, &G::round_patience, "1.5",
           "gain: a round is not taken back before it has trained this many times the steps the "
           "run's first head took to start learning (its probe loss to fall by min_gain)",
           0.0);
}

/// The rounds' test (criterion learning, and gain's round_test) and the growth window.
void round_test_options(IncrtTable& t) {
  using S = IncrtSettings;
  using G = RoundOptions;
  t.choice("round_test", &S::rounds, &G::paired, "paired",
           "gain: what a round must show to be kept. paired: muting its heads costs at least "
           "min_share of the probe loss with a paired t statistic over the probe examples of "
           "at least z_early at any probe, or z when the growth window ends, its heads sitting "
           "out every round_mute_every-th training step meanwhile; relative (the earlier rule): "
           "the settled probe loss fell by min_gain (and, with attribution, muting its heads "
           "costs as much)",
           {{"paired", true}, {"relative", false}})
      .add("min_share", &S::rounds, &G::min_share, "0.01",
           "learning, gain (round_test paired): the least fraction of the probe loss a round's "
           "heads must carry",
           0.0, 1.0)
      .add("z", &S::z, "~",
           "learning, gain (round_test paired): the paired t statistic (median over the last "
           "probes) a "
           "round's share must reach when the growth window ends; unset = 1 for learning (keep a "
           "round "
           "whose heads carry min_share at one standard error), 2 for gain",
           0.0)
      .add("loss_floor", &S::rounds, &G::loss_floor, "0.05",
           "learning, gain (round_test paired): a round's share is of max(probe loss, loss_floor), "
           "so that on "
           "a "
           "solved task (loss near 0) the heads' use does not read as need; a probe loss under it "
           "is settled (no round grows; growth stops past grow_until), and a stopped phase's rise "
           "is measured against at least it",
           0.0)
      .add("round_mute_every", &S::mute_every, "~",
           "learning, gain (round_test paired): the waiting round's heads sit out every N-th "
           "training step (0: never), so that muting them on the probe measures what they add "
           "without the older heads having learnt to lean on them; unset = 0 for learning (a "
           "round on trial trains in full: sitting out cost its heads half their steps, and "
           "grown models ended under fixed models of as many heads; 2 is the rule of 25d4ccd), "
           "2 for gain",
           0.0, 1e9)
      .add("round_mute_examples", &S::rounds, &G::mute_examples, "0",
           "learning, gain (round_test paired): the waiting round's heads sit out on this share "
           "of every training batch's examples (rows moving with the step) and train on every "
           "step from the rest, so that the older heads learn to work without them and muting "
           "them on the probe measures what they add, without the steps round_mute_every takes "
           "from them (0: never)",
           0.0, 1.0)
      .add("z_early", &S::rounds, &G::z_early, "3",
           "learning, gain (round_test paired): the t statistic that pays a round before the "
           "growth window "
           "ends",
           0.0)
      .add(
          "attribution", &S::rounds, &G::attribution, "true",
          "gain, round_test relative: a round is kept only when muting its heads on the probe also "
          "costs min_gain of the loss (the fall came from the new heads, not from the older ones)")
      .add("grow_until", &S::rounds, &G::grow_until, "0.6",
           "learning, gain: no new round after this fraction of the run's steps (after a "
           "reopening: of the "
           "steps left then)",
           0.0, 1.0);
}

/// The learning rule's take-back, review and plateau rounds.
void learning_options(IncrtTable& t) {
  using S = IncrtSettings;
  using G = RoundOptions;
  t.choice("take_back", &S::rounds, &G::take_back_useless, "useless",
           "learning: what takes back a round still unpaid when the growth window ends. "
           "useless: evidence that its heads carry less than min_share (the median share plus "
           "z_back standard errors is under min_share, its trend over the round's probes is "
           "not rising at z_back, and it has trained as long as the learning onset); a round "
           "without that evidence is kept, and one whose share is positive with a bound "
           "reaching min_share lets the next round grow once mature. unproven (the earlier "
           "rule): every round that did not reach min_share at a t of z",
           {{"useless", true}, {"unproven", false}})
      .choice("review", &S::rounds, &G::review, "on",
              "learning: after the growth window, the kept rounds are judged again, newest "
              "first, with their heads muted on the probe and sitting out every "
              "round_mute_every-th step: a round whose median share is still under min_share "
              "and not rising after at least 4 probes of the review is taken back and the round "
              "before it reviewed; one whose share is shown over min_share (its lower bound at "
              "z_back standard errors) ends the review. off: the rule of 2df4707",
              {{"on", true}, {"off", false}})
      .choice("share_from", &S::rounds, &G::twin, "muted",
              "learning: where a round's share on trial is read. muted: the validation probe "
              "with the round's heads muted. twin: the model's twin, a copy of the model forked "
              "when the round grew and trained beside it on the same batches without the round "
              "(a second model's training steps while a round waits): what the round adds over "
              "the model the run would have had without it, not what the older heads came to "
              "lean on; a round taken back continues from the twin. The review, when on, still "
              "mutes the reviewed round",
              {{"muted", false}, {"twin", true}})
      .add("plateau", &S::rounds, &G::plateau, "0.1",
           "learning: while the probe loss has not yet fallen 5 % under its first value (before "
           "the learning onset), a round grows every this fraction of the run's steps (two at "
           "most, within the first half of grow_until), trained in full; at the onset the newest "
           "goes on trial in place of a new round; a window that ends with no onset takes them "
           "back (no_onset). 0: none (the rule of 37f457f)",
           0.0, 1.0)
      .choice("pace", &S::rounds, &G::pace_onset, "onset",
              "learning: when a paid round is followed by the next. onset: once the paid round "
              "is mature (it has trained as long as the model took to start learning; a round "
              "paid younger waits, evidence paid_young); at_once: as soon as it pays (the rule "
              "of 25d4ccd)",
              {{"onset", true}, {"at_once", false}})
      .add("review_sit_out", &S::rounds, &G::review_sit_out, "true",
           "learning, review on: the reviewed round's heads sit out every round_mute_every-th "
           "step as in a trial (false: they train in full and are muted on the probe only; "
           "with round_mute_every 0, the learning default, they train in full either way; also "
           "round_mute_examples unless review_mute_examples is set)")
      .add("review_mute_examples", &S::rounds, &G::review_mute_examples, "~",
           "learning, review on: the share of every training batch's examples the reviewed "
           "round's heads sit out on (as round_mute_examples), so that the older heads learn "
           "to work without a round that trained in full and muting it measures what it adds; "
           "unset: as in a trial (round_mute_examples, with review_sit_out)",
           0.0, 1.0)
      .add("review_until", &S::rounds, &G::review_until, "0.85",
           "learning, review on: no round is taken back after this fraction of the run's steps "
           "(after a reopening: of the steps left at the reopening); the review ends there",
           0.0, 1.0)
      .add("z_back", &S::rounds, &G::z_back, "2",
           "learning, take_back useless: the standard errors of the share's upper bound and of "
           "its trend",
           0.0);
}

/// The probe, the trackers and the end of calibration.
void tracker_options(IncrtTable& t) {
  using S = IncrtSettings;
  using Cal = CalibrationSettings;
  using T = TrackerSettings;
  t.include(ProbeSettings::table(), &S::probe)
      .include(T::table("100", "tracker steps per check"), &S::tracker)
      .choice("step_scale", &S::tracker, &T::scale_frobenius, "frobenius",
              "divide A_res by its Frobenius norm in tracker steps (scale-free step sizes) or none",
              {{"frobenius", true}, {"none", false}})
      .add("coupling", &S::tracker, &T::coupling, "false",
           "couple the trackers as the reference code does, gamma* = D+/(D+ + D-): u+ gets "
           "-(1-gamma*) c u-, u- gets +eta gamma*(1-gamma*) c u+, c = u+^T u-")
      .choice("calibration", &S::calibration, &Cal::plateau, "plateau",
              "end of calibration: plateau (E_t has stopped rising) or fixed (calibration_checks)",
              {{"plateau", true}, {"fixed", false}});
  add_calibration_checks(t, &S::calibration,
                         "checks of calibration (fixed), or at least (plateau); no growth before");
  t.add("calibration_window", &S::calibration, &Cal::window, "8",
        "plateau: compare the median E_t of the last N checks with the N before", 1, 1e6)
      .add(
          "plateau_tolerance", &S::calibration, &Cal::tolerance, "0.1",
          "plateau: calibration ends when the last window's median E_t <= (1 + tol) x the previous",
          0.0)
      .add("calibration_max_checks", &S::calibration, &Cal::max_checks, "200",
           "plateau: calibration ends here at the latest", 1, 1e9)
      .add("calibration_max_fraction", &S::calibration, &Cal::max_fraction, "0.25",
           "plateau: calibration ends at the latest after this fraction of the run's steps, so a "
           "growth has time to train (0 = no bound)",
           0.0, 1.0);
  add_thresholds(
      t, &S::thresholds,
      "relative: theta_w x E_t, the current total directional energy ||sym(C M_a)||_F "
      "(scale-invariant); calibrated: theta_w x Gamma_res(0); phi_w and phi_g x theta_w; "
      "absolute: as given");
}

/// The energy rule: spectrum, thresholds, dwell, patience, the new head and the head-count law.
void growth_options(IncrtTable& t) {
  using S = IncrtSettings;
  t.choice("spectrum", &S::both_halves, "both",
           "both: the energy is the spectral radius of A_res and a growth captures u+ and u- (the "
           "+- pair of one rotation plane); positive: lambda_max > theta_w and lambda_min < phi_w, "
           "u+ only (the paper's formula)",
           {{"both", true}, {"positive", false}})
      .add("theta_w", &S::theta_w, "0.35",
           "growth threshold (relative: x E_t; 0.35 ~ sqrt(1/8): the strongest uncaptured +- pair "
           "holds more than a quarter of E_t^2)",
           0.0)
      .add("phi_w", &S::phi_w, "0.5", "growth needs lambda_min < phi_w")
      .add("phi_g", &S::phi_g, "0.01", "pruning threshold (reported; used by directional_energy)",
           0.0)
      .choice(
          "dwell", &S::dwell_auto, "checks",
          "minimum time between growths: checks (dwell_checks) or auto (kappa/(eta D^2) ln(1/eps))",
          {{"checks", false}, {"auto", true}})
      .add("dwell_checks", &S::dwell_checks, "8", "checks between growths (dwell: checks)", 0, 1e9)
      .add(
          "patience", &S::patience, "3",
          "consecutive checks with the energy over the threshold before a growth (C comes from one "
          "batch: a single check's excess can be that batch's noise)",
          1, 1e6)
      .add("dwell_kappa", &S::dwell_kappa, "2.0", "kappa of the automatic dwell time", 0.0)
      .add("dwell_eps", &S::dwell_eps, "0.05", "eps of the automatic dwell time", 1e-12, 1.0)
      .add("dwell_max_checks", &S::dwell_max_checks, "50", "cap of the automatic dwell time", 0,
           1e9)
      .choice("init", &S::directed, "directed",
              "new head: directed (u+ in the first query column) or random",
              {{"directed", true}, {"random", false}})
      .add("value_variance", &S::value_variance, "~",
           "Var(W_V) of a new head; unset = NTK rule d_k n / (d d_v), n = sequence length", 0.0)
      .add("preserve_function", &S::preserve_function, "true",
           "new head's W_O starts at zero (the model output is unchanged by growth)")
      .add("max_heads", &S::max_heads, "0", "cap on heads per block (0 = the block's own cap)", 0,
           1e6)
      .add("k_constant", &S::k_constant, "1.0",
           "constant c of K* = c kappa_T^2 log(Gamma0/theta_w)", 0.0)
      .add("head_cost", &S::head_cost, "0.1",
           "cost per head in the Lyapunov functional W_t, in units of theta_w", 0.0)
      .add("release_direction", &S::release_direction, "true",
           "when a head is pruned, free its birth direction in Q (unless the prune says otherwise)")
      .add("lyapunov_guard", &S::lyapunov_guard, "true",
           "grow only when lambda_max > theta_w (1 + head_cost), so every growth lowers W_t");
}

}  // namespace

const IncrtTable& IncrtSettings::table() {
  static const IncrtTable built = [] {
    IncrtTable t;
    round_options(t);
    round_test_options(t);
    learning_options(t);
    tracker_options(t);
    growth_options(t);
    return t;
  }();
  return built;
}

}  // namespace gf::incrt::policy
