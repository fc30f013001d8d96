// Blocks as a structural edit (Model::insert_block and remove_block, the structure editor's
// InsertBlock and RemoveBlock): the function kept at an insertion on every block kind, a removal
// equal to the model built with the blocks left, the optimizer's state carried to the blocks'
// new names, bad edits refused, and a deepened run that resumes bit for bit, evaluates to its
// validation loss and reads back through `inspect`.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "growformer/checkpoint.hpp"
#include "growformer/model.hpp"
#include "growformer/ops.hpp"
#include "growformer/optimizer.hpp"
#include "growformer/structure_editor.hpp"
#include "growformer/trainer.hpp"
#include "growformer/trainer_state.hpp"
#include "structure_edits_testing.hpp"
#include "testing.hpp"

using namespace gf;
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace gf_test;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.data(), a.data() + a.size(), b.data());
}

/// The parameters of MODEL by name, copied.
std::map<std::string, Tensor> values_of(const Model& model) {
  std::map<std::string, Tensor> out;
  for (auto& [n, p] : model.named_parameters()) out[n] = p.value().clone();
  return out;
}

/// NAME ("layers.I.<rest>") with its block index moved as the block edit E moves it; "" when E
/// removed the block; other names as they are.
std::string moved(const std::string& name, const Edit& e) {
  if (name.rfind("layers.", 0) != 0) return name;
  const size_t end = name.find('.', 7);
  const std::optional<size_t> to = block_after(e, std::stoul(name.substr(7, end - 7)));
  return to ? "layers." + std::to_string(*to) + name.substr(end) : "";
}

}  // namespace

TEST_CASE(
    "blocks: an inserted block computes the identity on every block kind; the blocks after it "
    "move up with their parameters unchanged") {
  for (const std::string& kind : block_kinds()) {
    for (size_t at : {size_t(0), size_t(1), size_t(2)}) {
      INFO(kind << " at " << at);
      auto model = make_model(kind);
      const Batch b = batch_of(3, 7, 11);
      const Tensor before = logits_of(*model, b);
      const auto values = values_of(*model);
      OncePolicy p;
      const Edit insert = block_edit(Edit::Kind::InsertBlock, at);
      p.edits = {insert};
      Rng rng(9, 9);
      Recorder sink;
      StructureEditor ed = editor_of(*model, p, rng, &sink);
      REQUIRE(ed.check(10).size() == 1);
      CHECK(model->blocks().size() == 3);
      CHECK(ed.blocks() == model->blocks());
      CHECK(model->heads_per_block() == std::vector<size_t>{2, 2, 2});
      CHECK(model->mlp_widths() == std::vector<size_t>{16, 16, 16});
      CHECK(max_abs_diff(before, logits_of(*model, b)) <= 1e-6);
      // every old parameter under its new name, bit for bit; the new block's are new
      const auto now = values_of(*model);
      for (const auto& [n, t] : values) CHECK(same_bits(now.at(moved(n, insert)), t));
      const std::string fresh = "layers." + std::to_string(at) + ".";
      double drawn = 0;
      for (const auto& [n, t] : now)
        if (n.rfind(fresh, 0) == 0 && n.find("w_q") != std::string::npos)
          for (size_t i = 0; i < t.size(); ++i) drawn += std::fabs(t[i]);
      CHECK(drawn > 0.1);  // its heads are drawn, not zero: it learns once its W_O moves
      // the same block with non-zero output maps would change the outputs: the check can fail
      Var w_o = *model->blocks()[at]->heads()[0].w_o;
      Tensor kept = w_o.value().clone();
      for (size_t i = 0; i < w_o.size(); ++i) w_o.value()[i] = 0.3f * float(int(i % 3) - 1);
      CHECK(max_abs_diff(before, logits_of(*model, b)) > 1e-3);
      w_o.value() = kept;
      // the event: what, where, the number of blocks; the policy heard where the block went
      REQUIRE(sink.events.size() == 1);
      const Event& e = sink.events[0];
      CHECK(e.type == "grow");
      CHECK(e.block == long(at));
      CHECK(std::count(e.strings.begin(), e.strings.end(),
                       std::pair<std::string, std::string>{"what", "block"}) == 1);
      CHECK(std::count(e.numbers.begin(), e.numbers.end(),
                       std::pair<std::string, double>{"blocks", 3.0}) == 1);
      REQUIRE(p.heard.size() == 1);
      CHECK(p.heard[0].kind == Edit::Kind::InsertBlock);
      CHECK(p.heard[0].block == at);
    }
  }
}

