// The signal-driven structure rules (plugins/growth_structure): depth_plateau inserts a block
// at a plateau of the validation probe's loss and stops after blocks that brought no gain;
// mlp_onset widens every MLP by a factor until the training loss starts to fall; mlp_magnitude
// prunes MLP units of small weight norms; block_ablation removes a block whose leaving-out costs
// the probe little. Each against a constructed sequence of losses (or ablations), through the
// structure editor on a real model; their state carried through save and load; and in runs that
// resume bit for bit.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "growformer/checkpoint.hpp"
#include "growformer/model.hpp"
#include "growformer/structure_editor.hpp"
#include "growformer/trainer.hpp"
#include "structure_edits_testing.hpp"
#include "testing.hpp"

using namespace gf;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace gf_test;

namespace {

bool have(const char* rule) {
  if (registry().find(Kind::Growth, rule) && registry().find(Kind::Attention, "mha")) return true;
  MESSAGE(rule << " or mha not built: skipped");
  return false;
}

std::shared_ptr<GrowthPolicy> rule(const std::string& yaml) {
  return registry().create_growth(ConfigNode::load_string(yaml, "growth.yaml"));
}

/// A rule over MODEL through the structure editor, fed the metrics the test sets.
struct Bench {
  std::shared_ptr<GrowthPolicy> policy;
  Model& model;
  Rng rng{9, 9};
  Recorder events;
  RunMetrics metrics;
  StructureEditor editor;
  Bench(std::shared_ptr<GrowthPolicy> p, Model& m, size_t total_steps)
      : policy(std::move(p)),
        model(m),
        editor(m.blocks(), {{policy.get(), &rng, "growth", "rule"}}, &events, total_steps) {
    editor.set_model(&model, nullptr);
    editor.set_metrics(&metrics);
  }
  /// One check at STEP with the probe's loss (depth) or the training loss (width) LOSS.
  std::vector<Edit> check(size_t step, double loss) {
    metrics.probe_loss = loss;
    metrics.train_loss = loss;
    return editor.check(step);
  }
  /// The decision of the last "check" event of the rule ("" when none).
  std::string stopped_for() const {
    for (auto it = events.events.rbegin(); it != events.events.rend(); ++it) {
      if (it->type != "check") continue;
      for (const auto& [k, v] : it->strings)
        if (k == "evidence") return v;
    }
    return "";
  }
};

}  // namespace

TEST_CASE(
    "depth_plateau: a block goes before the first at a plateau of the probe's loss; growth "
    "stops after `misses` blocks in a row brought no gain") {
  if (!have("depth_plateau")) return;
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
  AttentionBlock* trained = model->blocks()[0];
  Bench b(rule("plugin: depth_plateau\npatience: 2\nmin_gain: 0.1\nmisses: 2\nprobe: 16\n"), *model,
          1000);
  CHECK(b.policy->validation_probe(10) == 16);
  CHECK(b.check(10, 1.00).empty());  // the first loss: the best so far
  CHECK(b.check(20, 0.85).empty());  // 15 % lower: progress
  CHECK(b.check(30, 0.84).empty());  // under 10 %: one check without progress
  auto e = b.check(40, 0.83);        // two: a plateau
  REQUIRE(e.size() == 1);
  CHECK(e[0].kind == Edit::Kind::InsertBlock);
  CHECK(e[0].block == 0);
  REQUIRE(model->blocks().size() == 2);
  CHECK(model->blocks()[1] == trained);  // the trained block stays on top
  CHECK(b.check(50, 0.70).empty());      // the new block brought a gain
  CHECK(b.check(60, 0.70).empty());
  CHECK(b.check(70, 0.70).size() == 1);  // the next plateau: a third block
  CHECK(b.check(80, 0.70).empty());
  CHECK(b.check(90, 0.70).size() == 1);  // a plateau, the third block without gain: one miss
  CHECK(model->blocks().size() == 4);
  CHECK(b.check(100, 0.70).empty());
  CHECK(b.check(110, 0.70).empty());  // the fourth without gain: two misses, growth ends
  CHECK(b.stopped_for() == "no gain since the last blocks inserted");
  CHECK(b.policy->validation_probe(120) == 0);  // no probe once stopped
  for (size_t step = 120; step <= 200; step += 10) CHECK(b.check(step, 0.70).empty());
  CHECK(model->blocks().size() == 4);
  const auto s = b.policy->summary(b.editor.view(200, 0));
  CHECK(s.at("blocks") == 4);
  CHECK(s.at("blocks_inserted") == 3);
  CHECK(s.at("stopped_at") == 110);
}

