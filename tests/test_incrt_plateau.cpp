// The learning rule's plateau rounds (`plateau`, 0.1 by default): while the probe loss still sits
// where it started, a round grows every `plateau` of the run (two at most, within the first half
// of the growth window), trained in full; at the learning onset the newest goes on trial in place
// of a new round (a second one must pay by the window's end: `plateau_unpaid`); a window that
// ends before their trial began takes them all back (`no_onset`). On
// constructed probe sequences, and in a real run whose loss cannot leave chance (lr 1e-9),
// resumed bit for bit from a cut between the plateau rounds. Beside them, the solved floor: no
// round grows once the probe loss is under 5 % of the run's first.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <growformer/incrt/round_rules.hpp>

#include "incrt_probes.hpp"
#include "structure_edits_testing.hpp"
#include "testing.hpp"

using gf::incrt::LearningState;
using gf::incrt::ProbeReading;
using gf::incrt::RoundDecision;
using gf::incrt::RoundOptions;
using K = RoundDecision::Kind;
using Heads = std::vector<std::pair<size_t, long>>;

namespace {

constexpr size_t kTotal = 1000;  // window end 600; plateau rounds until 300 (its half)

ProbeReading probe(size_t step, double loss, double share = 0.0, double t = 0.0) {
  return gf_test::probe_at(step, kTotal, loss, share, t);
}

/// At chance (2.48, wobbling by 0.01) from step 10 to LAST, growing what the rule asks for: each
/// plateau round's heads are told as the criterion tells them (round 1: head 1; round 2: heads
/// 2, 3). Returns the steps of the decisions other than None.
std::vector<std::pair<size_t, K>> flat(LearningState& s, const RoundOptions& o, size_t last) {
  std::vector<std::pair<size_t, K>> out;
  for (size_t step = 10; step <= last; step += 10) {
    const RoundDecision d = s.observe(probe(step, 2.48 + 0.01 * std::sin(double(step))), o);
    if (d.kind == K::None) continue;
    out.push_back({step, d.kind});
    if (d.kind == K::Grow) {
      CHECK(std::string(d.evidence) == "plateau");
      const size_t before = s.rounds;
      s.grown(before == 0 ? 1 : 2, d.settled, step);
      s.round = before == 0 ? Heads{{0, 1}} : Heads{{0, 2}, {0, 3}};
    }
  }
  return out;
}

}  // namespace

TEST_CASE(
    "incrt plateau: at chance two rounds grow, untried, and a window with no onset takes both "
    "back; plateau 0 grows nothing") {
  const RoundOptions o;
  REQUIRE(o.plateau == doctest::Approx(0.1));
  LearningState s;
  // the first probe (10) starts the plateau; a round 100 steps (0.1 x 1000) later, the next
  // 100 after it; no third (two at most)
  const auto grown = flat(s, o, 600);
  REQUIRE(grown.size() == 2);
  CHECK(grown[0] == std::make_pair(size_t(110), K::Grow));
  CHECK(grown[1] == std::make_pair(size_t(210), K::Grow));
  // the plateau rounds are trained in full: not on trial, not muted, not probed without
  CHECK(s.phase == LearningState::WarmUp);
  CHECK(!s.waiting());
  CHECK(s.plateau_rounds == 2);
  CHECK(s.round == Heads{{0, 2}, {0, 3}});
  CHECK(s.past == Heads{{0, 1}});
  // the window ends (610 > 600) with the loss where it started: both rounds go, every head named
  const RoundDecision d = s.observe(probe(610, 2.48), o);
  CHECK(d.kind == K::Reject);
  CHECK(std::string(d.evidence) == "no_onset");
  CHECK(d.heads == Heads{{0, 2}, {0, 3}, {0, 1}});
  CHECK(s.rejected == 2);
  CHECK(s.rounds == 2);
  CHECK(s.plateau_grown == 2);
  CHECK(s.phase == LearningState::Stopped);
  CHECK(s.round.empty());
  CHECK(s.past.empty());

  // the rule of 37f457f: nothing grows on the plateau, growth stops at the window's end
  RoundOptions off;
  off.plateau = 0.0;
  LearningState n;
  const auto none = flat(n, off, 700);
  REQUIRE(none.size() == 1);
  CHECK(none[0] == std::make_pair(size_t(610), K::Stop));
  CHECK(n.rounds == 0);
}