TEST_CASE(
    "blocks: a model with a block removed computes what the model built with the others does") {
  for (const std::string& kind : block_kinds()) {
    INFO(kind);
    auto model = make_model(kind, 3);
    const Batch b = batch_of(3, 7, 4);
    const Tensor three = logits_of(*model, b);
    const auto values = values_of(*model);
    OncePolicy p;
    const Edit removal = block_edit(Edit::Kind::RemoveBlock, 1);
    p.edits = {removal};
    Rng rng(2, 2);
    Recorder sink;
    StructureEditor ed = editor_of(*model, p, rng, &sink);
    REQUIRE(ed.check(4).size() == 1);
    REQUIRE(model->blocks().size() == 2);
    // the model of 2 blocks, given the parameters of blocks 0 and 2 of the first
    auto two = make_model(kind, 2);
    for (auto& [n, v] : two->named_parameters()) {
      std::string from = n;
      if (n.rfind("layers.1.", 0) == 0) from = "layers.2." + n.substr(9);
      REQUIRE(values.count(from));
      Var(v).value() = values.at(from).clone();
    }
    const Tensor removed = logits_of(*model, b);
    CHECK(same_bits(removed, logits_of(*two, b)));
    CHECK(max_abs_diff(three, removed) > 1e-4);  // block 1 did something
    for (auto& [n, v] : model->named_parameters()) {
      INFO(n);
      CHECK(same_bits(v.value(),
                      values.at(n.rfind("layers.1.", 0) == 0 ? "layers.2." + n.substr(9) : n)));
    }
    REQUIRE(sink.events.size() == 1);
    CHECK(sink.events[0].type == "prune");
    CHECK(moved("layers.2.ln1.gamma", removal) == "layers.1.ln1.gamma");
  }
}

TEST_CASE(
    "blocks: the optimizer's state moves with its block, bit for bit; a new block's is zero") {
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}", 3);
  auto opt = gf_test::registry().create_optimizer(ConfigNode::load_string("plugin: adamw\n"));
  const Batch b = batch_of(4, 6, 8);
  auto step = [&] {
    for (auto& [n, v] : model->named_parameters()) v.zero_grad();
    backward(ops::cross_entropy(model->forward(b, false, nullptr), b.labels));
    NamedParams params = model->named_parameters();
    opt->step(params, 1e-3f);
  };
  step();
  step();
  const auto st0 = opt->state_tensors();
  const auto sc0 = opt->state_scalars();
  OncePolicy p;
  const Edit insert = block_edit(Edit::Kind::InsertBlock, 1);
  const Edit remove = block_edit(Edit::Kind::RemoveBlock, 3);  // the last of the four
  p.edits = {insert, remove};
  Rng rng(1, 1);
  StructureEditor ed = editor_of(*model, p, rng, nullptr, opt.get());
  REQUIRE(ed.check(2).size() == 2);
  REQUIRE(model->blocks().size() == 3);
  const auto st1 = opt->state_tensors();
  const auto sc1 = opt->state_scalars();
  // "<kind>.<name>" after both edits: old block 0 stays, 1 -> 2, 2 removed, new block 1 none
  auto after = [&](const std::string& key) {
    const size_t dot = key.find('.');
    const std::string n = moved(moved(key.substr(dot + 1), insert), remove);
    return n.empty() ? n : key.substr(0, dot + 1) + n;
  };
  size_t carried = 0, dropped = 0;
  for (const auto& [k, t] : st0) {
    INFO(k);
    const std::string to = after(k);
    if (to.empty()) {
      ++dropped;
      continue;
    }
    REQUIRE(st1.count(to));
    CHECK(same_bits(st1.at(to), t));
    ++carried;
  }
  for (const auto& [k, v] : sc0)
    if (!after(k).empty()) CHECK(sc1.at(after(k)) == v);
  CHECK(dropped > 0);
  CHECK(st1.size() == carried);  // nothing else: the new block has no state yet (zero)
  for (const auto& [k, t] : st1) CHECK(k.find("layers.1.") == std::string::npos);
  // the carried state trains on: a step after the edit moves the new block's output maps
  const Tensor w_o = model->blocks()[1]->heads()[0].w_o->value().clone();
  step();
  CHECK(max_abs_diff(w_o, model->blocks()[1]->heads()[0].w_o->value()) > 0);
  CHECK(opt->state_scalars().at("t.layers.1.mlp.fc2.w") == 1);  // a fresh step count
  CHECK(opt->state_scalars().at("t.layers.2.mlp.fc2.w") == 3);  // the moved block's, kept
}

