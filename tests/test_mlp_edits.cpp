// MLP units as a structural edit (mlp.hpp, the structure editor's AddMlpUnits and
// RemoveMlpUnits): the function kept at the edit on every block kind, gradients after it, the
// optimizer's state carried unit by unit, bad edits refused, and a grown run that resumes bit
// for bit, evaluates to its validation loss and reads back through `inspect`.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

Edit add_units(size_t block, size_t units) {
  Edit e;
  e.kind = Edit::Kind::AddMlpUnits;
  e.block = block;
  e.units = units;
  return e;
}

Edit remove_units(size_t block, std::vector<size_t> units) {
  Edit e;
  e.kind = Edit::Kind::RemoveMlpUnits;
  e.block = block;
  e.unit_indices = std::move(units);
  return e;
}

Var param_of(const Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return p;
  FAIL("no parameter " << name);
  return Var();
}

}  // namespace

TEST_CASE(
    "MLP units: added with zero output weights, the model's function is kept on every "
    "block kind; removed, the others keep their weights exactly") {
  for (const std::string& kind : block_kinds()) {
    INFO(kind);
    auto model = make_model(kind);
    const Batch b = batch_of(3, 7, 11);
    const Tensor before = logits_of(*model, b);
    OncePolicy p;
    p.edits = {add_units(0, 5), add_units(1, 3)};
    Rng rng(9, 9);
    Recorder sink;
    StructureEditor ed = editor_of(*model, p, rng, &sink);
    REQUIRE(ed.check(10).size() == 2);
    CHECK(model->mlp_widths() == std::vector<size_t>{21, 19});
    CHECK(param_of(*model, "layers.0.mlp.fc1.w").shape() == Shape{8, 21});
    CHECK(param_of(*model, "layers.1.mlp.fc2.w").shape() == Shape{19, 8});
    // the new units' input weights are drawn (not zero), their outputs zero: f unchanged
    const Tensor w1 = param_of(*model, "layers.0.mlp.fc1.w").value();
    double new_in = 0;
    for (size_t r = 0; r < 8; ++r)
      for (size_t u = 16; u < 21; ++u) new_in += std::fabs(w1[r * 21 + u]);
    CHECK(new_in > 0.1);
    const Tensor after = logits_of(*model, b);
    CHECK(max_abs_diff(before, after) <= 1e-6);
    // the same edit with non-zero output weights would change the outputs: the check can fail
    Var w2 = param_of(*model, "layers.0.mlp.fc2.w");
    Tensor kept = w2.value().clone();
    for (size_t i = 16 * 8; i < 21 * 8; ++i) w2.value()[i] = 0.5f * float(int(i % 3) - 1);
    CHECK(max_abs_diff(before, logits_of(*model, b)) > 1e-3);
    w2.value() = kept;

    // removal: the survivors' weights are the ones they had, in order
    const Tensor w1_before = param_of(*model, "layers.0.mlp.fc1.w").value().clone();
    const Tensor w2_before = param_of(*model, "layers.0.mlp.fc2.w").value().clone();
    p.edits = {remove_units(0, {1, 17, 4})};
    REQUIRE(ed.check(20).size() == 1);
    CHECK(model->mlp_widths() == std::vector<size_t>{18, 19});
    const Tensor w1_after = param_of(*model, "layers.0.mlp.fc1.w").value();
    const Tensor w2_after = param_of(*model, "layers.0.mlp.fc2.w").value();
    size_t j = 0;
    for (size_t u = 0; u < 21; ++u) {
      if (u == 1 || u == 17 || u == 4) continue;
      for (size_t r = 0; r < 8; ++r) CHECK(w1_after[r * 18 + j] == w1_before[r * 21 + u]);
      for (size_t c = 0; c < 8; ++c) CHECK(w2_after[j * 8 + c] == w2_before[u * 8 + c]);
      ++j;
    }
    CHECK(j == 18);
    // removing units whose output weights are zero (17 was new) keeps f; unit 1 and 4 did not
    CHECK(max_abs_diff(before, logits_of(*model, b)) > 1e-6);
    // the events: what, where, the widths; the policies heard the first new unit's index
    REQUIRE(sink.events.size() == 3);
    const Event& e = sink.events[0];
    CHECK(e.type == "grow");
    CHECK(e.block == 0);
    CHECK(e.head == -1);
    CHECK(std::count(e.strings.begin(), e.strings.end(),
                     std::pair<std::string, std::string>{"what", "mlp_units"}) == 1);
    CHECK(sink.events[2].type == "prune");
    std::vector<double> widths;
    for (auto& [k, v] : sink.events[2].lists)
      if (k == "mlp_widths") widths = v;
    CHECK(widths == std::vector<double>{18, 19});
    REQUIRE(p.heard.size() == 3);
    CHECK(p.heard[0].id == 16);
    CHECK(p.heard[1].id == 16);
    CHECK(p.heard[2].id == -1);
  }
}