TEST_CASE("incrt plateau: no round after half the growth window; none after the onset") {
  SUBCASE("a plateau of 0.25: one round at 260, the next would fall after 300") {
    RoundOptions o;
    o.plateau = 0.25;
    LearningState s;
    const auto grown = flat(s, o, 600);
    REQUIRE(grown.size() == 1);
    CHECK(grown[0] == std::make_pair(size_t(260), K::Grow));
  }
  SUBCASE("learning at once: the onset's round, as before; no plateau round later") {
    const RoundOptions o;
    LearningState s;
    s.observe(probe(10, 2.0), o);
    const RoundDecision d = s.observe(probe(20, 1.8), o);
    REQUIRE(d.kind == K::Grow);
    CHECK(std::string(d.evidence).empty());
    s.grown(1, 1.8, 20);
    CHECK(s.phase == LearningState::Trial);
    CHECK(s.plateau_rounds == 0);
    // a flat loss afterwards is not a plateau (the onset came): the round waits, nothing grows
    for (size_t step = 30; step <= 590; step += 10)
      CHECK(s.observe(probe(step, 1.8, 0.0, 0.0), o).kind == K::None);
    CHECK(s.plateau_grown == 0);
  }
}

TEST_CASE(
    "incrt plateau: at the onset the newest plateau round goes on trial; grown without proof, "
    "it must pay before another grows") {
  const RoundOptions o;
  LearningState s;
  REQUIRE(flat(s, o, 250).size() == 2);
  // the onset: 2.30 is 7 % under the first probe (2.48 + 0.01 sin 10)
  const RoundDecision at = s.observe(probe(260, 2.30), o);
  CHECK(at.kind == K::None);  // no new round: the newest plateau round is the onset's
  CHECK(s.onset == 250);
  CHECK(s.phase == LearningState::Trial);
  CHECK(s.waiting());
  CHECK(s.on_promise);
  CHECK(s.round == Heads{{0, 2}, {0, 3}});
  CHECK(s.round_step == 210);  // its age counts from its growth
  CHECK(s.past == Heads{{0, 1}});
  SUBCASE("a promising share does not grow the next round") {
    // 2 % at t 1.5: positive, its bound 2 + 2 x 1.33 % reaches 1 %, the loss falling; mature
    // from 460 (210 + the onset, 250) on; but a round grown without proof must pay
    double loss = 2.2;
    for (size_t step = 270; step <= 590; step += 10, loss *= 0.97)
      CHECK(s.observe(probe(step, loss, 0.02, 1.5), o).kind == K::None);
  }
  SUBCASE("unpaid at the window's end: the second plateau round goes, the first stays") {
    // 0.5 % at t 50: under min_share, never paid; neither shown useless (young until 460)
    for (size_t step = 270; step <= 600; step += 10)
      REQUIRE(s.observe(probe(step, 2.0, 0.005, 50.0), o).kind == K::None);
    const RoundDecision d = s.observe(probe(610, 2.0, 0.005, 50.0), o);
    CHECK(d.kind == K::Reject);
    CHECK(std::string(d.evidence) == "plateau_unpaid");
    CHECK(d.heads.empty());  // the waiting round's heads (2, 3): the criterion's snapshot
    CHECK(s.rejected == 1);
    CHECK(s.phase == LearningState::Stopped);
    CHECK(s.past == Heads{{0, 1}});  // the first plateau round, remembered
    CHECK(!s.plateau_trial);
  }
  SUBCASE("a share that pays grows the next round once mature, on trial as usual") {
    size_t step = 270;
    RoundDecision d;
    for (;; step += 10) {
      d = s.observe(probe(step, 2.0, 0.05, 10.0), o);
      if (d.kind != K::None) break;
      // paid from its third probe (290: 5 % at t 10), young until 460 (210 + the onset, 250)
      CHECK(std::string(d.evidence) == (step >= 290 ? "paid_young" : ""));
    }
    CHECK(step == 460);
    CHECK(d.kind == K::Grow);
    CHECK(std::string(d.evidence) == "paid");
    s.grown(4, 2.0, step);
    CHECK(s.phase == LearningState::Trial);
    CHECK(!s.on_promise);  // grown on a paid round
    CHECK(s.past == Heads{{0, 1}, {0, 2}, {0, 3}});
    CHECK(s.plateau_rounds == 0);
  }
}