namespace {
/// A policy that asks for the heads it holds to sit out a share of every training batch.
struct PartMuter : GrowthPolicy {
  ExampleMute mute;
  std::vector<Edit> check(const TrainView&) override { return {}; }
  ExampleMute muted_on_examples(size_t) const override { return mute; }
};
}  // namespace

TEST_CASE(
    "muted on part of a batch: the editor gathers the heads, the model marks that share of the "
    "whole batch's rows, moving with the step; unmute clears them; whole blocks, unknown heads "
    "and shares outside [0, 1] are refused") {
  if (!have("depth_plateau")) return;
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
  const std::vector<HeadInfo> hs = model->blocks()[0]->heads();
  auto p = std::make_shared<PartMuter>();
  p->mute = {{{0, hs[1].id}, {0, hs[1].id}}, 0.5};
  Rng rng{1, 1};
  Recorder events;
  StructureEditor editor(model->blocks(), {{p.get(), &rng, "growth", "part"}}, &events, 100);
  const GrowthPolicy::ExampleMute half = editor.muted_on_examples(3);
  REQUIRE(half.heads.size() == 1);  // each once
  CHECK(half.share == 0.5);
  // a process holding rows 5..8 of the whole batch, at step 3: rows r with r + 3 odd (6 and 8)
  mute_examples_in_model(*model, half, 3, 5, 4);
  AttentionBlock* b = model->blocks()[0];
  CHECK(b->part_muted() == std::vector<int>{hs[1].id});
  CHECK(b->part_examples() == std::vector<uint8_t>{0, 1, 0, 1});
  mute_examples_in_model(*model, half, 4, 0, 3);  // step 4, a whole batch: row 1
  CHECK(b->part_examples() == std::vector<uint8_t>{0, 1, 0});
  // a quarter: one row in every four consecutive ones, moving with the step
  mute_examples_in_model(*model, {half.heads, 0.25}, 0, 0, 8);
  CHECK(b->part_examples() == std::vector<uint8_t>{0, 0, 0, 1, 0, 0, 0, 1});
  mute_examples_in_model(*model, {half.heads, 0.25}, 1, 0, 8);
  CHECK(b->part_examples() == std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 1, 0});
  unmute_model(*model);
  CHECK(b->part_muted().empty());
  CHECK(b->part_examples().empty());
  CHECK(runtime_error_of([&] {
          mute_examples_in_model(*model, {{{0, HeadRef::kWholeBlock}}, 0.5}, 1, 0, 2);
        }).find("only heads can sit out on part of a batch") != std::string::npos);
  p->mute = {{{0, 999}}, 0.5};
  CHECK(runtime_error_of([&] { editor.muted_on_examples(1); }).find("999") != std::string::npos);
  p->mute = {{{0, hs[1].id}}, 1.5};
  CHECK(runtime_error_of([&] { editor.muted_on_examples(1); }).find("share 1.5") !=
        std::string::npos);
}

namespace {
/// A policy that asks for a twin of the model without the heads it holds.
struct TwinAsker : GrowthPolicy {
  std::vector<HeadRef> without;
  std::vector<Edit> check(const TrainView&) override { return {}; }
  std::vector<HeadRef> twin_without(size_t) const override { return without; }
};
}  // namespace