TEST_CASE("blocks: a bad block edit is refused with one message naming the policy and the index") {
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}");
  Rng rng(1, 1);
  Recorder sink;
  auto error = [&](Edit e) {
    OncePolicy p;
    p.edits = {std::move(e)};
    StructureEditor ed = editor_of(*model, p, rng, &sink);
    try {
      ed.check(3);
    } catch (const RuntimeError& err) {
      return std::string(err.what());
    }
    return std::string("(no error)");
  };
  CHECK(error(block_edit(Edit::Kind::InsertBlock, 3)) ==
        "the growth policy `scripted` asked to insert a block at index 3 of the model: there is "
        "no index 3 to insert at (the model has 2 blocks: a new block goes at 0..2)");
  CHECK(error(block_edit(Edit::Kind::RemoveBlock, 2)) ==
        "the growth policy `scripted` asked to remove block 2 of the model: it has no block 2 "
        "(its blocks: 0..1)");
  CHECK(model->blocks().size() == 2);
  CHECK(sink.events.empty());
  CHECK(error(block_edit(Edit::Kind::RemoveBlock, 0)) == "(no error)");
  CHECK(error(block_edit(Edit::Kind::RemoveBlock, 0)) ==
        "the growth policy `scripted` asked to remove block 0 of the model: removing its only "
        "block would leave it none");
  CHECK(model->blocks().size() == 1);
  // an editor that was given no model edits no blocks
  OncePolicy p;
  p.edits = {block_edit(Edit::Kind::InsertBlock, 0)};
  StructureEditor bare(model->blocks(), {{&p, &rng, "growth", "scripted"}}, nullptr, 10);
  try {
    bare.check(1);
    FAIL("no error");
  } catch (const RuntimeError& err) {
    CHECK(std::string(err.what()) ==
          "the growth policy `scripted` asked to insert a block at index 0, but the trainer "
          "edits no blocks here (StructureEditor::set_model)");
  }
  // the most blocks a model may hold: the model's own refusal
  auto deep = make_model("{plugin: mha, heads: 1, head: {plugin: dot_product}}", 1);
  deep->set_blocks(Model::kMaxBlocks);
  CHECK(deep->why_not_insert_block(0) ==
        "the model already has the most blocks a model may hold, 1024");
  CHECK_THROWS_WITH_AS(deep->set_blocks(0), "model: 0 blocks (a model holds 1..1024)",
                       RuntimeError);
}