TEST_CASE(
    "incrt plateau, share_from twin: the twin is asked for from each plateau round's growth, "
    "without the newest, so the round that goes on trial at the onset is read against the model "
    "that never grew it") {
  for (const bool twin : {false, true}) {
    CAPTURE(twin);
    RoundOptions o;
    o.twin = twin;
    gf::incrt::LearningRule rule(o);
    LearningState& s = rule.state();
    CHECK(!rule.keeps_twin());
    for (size_t step = 10; step <= 250; step += 10) {
      const RoundDecision d = s.observe(probe(step, 2.48 + 0.01 * std::sin(double(step))), o);
      if (d.kind == K::Grow) {
        const size_t before = s.rounds;
        s.grown(before == 0 ? 1 : 2, d.settled, step);
        s.round = before == 0 ? Heads{{0, 1}} : Heads{{0, 2}, {0, 3}};
      }
      // no twin before the first plateau round (110); from it on, one without the newest
      CHECK(rule.keeps_twin() == (twin && step >= 110));
      if (rule.keeps_twin()) CHECK(s.round == (step < 210 ? Heads{{0, 1}} : Heads{{0, 2}, {0, 3}}));
      CHECK(!rule.waiting());  // trained in full: not on trial
    }
    // the onset: the newest plateau round goes on trial, its twin kept (the same heads)
    s.observe(probe(260, 2.30), o);
    REQUIRE(s.phase == LearningState::Trial);
    CHECK(rule.keeps_twin() == twin);
    CHECK(s.round == Heads{{0, 2}, {0, 3}});
    // a window with no onset takes every plateau round back: no twin after
    s = LearningState();
    REQUIRE(flat(s, o, 600).size() == 2);
    CHECK(rule.keeps_twin() == twin);
    CHECK(s.observe(probe(610, 2.48), o).kind == K::Reject);
    CHECK(!rule.keeps_twin());
  }
}

TEST_CASE(
    "incrt plateau: a lone plateau round is judged as an onset round; an onset only at the "
    "window's end is none") {
  SUBCASE("one plateau round (plateau 0.25), unpaid and not shown useless: kept") {
    RoundOptions o;
    o.plateau = 0.25;
    LearningState s;
    REQUIRE(flat(s, o, 270).size() == 1);  // head 1 at 260
    CHECK(s.observe(probe(280, 2.30), o).kind == K::None);
    CHECK(s.phase == LearningState::Trial);
    CHECK(!s.plateau_trial);
    // 0.5 % at t 1: its bound, 1.5 %, reaches min_share; mature (350 steps old, the onset 270)
    for (size_t step = 290; step <= 600; step += 10)
      REQUIRE(s.observe(probe(step, 2.0, 0.005, 1.0), o).kind == K::None);
    const RoundDecision d = s.observe(probe(610, 2.0, 0.005, 1.0), o);
    CHECK(d.kind == K::Keep);
    CHECK(std::string(d.evidence) == "not_shown_useless");
    CHECK(s.rejected == 0);
  }
  SUBCASE("the loss leaves its first value at the probe past the window's end: no_onset") {
    const RoundOptions o;
    LearningState s;
    REQUIRE(flat(s, o, 600).size() == 2);
    const RoundDecision d = s.observe(probe(610, 2.30), o);
    CHECK(d.kind == K::Reject);
    CHECK(std::string(d.evidence) == "no_onset");
    CHECK(d.heads.size() == 3);
  }
}

TEST_CASE(
    "incrt solved floor: under 5 % of the run's first probe loss a paid round grows no other, and "
    "shares are of that loss") {
  const RoundOptions o;  // loss_floor 0.05
  LearningState s;
  s.observe(probe(10, 2.4), o);  // chance: the floor is 0.05 x 2.4 = 0.12 (over loss_floor)
  REQUIRE(s.observe(probe(20, 2.0), o).kind == K::Grow);
  s.grown(1, 2.0, 20);
  s.round = {{0, 1}};
  SUBCASE("a loss of 0.1: the round pays, growth stops") {
    // muting costs 6 % of 0.1 (0.006) at t 10: a share of 0.006 / 0.12 = 5 %, still paid
    RoundDecision d;
    for (size_t step : {30, 40, 50}) d = s.observe(probe(step, 0.1, 0.06, 10.0), o);
    CHECK(d.kind == K::Stop);
    CHECK(std::string(d.evidence) == "paid");
    CHECK(d.share == doctest::Approx(0.006 / 0.12));
    CHECK(s.phase == LearningState::Stopped);
  }
  SUBCASE("a loss of 0.2: the round pays and the next grows, shares of the loss itself") {
    RoundDecision d;
    for (size_t step : {30, 40, 50}) d = s.observe(probe(step, 0.2, 0.06, 10.0), o);
    CHECK(d.kind == K::Grow);
    CHECK(d.share == doctest::Approx(0.06));
  }
}