TEST_CASE(
    "twin_without: the editor gathers every policy's heads, each once and in order; whole "
    "blocks and heads no block holds are refused, naming the policy") {
  auto model = make_model("{plugin: mha, heads: 4, head: {plugin: dot_product}}", 1);
  const std::vector<HeadInfo> hs = model->blocks()[0]->heads();
  auto a = std::make_shared<TwinAsker>();
  auto b = std::make_shared<TwinAsker>();
  a->without = {{0, hs[2].id}, {0, hs[1].id}};
  b->without = {{0, hs[1].id}};
  Rng ra{1, 1}, rb{1, 2};
  Recorder events;
  StructureEditor editor(model->blocks(),
                         {{a.get(), &ra, "growth", "asker"}, {b.get(), &rb, "pruning", "other"}},
                         &events, 100);
  CHECK(editor.twin_without(10) == std::vector<HeadRef>{{0, hs[1].id}, {0, hs[2].id}});
  a->without.clear();
  b->without.clear();
  CHECK(editor.twin_without(20).empty());
  a->without = {{0, HeadRef::kWholeBlock}};
  const std::string whole = runtime_error_of([&] { editor.twin_without(30); });
  CHECK(whole.find("the growth policy `asker` asked to keep a twin without the whole block 0") !=
        std::string::npos);
  a->without = {{0, 999}};
  CHECK(runtime_error_of([&] { editor.twin_without(30); }).find("head 999 of block 0") !=
        std::string::npos);
  // a policy finds the twin's probe by the heads it lacks, in any order
  RunMetrics m;
  CHECK(m.twin_without({{0, hs[1].id}}) == nullptr);  // no twin
  m.twin.heads = {{0, hs[1].id}, {0, hs[2].id}};
  CHECK(m.twin_without({{0, hs[2].id}, {0, hs[1].id}}) == &m.twin);
  CHECK(m.twin_without({{0, hs[1].id}}) == nullptr);
}

TEST_CASE("depth_plateau: max_blocks, the window, index -1 and a resumed state") {
  if (!have("depth_plateau")) return;
  SUBCASE("at max_blocks it stops, saying so") {
    auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
    Bench b(rule("plugin: depth_plateau\npatience: 1\nmisses: 0\nmax_blocks: 3\nindex: -1\n"),
            *model, 1000);
    AttentionBlock* first = model->blocks()[0];
    b.check(10, 1.0);
    b.check(20, 0.5);
    REQUIRE(b.check(30, 0.5).size() == 1);
    CHECK(model->blocks()[0] == first);  // index -1: after the last
    CHECK(b.check(40, 0.5).size() == 1);
    CHECK(b.check(50, 0.5).empty());
    CHECK(model->blocks().size() == 3);
    CHECK(b.stopped_for() == "max_blocks");
  }
  SUBCASE("after `until` of the budget no block is inserted") {
    auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
    Bench b(rule("plugin: depth_plateau\npatience: 1\nuntil: 0.5\n"), *model, 100);
    b.check(40, 1.0);
    b.check(45, 0.5);
    CHECK(b.check(60, 0.5).empty());
    CHECK(b.stopped_for() == "window");
  }
  SUBCASE("no plateau counts before the loss has fallen `onset` below its first value") {
    auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
    Bench b(rule("plugin: depth_plateau\npatience: 2\nonset: 0.1\n"), *model, 1000);
    // ten checks on a flat loss near its start: without the onset, a plateau at the third
    for (size_t step = 10; step <= 100; step += 10)
      CHECK(b.check(step, 0.99 + 0.01 * (step % 20 == 0)).empty());
    CHECK(b.check(110, 0.85).empty());  // 15 % under the first: learning; one check of progress
    CHECK(b.check(120, 0.85).empty());
    CHECK(b.check(130, 0.85).size() == 1);
  }
  SUBCASE("a state saved mid-run and loaded makes the same decisions") {
    const std::string yaml = "plugin: depth_plateau\npatience: 2\nmin_gain: 0.1\n";
    const std::vector<double> losses = {1.0, 0.8, 0.8, 0.8, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6};
    auto run = [&](size_t cut) {
      auto p = rule(yaml);
      std::string trace;
      TrainView v;
      v.total_steps = 1000;
      v.blocks.resize(1);
      for (size_t i = 0; i < losses.size(); ++i) {
        if (i == cut) {
          auto q = rule(yaml);
          q->load_state(p->save_state());
          p = q;
        }
        v.step = 10 * (i + 1);
        v.metrics.probe_loss = losses[i];
        for (const Edit& e : p->check(v)) {
          trace += std::to_string(v.step) + " ";
          v.blocks.resize(v.blocks.size() + 1);
          p->edited(e, -1, v);
        }
      }
      return trace + p->save_state();
    };
    const std::string whole = run(losses.size());
    CHECK(whole.rfind("40 70 ", 0) == 0);
    for (size_t cut : {1, 3, 4, 6, 9}) CHECK(run(cut) == whole);
  }
}