TEST_CASE(
    "blocks: a block left out of forward (a whole-block ablation) gives the logits of the model "
    "without it, on every block kind; only ablations may ask for it") {
  const Batch batch = batch_of(3, 6, 7);
  for (const std::string& kind : block_kinds()) {
    INFO(kind);
    auto model = make_model(kind, 3);
    auto without = make_model(kind, 3);  // the same seed: the same parameters
    const Tensor whole = logits_of(*model, batch);
    without->remove_block(1);
    model->set_left_out({1});
    CHECK(model->left_out() == std::vector<size_t>{1});
    CHECK(max_abs_diff(logits_of(*model, batch), logits_of(*without, batch)) == 0.0);
    CHECK(max_abs_diff(logits_of(*model, batch), whole) > 1e-6);  // block 1 did something
    // a block inserted below moves the left-out block with its index
    Rng rng(3, 3);
    model->insert_block(0, rng);
    CHECK(model->left_out() == std::vector<size_t>{2});
    CHECK(max_abs_diff(logits_of(*model, batch), logits_of(*without, batch)) < 1e-6);
    model->set_left_out({});
    CHECK(model->left_out().empty());
    CHECK(max_abs_diff(logits_of(*model, batch), whole) < 1e-6);  // the new block adds zero
    CHECK_THROWS_WITH_AS(model->set_left_out({4}),
                         "cannot leave out block 4: the model has 4 block(s)", RuntimeError);
  }
  // a policy may leave a whole block out of an ablation, not out of a training step
  struct Asks : OncePolicy {
    std::vector<std::vector<HeadRef>> probe_ablations(const TrainView&) const override {
      return {{{1, HeadRef::kWholeBlock}}};
    }
    std::vector<HeadRef> muted_in_training(size_t) const override {
      return {{0, HeadRef::kWholeBlock}};
    }
  } asks;
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}");
  Rng rng(1, 1);
  StructureEditor ed = editor_of(*model, asks, rng, nullptr);
  CHECK(ed.probe_ablations(1) ==
        std::vector<std::vector<HeadRef>>{{HeadRef{1, HeadRef::kWholeBlock}}});
  CHECK_THROWS_WITH_AS(ed.muted_in_training(1),
                       "the growth policy `scripted` asked to mute in training the whole block 0 "
                       "(head -1): only an ablation leaves a whole block out",
                       RuntimeError);
}

TEST_CASE("blocks: block_after and move_blocks move a policy's per-block state") {
  const Edit insert = block_edit(Edit::Kind::InsertBlock, 1);
  const Edit remove = block_edit(Edit::Kind::RemoveBlock, 1);
  CHECK(block_after(insert, 0) == size_t(0));
  CHECK(block_after(insert, 1) == size_t(2));
  CHECK(block_after(remove, 1) == std::nullopt);
  CHECK(block_after(remove, 2) == size_t(1));
  CHECK(block_after(block_edit(Edit::Kind::AddHead, 1), 3) == size_t(3));
  std::map<size_t, std::string> state = {{0, "a"}, {1, "b"}, {2, "c"}};
  move_blocks(state, insert);
  CHECK(state == std::map<size_t, std::string>{{0, "a"}, {2, "b"}, {3, "c"}});
  move_blocks(state, block_edit(Edit::Kind::RemoveBlock, 2));
  CHECK(state == std::map<size_t, std::string>{{0, "a"}, {2, "c"}});
}

namespace {

const char* kDeepening = R"(name: grow_depth
seed: 7
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
  mlp_ratio: 2
  max_len: 32
  dropout: 0.1
  attention:
    plugin: mha
    heads: 2
growth:
  plugin: depth_schedule
  at: [10, 25]
  index: 0
pruning: {plugin: head_importance, min_heads: 2}
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 40
  batch_size: 16
  warmup: 5
  eval_every: 10
  log_every: 5
  check_every: 5
)";

std::string fresh_dir(const std::string& name) { return gf_test::fresh_dir("depth", name); }

int train_deepening(const std::string& dir, long stop_after = -1) {
  return train_yaml(kDeepening, "grow_depth.yaml", dir, stop_after);
}

bool has_plugins() {
  return gf_test::registry().find(Kind::Growth, "depth_schedule") &&
         gf_test::registry().find(Kind::Pruning, "head_importance");
}

}  // namespace