TEST_CASE("incrt plateau: a state saved between the plateau rounds decides the same") {
  const RoundOptions o;
  LearningState a;
  REQUIRE(flat(a, o, 150).size() == 1);
  std::ostringstream os;
  a.save(os);
  LearningState b;
  {
    gf::state::Reader r(os.str(), "test");
    r.expect("learning");
    b.load_fields(r);
  }
  std::ostringstream again;
  b.save(again);
  CHECK(again.str() == os.str());
  CHECK(b.plateau_rounds == 1);
  CHECK(b.plateau_grown == 1);
  for (size_t step = 160; step <= 700; step += 10) {
    const ProbeReading p = probe(step, 2.48 + 0.01 * std::sin(double(step)));
    const RoundDecision da = a.observe(p, o), db = b.observe(p, o);
    CHECK(da.kind == db.kind);
    CHECK(da.heads == db.heads);
    if (da.kind == K::Grow) {
      a.grown(2, da.settled, step);
      b.grown(2, db.settled, step);
      a.round = b.round = Heads{{0, 2}, {0, 3}};
    }
  }
  CHECK(a.rejected == 2);
  CHECK(b.rejected == 2);
}

TEST_CASE(
    "incrt plateau in a run: a loss that cannot leave chance grows two plateau rounds and takes "
    "them back by name at the window's end; resumed bit for bit") {
  // lr 1e-9: the probe loss stays at its first value, so the warm-up never sees the onset
  const std::string yaml = R"(name: plateau_run
seed: 3
threads: 2
data: {plugin: listops, train_size: 256, val_size: 64, test_size: 64, min_length: 4,
       max_length: 24, max_depth: 3, max_args: 4}
model:
  d_model: 16
  layers: 1
  mlp_ratio: 1
  max_len: 32
  attention: {plugin: mha, heads: 1, d_k: 4, max_heads: 16}
growth: {plugin: incrt_geometric, probe_examples: 64}
optimizer: {plugin: adamw, lr: 0.000000001}
train: {steps: 200, batch_size: 16, warmup: 5, eval_every: 20, log_every: 20, check_every: 5}
)";
  using json = nlohmann::json;
  const std::string full = gf_test::fresh_dir("plateau", "full"),
                    cut = gf_test::fresh_dir("plateau", "cut");
  REQUIRE(gf_test::train_yaml(yaml, "plateau.yaml", full) == 0);
  const std::vector<json> ev = gf_test::events_of(full);
  std::vector<long> grown, grown_at, pruned;
  long rejected_at = -1;
  for (const json& e : ev) {
    const std::string type = e.value("type", "");
    if (type == "grow") {
      CHECK(e.value("evidence", "") == "plateau");
      grown.push_back(e["head"].get<long>());
      grown_at.push_back(e["step"].get<long>());
    }
    if (type == "prune") {
      CHECK(e.value("evidence", "") == "no_onset");
      pruned.push_back(e["head"].get<long>());
    }
    if (type == "round_rejected") {
      CHECK(e.value("evidence", "") == "no_onset");
      CHECK(e.value("stage", "") == "window_end");
      CHECK(e["heads_removed"].get<double>() == 3.0);
      rejected_at = e["step"].get<long>();
    }
  }
  REQUIRE(grown == std::vector<long>{1, 2, 3});  // 1 -> 2 -> 4 heads
  CHECK(grown_at[1] == grown_at[2]);
  CHECK(grown_at[0] >= 0.1 * 200);
  CHECK(grown_at[1] - grown_at[0] >= 0.1 * 200);
  CHECK(grown_at[1] <= 0.3 * 200);
  CHECK(rejected_at > 0.6 * 200);
  CHECK(rejected_at <= 0.6 * 200 + 20);
  std::sort(pruned.begin(), pruned.end());
  CHECK(pruned == std::vector<long>{1, 2, 3});  // every plateau head, not the start's head 0
  // back at the structure the configuration builds: the resolved config holds no grown record
  CHECK(gf_test::text_of(full + "/config.resolved.yaml").find("final_heads") == std::string::npos);
  // cut between the two plateau rounds, resumed
  const long at = grown_at[0] + 5;
  REQUIRE(at < grown_at[1]);
  REQUIRE(gf_test::train_yaml(yaml, "plateau.yaml", cut, at) == 0);
  REQUIRE(gf_test::resume_run(cut) == 0);
  gf_test::check_same_last_checkpoints(full, cut);
  CHECK(gf_test::text_of(full + "/events.jsonl") == gf_test::text_of(cut + "/events.jsonl"));
  std::filesystem::remove_all(full);
  std::filesystem::remove_all(cut);
}