TEST_CASE(
    "mlp_onset: every MLP widened by the factor up to max_units while the training loss has "
    "not started to fall; the onset, the cap and the window end growth") {
  if (!have("mlp_onset")) return;
  const std::string mha = "{plugin: mha, heads: 2, head: {plugin: dot_product}}";
  SUBCASE("to the cap") {
    auto model = make_model(mha, 2);  // MLPs of 16 units
    Bench b(rule("plugin: mlp_onset\nfactor: 4\nmax_units: 100\n"), *model, 1000);
    const auto e = b.check(10, 2.0);  // the first loss: the reference
    REQUIRE(e.size() == 2);
    CHECK(e[0].kind == Edit::Kind::AddMlpUnits);
    CHECK(e[0].units == 48);
    CHECK(model->mlp_widths() == std::vector<size_t>{64, 64});
    CHECK(b.check(20, 1.92).size() == 2);  // 4 % under the first: not yet the onset
    CHECK(model->mlp_widths() == std::vector<size_t>{100, 100});
    CHECK(b.check(30, 1.92).empty());
    CHECK(b.stopped_for() == "cap");
    const auto s = b.policy->summary(b.editor.view(30, 0));
    CHECK(s.at("units_added") == 168);
    CHECK(s.at("mlp_width_max") == 100);
    CHECK(s.at("stopped_at") == 30);
  }
  SUBCASE("the onset") {
    auto model = make_model(mha, 1);
    Bench b(rule("plugin: mlp_onset\nfactor: 2\n"), *model, 1000);
    CHECK(b.check(10, 2.0).size() == 1);
    CHECK(b.check(20, 1.89).empty());  // 5.5 % under the first
    CHECK(b.stopped_for() == "onset");
    CHECK(b.check(30, 2.5).empty());  // for good
    CHECK(model->mlp_widths() == std::vector<size_t>{32});
  }
  SUBCASE("the window") {
    auto model = make_model(mha, 1);
    Bench b(rule("plugin: mlp_onset\nuntil: 0.1\n"), *model, 100);
    CHECK(b.check(10, 2.0).size() == 1);
    CHECK(b.check(20, 2.0).empty());
    CHECK(b.stopped_for() == "window");
    CHECK(model->mlp_widths() == std::vector<size_t>{64});
  }
  SUBCASE("a state saved and loaded keeps the reference loss") {
    auto model = make_model(mha, 1);
    auto p = rule("plugin: mlp_onset\nfactor: 2\n");
    Bench b(p, *model, 1000);
    b.check(10, 2.0);
    auto q = rule("plugin: mlp_onset\nfactor: 2\n");
    q->load_state(p->save_state());
    CHECK(q->save_state() == p->save_state());
    TrainView v = b.editor.view(20, 0);
    v.metrics.train_loss = 1.89;  // the onset against the first loss 2.0, not against 1.89
    CHECK(q->check(v).empty());
    CHECK(q->save_state().find(" 1 20 ") != std::string::npos);  // done, stopped at 20
  }
}

namespace {

std::string run_config(const std::string& growth) {
  return R"(name: grow_rules
seed: 5
threads: 2
data:
  plugin: listops
  train_size: 256
  val_size: 64
  test_size: 64
  min_length: 4
  max_length: 24
  max_depth: 3
  max_args: 4
model:
  d_model: 16
  layers: 1
  mlp_ratio: 1
  max_len: 32
  attention: {plugin: mha, heads: 2}
growth: )" +
         growth + R"(
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 30
  batch_size: 16
  warmup: 5
  eval_every: 10
  log_every: 5
  check_every: 5
)";
}