TEST_CASE(
    "blocks in a run: inserted by depth_schedule, resumed bit for bit, evaluated to its "
    "validation loss, read back by inspect") {
  if (!has_plugins()) {
    MESSAGE("the baselines' plugins are not built: skipped");
    return;
  }
  const std::string full = fresh_dir("full"), cut = fresh_dir("cut");
  REQUIRE(train_deepening(full) == 0);
  REQUIRE(train_deepening(cut, 17) == 0);  // between the two insertions
  {
    const Checkpoint mid = load_checkpoint(cut + "/checkpoints/last.safetensors");
    CHECK(mid.tensors.count("model.layers.1.mlp.fc1.w") == 1);
    CHECK(mid.tensors.count("model.layers.2.mlp.fc1.w") == 0);
    auto ex = experiment_from_checkpoint(cut + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
    RunFlags f;
    f.quiet = true;
    REQUIRE(ex->resume(cut, f) == 0);
    CHECK(ex->model().blocks().size() == 3);
  }
  // the same bits: every tensor of the last checkpoint (model and optimizer), and the logs
  check_same_last_checkpoints(full, cut);
  const Checkpoint a = load_checkpoint(full + "/checkpoints/last.safetensors");
  CHECK(a.tensors.count("model.layers.2.attn.heads.1.w_o") == 1);
  CHECK(a.tensors.count("optim.m.layers.2.mlp.fc2.w") == 1);
  CHECK(gf_test::metrics_without_timing(full) == gf_test::metrics_without_timing(cut));
  CHECK(text_of(full + "/events.jsonl") == text_of(cut + "/events.jsonl"));
  std::vector<json> inserts;
  std::istringstream ev(text_of(full + "/events.jsonl"));
  for (std::string line; std::getline(ev, line);)
    if (json j = json::parse(line); j.value("what", "") == "block") inserts.push_back(j);
  REQUIRE(inserts.size() == 2);
  CHECK(inserts[0]["step"] == 10);
  CHECK(inserts[0]["block"] == 0);
  CHECK(inserts[0]["type"] == "grow");
  CHECK(inserts[0]["op"] == "insert");
  CHECK(inserts[0]["blocks"] == 2);
  CHECK(inserts[1]["heads"] == json::array({2, 2, 2}));
  CHECK(text_of(full + "/config.resolved.yaml").find("#   blocks: 3  ") != std::string::npos);

  // the deepened checkpoint evaluated afresh gives the validation loss the run logged at its step
  const std::string last = full + "/checkpoints/last.safetensors";
  auto ex = experiment_from_checkpoint(last, {GF_PLUGIN_DIR});
  ex->load_weights(last);
  CHECK(ex->model().blocks().size() == 3);
  const EvalResult val = ex->evaluate(ex->data().val);
  bool seen = false;
  for (const json& m : gf_test::metrics_without_timing(full))
    if (m["split"] == "val" && m["step"] == 40) {
      seen = true;
      CHECK(m["loss"].get<double>() == doctest::Approx(val.loss).epsilon(1e-6));
    }
  CHECK(seen);
  const auto cli =
      gf_test::run_shell(std::string(GF_BIN) + " eval " + last + " --split val --json");
  REQUIRE_MESSAGE(cli.status == 0, cli.output);
  const json evj = json::parse(cli.output.substr(cli.output.find('{')));
  CHECK(evj["loss"].get<double>() == doctest::Approx(val.loss).epsilon(1e-6));

  // inspect: the number of blocks, each one's heads and MLP width
  const CheckpointModel cm = read_checkpoint_model(a, "last");
  CHECK(cm.heads_per_block == std::vector<size_t>{2, 2, 2});
  CHECK(cm.mlp_width_per_block == std::vector<size_t>{32, 32, 32});
  const auto js = gf_test::run_shell(std::string(GF_BIN) + " inspect " + last + " --json");
  CHECK(json::parse(js.output)["num_blocks"] == 3);
  const auto text = gf_test::run_shell(std::string(GF_BIN) + " inspect " + last);
  CHECK(text.output.find("3 blocks, heads per block [2,2,2], MLP width per block [32,32,32]") !=
        std::string::npos);

  // the report draws the number of blocks over time and lists the block edits as such
  if (gf_test::run_shell("command -v gnuplot").status == 0) {
    const auto rep = gf_test::run_shell(std::string(GF_BIN) + " report " + full);
    REQUIRE(rep.status == 0);
    const std::string page = text_of(full + "/report/report.html");
    CHECK(page.find("Blocks (after each block edit)") != std::string::npos);
    CHECK(page.find("grow (block)") != std::string::npos);
  }

  // a checkpoint whose architecture lists no block is refused, naming it
  Checkpoint bad = a;
  bad.metadata["architecture"] = "[]";
  CHECK_THROWS_WITH_AS(restore_model(bad, "bad.safetensors", ex->model()),
                       "bad.safetensors: invalid checkpoint: its architecture record lists 0 "
                       "blocks (a model holds 1..1024)",
                       RuntimeError);
  fs::remove_all(full);
  fs::remove_all(cut);
}

TEST_CASE("depth_schedule: its options are checked when the config is read") {
  if (!has_plugins()) {
    MESSAGE("the baselines' plugins are not built: skipped");
    return;
  }
  auto policy = [](const std::string& yaml) {
    return gf_test::error_of(
        [&] { gf_test::registry().create_growth(ConfigNode::load_string(yaml, "growth.yaml")); });
  };
  CHECK(policy("plugin: depth_schedule\nat: [10, 20]\nindex: 1\n") == "(no ConfigError)");
  CHECK(policy("plugin: depth_schedule\nat: []\n").find("name the steps to insert a block at") !=
        std::string::npos);
  CHECK(policy("plugin: depth_schedule\nat: [20, 10]\n").find("must increase") !=
        std::string::npos);
  CHECK(policy("plugin: depth_schedule\nat: [5]\nindex: -2\n").find("`index`") !=
        std::string::npos);
  CHECK(policy("plugin: depth_schedule\nat: [5]\nmax_blocks: 0\n").find("`max_blocks`") !=
        std::string::npos);
}

TEST_CASE("a Python policy requests block edits and hears of them; a malformed one is refused") {
  if (!gf_test::registry().find(Kind::Growth, "python")) {
    MESSAGE("python policy plugin not built: skipped");
    return;
  }
  const std::string path = std::string(GF_SOURCE_DIR) + "/tests/python";
  auto run = [&](const std::string& policy, const std::string& dir) {
    ConfigNode cfg = ConfigNode::load_string(kDeepening, "grow_depth.yaml");
    cfg.apply_override("growth={plugin: python, class: depth_policies." + policy + ", path: [" +
                       path + "]}");
    cfg.apply_override("pruning={plugin: none}");
    cfg.apply_override("model.layers=2");
    cfg.apply_override("train.steps=25");
    Experiment ex(cfg, {GF_PLUGIN_DIR});
    RunFlags f;
    f.run_dir = dir;
    f.quiet = true;
    ex.train(f);
    return ex.model().blocks().size();
  };
  const std::string dir = fresh_dir("python");
  CHECK(run("DeepenThenTrim", dir) == 2);
  std::vector<json> seen, told, edits;
  std::istringstream ev(text_of(dir + "/events.jsonl"));
  for (std::string line; std::getline(ev, line);) {
    json j = json::parse(line);
    if (j["type"] == "depth_seen") seen.push_back(j);
    if (j["type"] == "depth_told") told.push_back(j);
    if (j.value("what", "") == "block") edits.push_back(j);
  }
  REQUIRE(seen.size() == 5);  // checks at 5, 10, 15, 20, 25
  CHECK(seen[1]["blocks"] == 2);
  CHECK(seen[2]["blocks"] == 3);
  CHECK(seen[4]["blocks"] == 2);
  REQUIRE(told.size() == 2);
  CHECK(told[0]["op"] == "insert_block");
  CHECK(told[0]["block"] == 1);
  CHECK(told[0]["blocks"] == 3);
  CHECK(told[1]["op"] == "remove_block");
  REQUIRE(edits.size() == 2);
  CHECK(edits[0]["reason"] == "deeper");
  CHECK(edits[1]["type"] == "prune");
  fs::remove_all(dir);
  auto refused = [&](const std::string& kind) {
    try {
      run("BadDepth, options: {kind: " + kind + "}", fresh_dir("python_bad"));
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(refused("beyond").find("an insert_block edit's `block` is the index the new block takes, "
                               "in [0, 2]") != std::string::npos);
  CHECK(refused("units").find("a block edit takes `block`, not `head`, `init`, "
                              "`release_direction` or `units`") != std::string::npos);
  CHECK(refused("new_heads")
            .find("block 0 (a block inserted by this check) cannot add or remove "
                  "heads") != std::string::npos);
  CHECK(refused("all").find("block 0 is the model's only block") != std::string::npos);
  fs::remove_all(fresh_dir("python_bad"));
}

TEST_CASE(
    "INCRT's growth keeps its per-block state across another policy's block edits, and the run "
    "resumes bit for bit") {
  if (!gf_test::registry().find(Kind::Growth, "python") ||
      !gf_test::registry().find(Kind::Growth, "incrt_geometric")) {
    MESSAGE("python or incrt plugin not built: skipped");
    return;
  }
  const std::string path = std::string(GF_SOURCE_DIR) + "/tests/python";
  auto train = [&](const std::string& dir, long stop_after) {
    ConfigNode cfg = ConfigNode::load_string(kDeepening, "grow_depth.yaml");
    cfg.apply_override(
        "growth={plugin: incrt_geometric, criterion: energy, tracker: exact, calibration: fixed, "
        "calibration_checks: 2, thresholds: calibrated, spectrum: positive, theta_w: 0.05, "
        "dwell_checks: 1, init: directed, max_heads: 4}");
    // a block inserted before INCRT's block at step 10, INCRT's block removed at step 30
    cfg.apply_override("pruning={plugin: python, class: depth_policies.DeepenThenTrim, path: [" +
                       path + "], options: {grow_at: 10, trim_at: 30, at: 0, drop: 1}}");
    cfg.apply_override("train.check_every=2");
    Experiment ex(cfg, {GF_PLUGIN_DIR});
    RunFlags f;
    f.run_dir = dir;
    f.quiet = true;
    f.stop_after = stop_after;
    return ex.train(f);
  };
  const std::string full = fresh_dir("incrt_full"), cut = fresh_dir("incrt_cut");
  REQUIRE(train(full, -1) == 0);
  REQUIRE(train(cut, 17) == 0);
  REQUIRE(resume_run(cut) == 0);
  CHECK(gf_test::metrics_without_timing(full) == gf_test::metrics_without_timing(cut));
  CHECK(text_of(full + "/events.jsonl") == text_of(cut + "/events.jsonl"));
  // INCRT's checks: block 0 alone before the insertion; after it, its block (now 1) goes on
  // from where it was while the new block 0 calibrates afresh; after the removal, block 0 alone
  std::map<long, std::set<long>> checked;              // step -> blocks INCRT checked
  std::map<std::pair<long, long>, std::string> phase;  // (step, block) -> INCRT's phase
  std::vector<json> edits;
  std::istringstream ev(text_of(full + "/events.jsonl"));
  for (std::string line; std::getline(ev, line);) {
    json j = json::parse(line);
    if (j["type"] == "check") {
      const long step = j["step"].get<long>(), block = j["block"].get<long>();
      checked[step].insert(block);
      phase[{step, block}] = j["phase"].get<std::string>();
    }
    if (j.value("what", "") == "block") edits.push_back(j);
  }
  REQUIRE(edits.size() == 2);
  CHECK(edits[0]["policy"] == "pruning");
  CHECK(checked.at(8) == std::set<long>{0});
  CHECK(phase.at({8, 0}) == "active");  // calibrated at step 4
  CHECK(checked.at(12) == std::set<long>{0, 1});
  CHECK(phase.at({12, 0}) == "calibrating");  // the new block
  CHECK(phase.at({12, 1}) == "active");       // the old block, its state moved with it
  CHECK(checked.at(32) == std::set<long>{0});
  CHECK(phase.at({32, 0}) == "active");
  const Checkpoint last = load_checkpoint(full + "/checkpoints/last.safetensors");
  CHECK(read_checkpoint_model(last, "last").heads_per_block.size() == 1);
  fs::remove_all(full);
  fs::remove_all(cut);
}