TEST_CASE("MLP units: the gradients after an edit agree with finite differences") {
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}");
  OncePolicy p;
  p.edits = {add_units(0, 4), remove_units(1, {0, 7})};
  Rng rng(3, 3);
  StructureEditor ed = editor_of(*model, p, rng, nullptr);
  REQUIRE(ed.check(5).size() == 2);
  const Batch b = batch_of(2, 6, 4);
  auto loss = [&] { return ops::cross_entropy(model->forward(b, false, nullptr), b.labels); };
  for (auto& [n, v] : model->named_parameters()) v.zero_grad();
  backward(loss());
  for (const std::string name : {"layers.0.mlp.fc2.w", "layers.0.mlp.fc1.w", "layers.0.mlp.fc1.b",
                                 "layers.1.mlp.fc1.w", "layers.1.mlp.fc2.w"}) {
    Var v = param_of(*model, name);
    REQUIRE(v.grad().defined());
    const Tensor g = v.grad().clone();
    // every element of the new units (rows 16.. of fc2.w: the signal GradMax reads) and a spread
    std::vector<size_t> at;
    for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / 24)) at.push_back(i);
    if (name == "layers.0.mlp.fc2.w")
      for (size_t i = 16 * 8; i < 20 * 8; ++i) at.push_back(i);
    double new_grad = 0;
    for (size_t i : at) {
      const float x = v.value()[i];
      const double eps = 1e-2;
      NoGradGuard ng;
      v.value()[i] = x + float(eps);
      const double up = loss().value().item();
      v.value()[i] = x - float(eps);
      const double down = loss().value().item();
      v.value()[i] = x;
      const double num = (up - down) / (2 * eps);
      INFO(name << " element " << i << " analytic " << g[i] << " numeric " << num);
      CHECK(std::fabs(g[i] - num) <= 2e-3 + 2e-2 * std::fabs(num));
      if (name == "layers.0.mlp.fc2.w" && i >= 16 * 8) new_grad += std::fabs(g[i]);
    }
    if (name == "layers.0.mlp.fc2.w") CHECK(new_grad > 1e-4);  // the zero rows do learn
  }
}

TEST_CASE("MLP units: the optimizer's state is carried exactly, zero for the new units") {
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}");
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
  p.edits = {add_units(0, 3), remove_units(0, {2, 16})};  // unit 16 is the first new one
  Rng rng(1, 1);
  StructureEditor ed = editor_of(*model, p, rng, nullptr, opt.get());
  REQUIRE(ed.check(2).size() == 2);
  const auto st1 = opt->state_tensors();
  CHECK(opt->state_scalars() == sc0);  // the step counts: kept
  REQUIRE(st1.size() == st0.size());
  // the layout after both edits: old 0, 1, 3..15, then new 17, 18 (zero state)
  std::vector<long> source;
  for (long u = 0; u < 16; ++u)
    if (u != 2) source.push_back(u);
  source.push_back(-1), source.push_back(-1);
  for (auto& [k, t] : st1) {
    INFO(k);
    const Tensor& old = st0.at(k);
    if (k.find("layers.0.mlp.fc") == std::string::npos || k.find("fc2.b") != std::string::npos) {
      CHECK(max_abs_diff(old, t) == 0);  // every other state untouched
      continue;
    }
    const bool cols = k.find("fc1.w") != std::string::npos;
    const size_t other = cols ? 8 : (t.shape().size() == 2 ? 8 : 1);
    for (size_t j = 0; j < source.size(); ++j)
      for (size_t r = 0; r < other; ++r) {
        const float now = cols ? t[r * 17 + j] : t[j * other + r];
        const float was = source[j] < 0 ? 0.0f
                          : cols        ? old[r * 16 + size_t(source[j])]
                                        : old[size_t(source[j]) * other + r];
        CHECK(now == was);
      }
  }
  // the carried state trains on: a step after the edit runs and moves the new units
  const Tensor w2 = param_of(*model, "layers.0.mlp.fc2.w").value().clone();
  step();
  CHECK(max_abs_diff(w2, param_of(*model, "layers.0.mlp.fc2.w").value()) > 0);
}