std::string fresh_dir(const std::string& name) { return gf_test::fresh_dir("rules", name); }

int train(const std::string& growth, const std::string& dir, long stop_after = -1) {
  return train_yaml(run_config(growth), "grow_rules.yaml", dir, stop_after);
}

}  // namespace

TEST_CASE("both rules in a run: their edits and decisions logged, resumed bit for bit") {
  if (!have("depth_plateau") || !have("mlp_onset")) return;
  struct Case {
    std::string growth;
    long cut;
    std::string last_edit_key;  // what the final structure record names
  };
  // min_gain 1 and onset 0 / onset 1: the losses never count as progress, every plateau counts
  // (depth) and the onset never comes (width), so the rules grow at every chance: blocks at
  // steps 10 and 15 and a stop at 20; widths 16 -> 32 -> 40 and a stop at the cap
  for (const Case& c :
       {Case{"{plugin: depth_plateau, patience: 1, min_gain: 1, onset: 0, probe: 32}", 12,
             "#   blocks: 3"},
        Case{"{plugin: mlp_onset, factor: 2, max_units: 40, onset: 1, until: 1}", 7,
             "#   mlp_widths: [40]"}}) {
    INFO(c.growth);
    const std::string full = fresh_dir("full"), cut = fresh_dir("cut");
    REQUIRE(train(c.growth, full) == 0);
    REQUIRE(train(c.growth, cut, c.cut) == 0);
    REQUIRE(resume_run(cut) == 0);
    check_same_last_checkpoints(full, cut);
    CHECK(text_of(full + "/events.jsonl") == text_of(cut + "/events.jsonl"));
    CHECK(text_of(full + "/config.resolved.yaml").find(c.last_edit_key) != std::string::npos);
    std::vector<json> rule_events;
    std::istringstream ev(text_of(full + "/events.jsonl"));
    for (std::string line; std::getline(ev, line);)
      if (json j = json::parse(line); j.contains("rule")) rule_events.push_back(j);
    REQUIRE(rule_events.size() == 3);  // two growths, then the stop
    CHECK(rule_events[0]["type"] == "grow");
    CHECK(rule_events[0]["step"] == 10 - 5 * (c.growth.find("mlp") != std::string::npos));
    CHECK(rule_events[2]["type"] == "check");
    CHECK(rule_events[2]["decision"] == "stop growing");
    fs::remove_all(full);
    fs::remove_all(cut);
  }
}

TEST_CASE(
    "the growth admission: MLP units or a block it refuses are one growth_refused event; "
    "nothing changes and no policy hears of them") {
  if (!registry().find(Kind::Attention, "mha")) return;
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
  OncePolicy p;
  Rng rng(4, 4);
  Recorder sink;
  StructureEditor ed = editor_of(*model, p, rng, &sink);
  std::vector<Edit> asked;
  ed.set_growth_admission([&](const Edit& e) {
    asked.push_back(e);
    return e.kind == Edit::Kind::InsertBlock || e.units > 8 ? "no memory for it" : "";
  });
  Edit units;
  units.kind = Edit::Kind::AddMlpUnits;
  units.units = 9;
  Edit fewer = units;
  fewer.units = 8;
  Edit block;
  block.kind = Edit::Kind::InsertBlock;
  p.edits = {units, block, fewer};
  const std::vector<Edit> applied = ed.check(10);
  REQUIRE(applied.size() == 1);  // the 8 units
  CHECK(applied[0].units == 8);
  CHECK(asked.size() == 3);
  CHECK(model->mlp_widths() == std::vector<size_t>{24});
  CHECK(model->blocks().size() == 1);
  REQUIRE(p.heard.size() == 1);
  CHECK(p.heard[0].kind == Edit::Kind::AddMlpUnits);
  std::vector<std::string> refused;
  for (const Event& e : sink.events)
    if (e.type == "growth_refused")
      for (const auto& [k, v] : e.strings)
        if (k == "what") refused.push_back(v);
  CHECK(refused == std::vector<std::string>{"mlp_units", "block"});
  for (const Event& e : sink.events)
    if (e.type == "growth_refused")
      CHECK(std::find(e.strings.begin(), e.strings.end(),
                      std::pair<std::string, std::string>{"reason", "no memory for it"}) !=
            e.strings.end());
}

TEST_CASE("the rules' options are checked when the config is read, naming the option") {
  if (!have("depth_plateau") || !have("mlp_onset")) return;
  // the ConfigError of YAML read as a growth policy (or, with AS_PRUNING, a pruning rule)
  auto message = [](const std::string& yaml, bool as_pruning = false) {
    try {
      if (as_pruning)
        registry().create_pruning(ConfigNode::load_string(yaml, "pruning.yaml"));
      else
        rule(yaml);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no ConfigError)");
  };
  CHECK(message("plugin: depth_plateau\nindex: -1\nmisses: 0\n") == "(no ConfigError)");
  CHECK(message("plugin: depth_plateau\npatience: 0\n").find("`patience`") != std::string::npos);
  CHECK(message("plugin: depth_plateau\nindex: -2\n").find("`index`") != std::string::npos);
  CHECK(message("plugin: depth_plateau\nprobe: 0\n").find("`probe`") != std::string::npos);
  CHECK(message("plugin: depth_plateau\nmin_gain: 2\n").find("`min_gain`") != std::string::npos);
  CHECK(message("plugin: mlp_onset\nfactor: 1\n").find("`factor`") != std::string::npos);
  CHECK(message("plugin: mlp_onset\nuntil: 1.5\n").find("`until`") != std::string::npos);
  CHECK(message("plugin: mlp_onset\nsteps: 5\n").find("steps") != std::string::npos);
  if (!registry().find(Kind::Pruning, "block_ablation")) return;
  auto pruning = [&](const std::string& yaml) { return message(yaml, true); };
  CHECK(pruning("plugin: block_ablation\nmin_use: -0.5\n") == "(no ConfigError)");
  CHECK(pruning("plugin: block_ablation\nfrom: 2\n").find("`from`") != std::string::npos);
  CHECK(pruning("plugin: block_ablation\nevery: 0\n").find("`every`") != std::string::npos);
  CHECK(pruning("plugin: block_ablation\nmin_blocks: 0\n").find("`min_blocks`") !=
        std::string::npos);
}

TEST_CASE(
    "mlp_magnitude: units of small ||fc1 column|| x ||fc2 row|| are removed, the smallest first, "
    "at most max_fraction a check; none within grace of the block's growth") {
  if (!registry().find(Kind::Pruning, "mlp_magnitude") || !have("depth_plateau")) return;
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 1);
  auto prune = registry().create_pruning(ConfigNode::load_string(
      "plugin: mlp_magnitude\nthreshold: 0.05\nmax_fraction: 0.25\ngrace: 20\n", "pruning.yaml"));
  OncePolicy grow;
  Rng r1(1, 1), r2(2, 2);
  Recorder sink;
  StructureEditor ed(model->blocks(),
                     {{&grow, &r1, "growth", "scripted"}, {prune.get(), &r2, "pruning", "rule"}},
                     &sink, 1000);
  ed.set_model(model.get(), nullptr);
  // units 3, 7, 9, 11, 12 contribute nothing (their output rows zero), unit 5 a little
  Var fc2 = model->mlps()[0]->fc2_w();  // a handle on the model's parameter
  Tensor& w2 = fc2.value();
  const size_t d = model->d_model();
  for (size_t u : {3, 7, 9, 11, 12})
    for (size_t c = 0; c < d; ++c) w2[u * d + c] = 0.0f;
  for (size_t c = 0; c < d; ++c) w2[5 * d + c] *= 1e-3f;
  const Batch b = batch_of(3, 7, 11);
  const Tensor before = logits_of(*model, b);
  CHECK(ed.check(10).empty());  // within grace of the start
  const std::vector<Edit> first = ed.check(20);
  REQUIRE(first.size() == 1);
  CHECK(first[0].kind == Edit::Kind::RemoveMlpUnits);
  CHECK(first[0].unit_indices == std::vector<size_t>{3, 7, 9, 11});  // 4 = 0.25 x 16
  CHECK(model->mlp_widths() == std::vector<size_t>{12});
  CHECK(max_abs_diff(before, logits_of(*model, b)) < 1e-6);  // they added nothing
  // the next check: the zero unit 12 and the small unit 5 (now 8 and 4)
  const std::vector<Edit> second = ed.check(30);
  REQUIRE(second.size() == 1);
  CHECK(second[0].unit_indices == std::vector<size_t>{4, 8});  // units 5 and 12 before
  CHECK(model->mlp_widths() == std::vector<size_t>{10});
  // new units (zero output weights) are left alone for grace steps after the growth
  Edit add;
  add.kind = Edit::Kind::AddMlpUnits;
  add.units = 6;
  grow.edits = {add};
  CHECK(ed.check(40).size() == 1);  // the growth only
  CHECK(model->mlp_widths() == std::vector<size_t>{16});
  auto again = registry().create_pruning(
      ConfigNode::load_string("plugin: mlp_magnitude\ngrace: 20\n", "pruning.yaml"));
  again->load_state(prune->save_state());  // the growth's step carried
  CHECK(again->save_state() == prune->save_state());
  CHECK(prune->save_state().find("1 0 40 ") != std::string::npos);  // block 0 grew at 40
  CHECK(ed.check(50).empty());
  const std::vector<Edit> later = ed.check(60);
  REQUIRE(later.size() == 1);
  CHECK(later[0].unit_indices.size() == 4);
  CHECK(later[0].unit_indices.front() >= 10);  // the new ones
  CHECK(prune->summary(ed.view(60, 1)).at("units_removed") == 10);
}