TEST_CASE("MLP units: a bad edit is refused with one message naming the policy and the block") {
  auto model = make_model("{plugin: mha, heads: 2, head: {plugin: dot_product}}");
  Rng rng(1, 1);
  Recorder sink;
  auto refusal = [&](Edit e) {
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
  const std::string unknown = refusal(add_units(2, 4));
  CHECK(unknown ==
        "the growth policy `scripted` asked to edit block 2, but the model has 2 block(s)");
  const std::string zero = refusal(add_units(0, 0));
  CHECK(zero ==
        "the growth policy `scripted` asked to add 0 MLP units to block 0 (layers.0.mlp, 16 "
        "units): no units to add (units: 0)");
  const std::string all = refusal(
      remove_units(1, std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  CHECK(all.find("remove 16 MLP units from block 1 (layers.1.mlp, 16 units): removing all 16 "
                 "units would leave it none") != std::string::npos);
  const std::string beyond = refusal(remove_units(0, {3, 16}));
  CHECK(beyond.find("(layers.0.mlp, 16 units): it has no unit 16 (its units: 0..15)") !=
        std::string::npos);
  CHECK(refusal(remove_units(0, {3, 3})).find("unit 3 is named twice") != std::string::npos);
  Edit sized = add_units(0, 2);
  sized.mlp_init.fc1_w.assign(5, 0.1f);
  CHECK(refusal(sized).find("input weights hold 5 values, not d_model x units = 16") !=
        std::string::npos);
  CHECK(model->mlp_widths() == std::vector<size_t>{16, 16});  // nothing refused changed anything
  CHECK(sink.events.empty());
  // past the most a block may hold (64 x d_model = 512): a growth_refused event, no error
  CHECK(refusal(add_units(0, 497)) == "(no error)");
  CHECK(model->mlp_widths() == std::vector<size_t>{16, 16});
  REQUIRE(sink.events.size() == 1);
  CHECK(sink.events[0].type == "growth_refused");
  // a policy's own input weights are used as given
  Edit given = add_units(1, 2);
  for (size_t i = 0; i < 16; ++i) given.mlp_init.fc1_w.push_back(float(i));
  given.mlp_init.fc1_b = {7.0f, 8.0f};
  CHECK(refusal(given) == "(no error)");
  const Tensor w1 = param_of(*model, "layers.1.mlp.fc1.w").value();
  CHECK(w1[0 * 18 + 16] == 0.0f);
  CHECK(w1[0 * 18 + 17] == 1.0f);
  CHECK(w1[7 * 18 + 17] == 15.0f);
  CHECK(param_of(*model, "layers.1.mlp.fc1.b").value()[17] == 8.0f);
}

namespace {

const char* kGrowing = R"(name: grow_mlp
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
  layers: 2
  mlp_ratio: 2
  max_len: 32
  dropout: 0.1
  attention:
    plugin: mha
    heads: 2
growth:
  plugin: mlp_schedule
  at: [10, 25]
  units: 8
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 40
  batch_size: 16
  warmup: 5
  eval_every: 10
  log_every: 5
  check_every: 5
)";

std::string fresh_dir(const std::string& name) { return gf_test::fresh_dir("mlp", name); }

int train_growing(const std::string& dir, long stop_after = -1) {
  return train_yaml(kGrowing, "grow_mlp.yaml", dir, stop_after);
}

}  // namespace

TEST_CASE(
    "MLP units in a run: grown by mlp_schedule, resumed bit for bit, evaluated to its "
    "validation loss, read back by inspect") {
  if (!gf_test::registry().find(Kind::Growth, "mlp_schedule")) {
    MESSAGE("mlp_schedule plugin not built: skipped");
    return;
  }
  const std::string full = fresh_dir("full"), cut = fresh_dir("cut");
  REQUIRE(train_growing(full) == 0);
  REQUIRE(train_growing(cut, 17) == 0);  // between the two growths
  {
    const Checkpoint mid = load_checkpoint(cut + "/checkpoints/last.safetensors");
    CHECK(mid.tensors.at("model.layers.1.mlp.fc1.w").shape() == Shape{16, 40});
    REQUIRE(resume_run(cut) == 0);
  }
  // the same bits: every tensor of the last checkpoint (model and optimizer), and the logs
  check_same_last_checkpoints(full, cut);
  const Checkpoint a = load_checkpoint(full + "/checkpoints/last.safetensors");
  CHECK(a.tensors.at("model.layers.0.mlp.fc1.w").shape() == Shape{16, 48});
  CHECK(a.tensors.at("model.layers.1.mlp.fc2.w").shape() == Shape{48, 16});
  CHECK(a.tensors.at("optim.m.layers.0.mlp.fc1.w").shape() == Shape{16, 48});
  CHECK(gf_test::metrics_without_timing(full) == gf_test::metrics_without_timing(cut));
  CHECK(text_of(full + "/events.jsonl") == text_of(cut + "/events.jsonl"));
  // the events: two growths of each block, what, where, the widths after
  std::vector<json> grows;
  std::istringstream ev(text_of(full + "/events.jsonl"));
  for (std::string line; std::getline(ev, line);)
    if (json j = json::parse(line); j.value("what", "") == "mlp_units") grows.push_back(j);
  REQUIRE(grows.size() == 4);
  CHECK(grows[0]["step"] == 10);
  CHECK(grows[0]["block"] == 0);
  CHECK(grows[0]["type"] == "grow");
  CHECK(grows[0]["units"] == 8);
  CHECK(grows[0]["width"] == 40);
  CHECK(grows[1]["mlp_widths"] == json::array({40, 40}));
  CHECK(grows[3]["step"] == 25);
  CHECK(grows[3]["mlp_widths"] == json::array({48, 48}));
  // the resolved configuration's structure record names the widths
  CHECK(text_of(full + "/config.resolved.yaml").find("#   mlp_widths: [48, 48]  ") !=
        std::string::npos);

  // the grown checkpoint evaluated afresh gives the validation loss the run logged at its step
  auto ex = experiment_from_checkpoint(full + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  ex->load_weights(full + "/checkpoints/last.safetensors");
  CHECK(ex->model().mlp_widths() == std::vector<size_t>{48, 48});
  const EvalResult val = ex->evaluate(ex->data().val);
  bool seen = false;
  for (const json& m : gf_test::metrics_without_timing(full))
    if (m["split"] == "val" && m["step"] == 40) {
      seen = true;
      CHECK(m["loss"].get<double>() == doctest::Approx(val.loss).epsilon(1e-6));
      CHECK(m["accuracy"].get<double>() == doctest::Approx(val.accuracy).epsilon(1e-12));
    }
  CHECK(seen);

  // inspect: the widths per block, as text and JSON
  const CheckpointModel cm = read_checkpoint_model(a, "last");
  CHECK(cm.mlp_width_per_block == std::vector<size_t>{48, 48});
  const std::string last = full + "/checkpoints/last.safetensors";
  const auto shell = gf_test::run_shell(std::string(GF_BIN) + " inspect " + last + " --json");
  CHECK(json::parse(shell.output)["mlp_width_per_block"] == json::array({48, 48}));
  const auto text = gf_test::run_shell(std::string(GF_BIN) + " inspect " + last);
  CHECK(text.output.find("MLP width per block [48,48]") != std::string::npos);

  // `growformer eval` (an inference build of the checkpoint) gives it too
  const auto cli =
      gf_test::run_shell(std::string(GF_BIN) + " eval " + last + " --split val --json");
  REQUIRE_MESSAGE(cli.status == 0, cli.output);
  const json evj = json::parse(cli.output.substr(cli.output.find('{')));
  CHECK(evj["loss"].get<double>() == doctest::Approx(val.loss).epsilon(1e-6));

  // the report draws the widths over time and lists the MLP edits as such
  if (gf_test::run_shell("command -v gnuplot").status == 0) {
    const auto rep = gf_test::run_shell(std::string(GF_BIN) + " report " + full);
    REQUIRE(rep.status == 0);
    const std::string page = text_of(full + "/report/report.html");
    CHECK(page.find("MLP width per block") != std::string::npos);
    CHECK(page.find("grow (MLP units)") != std::string::npos);
  }

  // a checkpoint whose MLP tensors disagree is refused, naming the block
  Checkpoint bad = a;
  bad.tensors["model.layers.1.mlp.fc1.b"] = Tensor({47});
  try {
    read_checkpoint_model(bad, "bad.safetensors");
    FAIL("no error");
  } catch (const RuntimeError& e) {
    CHECK(std::string(e.what()) ==
          "bad.safetensors: invalid checkpoint: block layers.1.mlp: fc1.w holds 48 units but "
          "fc1.b has shape (47)");
  }
  fs::remove_all(full);
  fs::remove_all(cut);
}

TEST_CASE("mlp_schedule: its steps are checked when the config is read") {
  if (!gf_test::registry().find(Kind::Growth, "mlp_schedule")) {
    MESSAGE("mlp_schedule plugin not built: skipped");
    return;
  }
  auto policy = [](const std::string& yaml) {
    return gf_test::error_of(
        [&] { gf_test::registry().create_growth(ConfigNode::load_string(yaml, "growth.yaml")); });
  };
  CHECK(policy("plugin: mlp_schedule\nat: [10, 20]\nunits: 4\n") == "(no ConfigError)");
  CHECK(policy("plugin: mlp_schedule\nat: []\n").find("`at`") != std::string::npos);
  CHECK(policy("plugin: mlp_schedule\nat: []\n").find("name the steps to grow at") !=
        std::string::npos);
  CHECK(policy("plugin: mlp_schedule\nat: [20, 10]\n").find("20") != std::string::npos);
  CHECK(policy("plugin: mlp_schedule\nat: [20, 10]\n").find("must increase") != std::string::npos);
  CHECK(policy("plugin: mlp_schedule\nat: [0]\n").find("steps start at 1") != std::string::npos);
  CHECK(policy("plugin: mlp_schedule\nat: [5]\nunits: 0\n").find("`units`") != std::string::npos);
}

TEST_CASE("a Python policy requests MLP edits and hears of them; a malformed one is refused") {
  if (!gf_test::registry().find(Kind::Growth, "python")) {
    MESSAGE("python policy plugin not built: skipped");
    return;
  }
  const std::string path = std::string(GF_SOURCE_DIR) + "/tests/python";
  auto run = [&](const std::string& policy, const std::string& dir) {
    ConfigNode cfg = ConfigNode::load_string(kGrowing, "grow_mlp.yaml");
    cfg.apply_override("growth={plugin: python, class: mlp_policies." + policy + ", path: [" +
                       path + "]}");
    cfg.apply_override("train.steps=25");
    Experiment ex(cfg, {GF_PLUGIN_DIR});
    RunFlags f;
    f.run_dir = dir;
    f.quiet = true;
    ex.train(f);
    return ex.model().mlp_widths();
  };
  const std::string dir = fresh_dir("python");
  CHECK(run("GrowShrinkMlp", dir) == std::vector<size_t>{36, 30});
  std::vector<json> seen, told, edits;
  std::istringstream ev(text_of(dir + "/events.jsonl"));
  for (std::string line; std::getline(ev, line);) {
    json j = json::parse(line);
    if (j["type"] == "mlp_seen") seen.push_back(j);
    if (j["type"] == "mlp_told") told.push_back(j);
    if (j.value("what", "") == "mlp_units") edits.push_back(j);
  }
  REQUIRE(seen.size() == 5);  // checks at 5, 10, 15, 20, 25
  CHECK(seen[1]["widths"] == json::array({32, 32}));
  CHECK(seen[2]["widths"] == json::array({36, 32}));
  CHECK(seen[4]["widths"] == json::array({36, 30}));
  REQUIRE(told.size() == 2);
  CHECK(told[0]["op"] == "add_mlp_units");
  CHECK(told[0]["first_unit"] == 32);
  CHECK(told[1]["op"] == "remove_mlp_units");
  REQUIRE(edits.size() == 2);
  CHECK(edits[0]["reason"] == "wider");
  CHECK(edits[1]["unit_indices"] == json::array({0, 1}));
  fs::remove_all(dir);
  auto refused = [&](const std::string& kind) {
    try {
      run("BadMlp, options: {kind: " + kind + "}", fresh_dir("python_bad"));
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(refused("zero").find("an add_mlp_units edit needs `units`, a count in [1, 2^20]") !=
        std::string::npos);
  CHECK(refused("beyond").find("unit 32 is not an index of block 0's MLP (its units: 0..31)") !=
        std::string::npos);
  CHECK(refused("all").find("removing all 32 units of block 0's MLP would leave it none") !=
        std::string::npos);
  fs::remove_all(fresh_dir("python_bad"));
}