TEST_CASE(
    "block_ablation: from `from` of the budget, every `every` steps, the block whose leaving-out "
    "costs the probe least is removed when under min_use; none within grace of its insertion") {
  if (!registry().find(Kind::Pruning, "block_ablation")) return;
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 3);
  const std::string yaml =
      "plugin: block_ablation\nprobe: 16\nmin_use: 0.01\nfrom: 0.5\ngrace: 0.2\nevery: 25\n";
  auto prune = registry().create_pruning(ConfigNode::load_string(yaml, "pruning.yaml"));
  OncePolicy grow;
  Rng r1(1, 1), r2(2, 2);
  Recorder sink;
  RunMetrics metrics;
  StructureEditor ed(model->blocks(),
                     {{&grow, &r1, "growth", "scripted"}, {prune.get(), &r2, "pruning", "rule"}},
                     &sink, 100);
  ed.set_model(model.get(), nullptr);
  ed.set_metrics(&metrics);
  // a check at STEP whose probe's loss is 1 and whose block B left out costs USES[B]; the sets
  // the rule asked for are returned in ASKED
  std::vector<std::vector<HeadRef>> asked;
  auto check = [&](size_t step, const std::vector<double>& uses) {
    asked = ed.probe_ablations(step);
    metrics = RunMetrics();
    metrics.probe_loss = prune->validation_probe(step) ? 1.0 : NAN;
    for (const auto& set : asked) {
      REQUIRE(set.size() == 1);
      CHECK(set[0].head == HeadRef::kWholeBlock);
      metrics.ablations.push_back(Ablation{set, 1.0 + uses.at(set[0].block), 0.0, 0.1});
    }
    return ed.check(step);
  };
  CHECK(prune->validation_probe(60) == 0);  // the budget is not known before the run starts
  ed.on_start();
  CHECK(prune->validation_probe(40) == 0);  // before `from`
  CHECK(check(40, {}).empty());
  CHECK(asked.empty());
  CHECK(prune->validation_probe(50) == 16);
  AttentionBlock* kept0 = model->blocks()[0];
  AttentionBlock* kept2 = model->blocks()[2];
  const std::vector<Edit> first = check(50, {0.2, -0.01, 0.005});
  CHECK(asked.size() == 3);  // every block, each alone
  REQUIRE(first.size() == 1);
  CHECK(first[0].kind == Edit::Kind::RemoveBlock);
  CHECK(first[0].block == 1);  // the least use (-1 %: the probe was better without it)
  CHECK(model->blocks() == std::vector<AttentionBlock*>{kept0, kept2});
  CHECK(prune->validation_probe(60) == 0);  // `every` 25 steps between judgments
  CHECK(check(60, {}).empty());
  // block 1 (0.5 %) is under min_use, but one block a judgment: at the next, 75
  CHECK(check(75, {0.2, 0.005}).size() == 1);
  CHECK(model->blocks() == std::vector<AttentionBlock*>{kept0});
  // min_blocks 1: a one-block model is never judged, and no probe is asked for it
  CHECK(check(100, {}).empty());
  CHECK(asked.empty());
  CHECK(prune->validation_probe(125) == 0);
  // a block inserted at 100 is not judged within grace (0.2 x 100 steps) of its insertion
  grow.edits = {block_edit(Edit::Kind::InsertBlock, 0)};
  metrics = RunMetrics();  // no probe at this check
  CHECK(ed.check(100).size() == 1);
  REQUIRE(model->blocks().size() == 2);
  CHECK(check(110, {0.5, 0.5}).empty());
  CHECK(asked == std::vector<std::vector<HeadRef>>{{HeadRef{1, HeadRef::kWholeBlock}}});
  auto again = registry().create_pruning(ConfigNode::load_string(yaml, "pruning.yaml"));
  again->load_state(prune->save_state());  // the insertion's step and the last judgment carried
  CHECK(again->save_state() == prune->save_state());
  CHECK(again->probe_ablations(ed.view(134, 1)).empty());      // `every`: not before 135
  CHECK(again->probe_ablations(ed.view(135, 1)).size() == 2);  // grace over at 120
  const std::vector<Edit> last = check(135, {0.004, 0.5});
  REQUIRE(last.size() == 1);
  CHECK(last[0].block == 0);  // the new block, unused
  CHECK(prune->summary(ed.view(135, 1)).at("blocks_removed") == 3);
  double use = NAN;
  for (const auto& [k, v] : last[0].cause.numbers)
    if (k == "use") use = v;
  CHECK(use == doctest::Approx(0.004));
}

TEST_CASE(
    "block_ablation in a run: the trainer leaves each block out of the probe; resumed bit "
    "for bit") {
  if (!registry().find(Kind::Pruning, "block_ablation") || !have("depth_plateau")) return;
  // min_use 1e9: every judgment removes the block of least use, from 3 blocks to 1
  std::string yaml = run_config("{plugin: none}");
  yaml.replace(yaml.find("layers: 1"), 9, "layers: 3");
  yaml +=
      "pruning: {plugin: block_ablation, from: 0, grace: 0, every: 5, min_use: 1e9, probe: "
      "32}\n";
  const std::string full = fresh_dir("ablate_full"), cut = fresh_dir("ablate_cut");
  REQUIRE(train_yaml(yaml, "ablate.yaml", full) == 0);
  REQUIRE(train_yaml(yaml, "ablate.yaml", cut, 7) == 0);
  REQUIRE(resume_run(cut) == 0);
  check_same_last_checkpoints(full, cut);
  CHECK(text_of(full + "/events.jsonl") == text_of(cut + "/events.jsonl"));
  std::vector<json> pruned;
  std::istringstream ev(text_of(full + "/events.jsonl"));
  for (std::string line; std::getline(ev, line);)
    if (json j = json::parse(line); j.value("rule", "") == "block_ablation") pruned.push_back(j);
  REQUIRE(pruned.size() == 2);  // at the checks of steps 5 and 10; then one block is left
  CHECK(pruned[0]["step"] == 5);
  CHECK(pruned[1]["step"] == 10);
  for (const json& p : pruned) {
    // leaving a trained block out changes the probe's loss: measured, and not zero
    REQUIRE(p["use"].is_number());
    CHECK(p["use"].get<double>() != 0.0);
    CHECK(p["loss_left_out"].get<double>() ==
          doctest::Approx(p["probe_loss"].get<double>() * (1 + p["use"].get<double>())));
  }
  CHECK(text_of(full + "/config.resolved.yaml").find("#   blocks: 1") != std::string::npos);
  fs::remove_all(full);
  fs::remove_all(cut);
}
