// The training loop's parts, each alone: run directory, batch sampler, schedule, gradient
// clipping, trainer state, structure editor, probes and reporter.
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "growformer/batch_sampler.hpp"
#include "growformer/errors.hpp"
#include "growformer/reporter.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/run_events.hpp"
#include "growformer/schedule.hpp"
#include "growformer/structure_editor.hpp"
#include "growformer/trainer_state.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

struct CwdGuard {
  fs::path old = fs::current_path();
  explicit CwdGuard(const fs::path& p) { fs::current_path(p); }
  ~CwdGuard() { fs::current_path(old); }
};

}  // namespace

TEST_CASE("run directory: one layout, fresh names, refuses a used --run-dir, rewinds logs") {
  gf_test::TempDir tmp;
  CwdGuard cwd(tmp.path);
  gf::RunDir a = gf::RunDir::create("", "exp");
  gf::RunDir b = gf::RunDir::create("", "exp");
  CHECK(a.root() == "runs/exp");
  CHECK(b.root() == "runs/exp-2");
  CHECK(fs::is_directory(b.checkpoints()));
  CHECK(a.last_checkpoint() == "runs/exp/checkpoints/last.safetensors");
  CHECK(a.best_checkpoint() == "runs/exp/checkpoints/best.safetensors");
  CHECK(gf::RunDir::of_checkpoint(a.best_checkpoint()).root() == "runs/exp");
  std::ofstream(a.metrics()) << "{}\n";
  CHECK_THROWS_AS(gf::RunDir::create(a.root(), "x"), gf::ConfigError);
  CHECK_NOTHROW(gf::RunDir::create((tmp.path / "empty").string(), "x"));

  {
    std::ofstream m(a.metrics());
    m << R"({"step":10,"split":"train"})"
      << "\n"
      << R"({"step":20,"split":"val"})"
      << "\n"
      << R"({"step":30,"split":"train"})"
      << "\n"
      << R"({"step":20,"split":"test"})"
      << "\n"
      << R"({"step":20,"spl)";
  }
  a.rewind_logs(20);
  CHECK(read_lines(a.metrics()) ==
        std::vector<std::string>{R"({"step":10,"split":"train"})", R"({"step":20,"split":"val"})"});
  a.reset_logs();
  CHECK(read_lines(a.metrics()).empty());
  CHECK(read_lines(a.events()).empty());
}

TEST_CASE(
    "batch sampler: each epoch visits every example once; a step's batch is a pure function") {
  const size_t n = 12, batch = 4;
  gf::BatchSampler walk(7, n, batch);
  for (long epoch = 0; epoch < 3; ++epoch) {
    std::multiset<size_t> seen;
    for (long s = 1; s <= 3; ++s)
      for (size_t i : walk.indices(epoch * 3 + s)) seen.insert(i);
    CHECK(seen.size() == n);
    CHECK(std::set<size_t>(seen.begin(), seen.end()).size() == n);
  }
  gf::BatchSampler walked(7, n, batch), fresh(7, n, batch), other_seed(8, n, batch);
  for (long s = 1; s < 8; ++s) walked.indices(s);
  CHECK(walked.indices(8) == fresh.indices(8));
  CHECK(fresh.indices(1) != other_seed.indices(1));
}

TEST_CASE(
    "batch sampler with length bucketing: same windows, batches cut from the sorted window, "
    "shuffled") {
  const size_t n = 64, batch = 4, bucket = 4, window = batch * bucket;
  std::vector<size_t> len(n);
  for (size_t i = 0; i < n; ++i) len[i] = (i * 37) % n + 1;  // distinct lengths 1..64
  gf::BatchSampler plain(3, n, batch), bucketed(3, n, batch, bucket, len);
  const long per_window = static_cast<long>(bucket), per_epoch = static_cast<long>(n / batch);
  size_t unsorted_windows = 0;
  for (long epoch = 0; epoch < 3; ++epoch) {
    std::set<size_t> epoch_seen;
    for (long w = 0; w < per_epoch / per_window; ++w) {
      std::multiset<size_t> a, b;
      std::vector<std::pair<size_t, size_t>> ranges;  // (min, max) length of each batch
      for (long k = 1; k <= per_window; ++k) {
        long step = epoch * per_epoch + w * per_window + k;
        for (size_t i : plain.indices(step)) a.insert(i);
        std::vector<size_t> idx = bucketed.indices(step);
        size_t lo = n + 1, hi = 0;
        for (size_t i : idx) {
          b.insert(i);
          epoch_seen.insert(i);
          lo = std::min(lo, len[i]);
          hi = std::max(hi, len[i]);
        }
        ranges.push_back({lo, hi});
      }
      CHECK(a == b);  // a window holds the examples the plain shuffle put there
      CHECK(b.size() == window);
      for (size_t x = 0; x < ranges.size(); ++x)
        for (size_t y = x + 1; y < ranges.size(); ++y)  // batches are disjoint length ranges
          CHECK((ranges[x].second < ranges[y].first || ranges[y].second < ranges[x].first));
      for (size_t x = 1; x < ranges.size(); ++x)
        if (ranges[x].first < ranges[x - 1].first) {
          ++unsorted_windows;
          break;
        }
    }
    CHECK(epoch_seen.size() == n);
  }
  CHECK(unsorted_windows > 0);  // the batch order within a window is shuffled
  gf::BatchSampler walked(3, n, batch, bucket, len), fresh(3, n, batch, bucket, len);
  for (long s = 1; s < 30; ++s) walked.indices(s);
  CHECK(walked.indices(30) == fresh.indices(30));
  CHECK_THROWS_AS(gf::BatchSampler(3, n, batch, bucket, std::vector<size_t>(n - 1, 1)),
                  std::invalid_argument);
}

TEST_CASE("make_batch pads, truncates and keeps one position of an empty sequence") {
  std::vector<gf::Example> split = {{{5, 6, 7}, 1}, {{}, 0}, {{1, 2, 3, 4, 5, 6}, 2}};
  gf::Batch b = gf::make_batch(split, {0, 1, 2}, 4, 9);
  CHECK(b.batch == 3);
  CHECK(b.seq == 4);
  CHECK(b.ids == std::vector<int32_t>{5, 6, 7, 9, 9, 9, 9, 9, 1, 2, 3, 4});
  CHECK(b.valid == std::vector<uint8_t>{1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1});
  CHECK(b.labels == std::vector<int32_t>{1, 0, 2});
  auto batches = gf::sequential_batches(5, 2);
  CHECK(batches == std::vector<std::vector<size_t>>{{0, 1}, {2, 3}, {4}});
  CHECK(gf::sequential_batches(5, 2, 2).size() == 2);
}

TEST_CASE("schedule: warm-up, then cosine / linear / constant to min_lr_ratio") {
  gf::LrSchedule s{0.1, 10, 110, "cosine", 0.2};
  CHECK(s.at(5) == doctest::Approx(0.05));
  CHECK(s.at(10) == doctest::Approx(0.1));
  CHECK(s.at(60) == doctest::Approx(0.02 + 0.08 * 0.5));  // half way: cos(pi/2) = 0
  CHECK(s.at(110) == doctest::Approx(0.02));
  s.kind = "linear";
  CHECK(s.at(35) == doctest::Approx(0.02 + 0.08 * 0.75));
  s.kind = "constant";
  CHECK(s.at(100) == doctest::Approx(0.1));
}

TEST_CASE("clip_gradients scales the global norm down to the limit and leaves smaller ones") {
  gf::Tensor a({2}), b({1});
  a[0] = 3;
  a[1] = 0;
  b[0] = 4;
  gf::NamedParams ps = {{"a", gf::parameter(a)}, {"b", gf::parameter(b)}, {"c", gf::parameter(b)}};
  ps[0].second.grad_buf() = a.clone();
  ps[1].second.grad_buf() = b.clone();
  CHECK(gf::clip_gradients(ps, 10) == doctest::Approx(5));
  CHECK(ps[0].second.grad()[0] == 3);
  CHECK(gf::clip_gradients(ps, 1) == doctest::Approx(5));
  CHECK(ps[0].second.grad()[0] == doctest::Approx(0.6));
  CHECK(ps[1].second.grad()[0] == doctest::Approx(0.8));
  CHECK(gf::clip_gradients(ps, 0) == 0);
}

TEST_CASE("trainer state: the checkpoint entry round-trips; a broken one names the file") {
  gf::TrainerState s(3);
  s.step = 42;
  s.best_val = 0.75;
  s.best_step = 40;
  s.window = {1.5, 2, 3, 4};
  s.growth_rng.next_u64();
  gf::TrainerState t(9);
  t.from_json(s.to_json(), "ck");
  CHECK(t.step == 42);
  CHECK(t.best_val == 0.75);
  CHECK(t.best_step == 40);
  CHECK(t.window.loss == 1.5);
  CHECK(t.window.tokens == 4);
  CHECK(t.growth_rng.next_u64() == s.growth_rng.next_u64());
  CHECK(t.dropout_rng.next_u64() == s.dropout_rng.next_u64());
  // the checkpoint layout readers depend on
  json j = json::parse(s.to_json());
  CHECK(j["win"] == json({1.5, 2, 3, 4}));
  CHECK(j["rng"].size() == 3);
  CHECK(j["rng"][0][0] == s.dropout_rng.state());
  CHECK_THROWS_WITH_AS(t.from_json(R"({"step": 1})", "x.safetensors"),
                       doctest::Contains("x.safetensors: corrupt trainer state"), gf::RuntimeError);
}

TEST_CASE("train window: accuracy and loss from logits") {
  gf::Tensor l({2, 3});
  const float v[] = {0, 2, 1, 5, 0, 0};
  std::copy(v, v + 6, l.data());
  gf::Batch b;
  b.batch = 2;
  b.seq = 2;
  b.valid = {1, 1, 1, 0};
  b.labels = {1, 2};
  gf::TrainWindow w;
  w.add(gf::constant(l), b, 0.5f);
  CHECK(w.accuracy() == 0.5);
  CHECK(w.mean_loss() == 0.5);
  CHECK(w.tokens == 3);
}

TEST_CASE("probes carry their key mask; a CLS slot in front counts as real") {
  gf::Tensor x({2, 3, 1});
  gf::Probe p = gf::make_probe(x, {1, 0, 1, 1}, 2);
  CHECK(p.valid == std::vector<uint8_t>{1, 1, 0, 1, 1, 1});
  CHECK(p.mask() == &p.valid);
  CHECK(gf::Probe{x, {}}.mask() == nullptr);
  CHECK(gf::make_probe(gf::Tensor(), {1}, 1).valid.empty());
}

namespace {

struct Recorder : gf::EventSink {
  std::vector<gf::Event> events;
  void emit(const gf::Event& e) override { events.push_back(e); }
};

/// Adds a head at its first check and removes head REMOVE at its second; logs what it hears.
struct ScriptedPolicy : gf::GrowthPolicy {
  int remove = -1, checks = 0;
  std::vector<std::pair<gf::Edit::Kind, int>> heard;
  std::vector<gf::Edit> check(const gf::TrainView& v) override {
    gf::Edit e;
    e.block = 0;
    ++checks;
    if (remove < 0 || checks > 2) return {};
    if (checks == 1) {
      e.kind = gf::Edit::Kind::AddHead;
    } else {
      e.kind = gf::Edit::Kind::RemoveHead;
      e.head_id = remove;
    }
    (void)v;
    return {e};
  }
  void edited(const gf::Edit& e, int new_id, const gf::TrainView&) override {
    heard.push_back({e.kind, new_id});
  }
};

struct RecordingOptimizer : gf::Optimizer {
  std::vector<std::string> forgotten;
  void step(gf::NamedParams&, float) override {}
  void forget(const std::vector<std::string>& removed) override {
    forgotten.insert(forgotten.end(), removed.begin(), removed.end());
  }
  std::map<std::string, gf::Tensor> state_tensors() const override { return {}; }
  std::map<std::string, double> state_scalars() const override { return {}; }
  void load_state(const std::map<std::string, gf::Tensor>&, const std::map<std::string, double>&,
                  const gf::NamedParams&) override {}
};

}  // namespace

TEST_CASE("structure editor: applies edits, logs them, tells every policy, forgets removed state") {
  if (!gf_test::registry().find(gf::Kind::Attention, "mha")) {
    MESSAGE("mha plugin not built: skipped");
    return;
  }
  gf::Rng init(1, 1), grow(2, 2), prune(3, 3);
  gf::AttentionBuild build;
  build.d_model = 8;
  build.registry = &gf_test::registry();
  build.rng = &init;
  auto block = gf_test::registry().create_attention(
      gf::ConfigNode::load_string(
          "plugin: mha\nheads: 2\nmax_heads: 4\nhead: {plugin: dot_product}"),
      build);
  const int first = block->heads().front().id;
  gf::Module model;
  model.register_module("attn", block);
  ScriptedPolicy adder, remover;
  adder.remove = 1000;  // adds at the first check, then asks to remove a head it never had
  adder.checks = 0;
  remover.remove = first;
  remover.checks = 1;  // its next check is its removal
  Recorder sink;
  RecordingOptimizer opt;
  gf::StructureEditor ed({block.get()}, {{&adder, &grow, "growth"}, {&remover, &prune, "pruning"}},
                         &sink, 100);
  ed.set_optimizer(&model, &opt);
  std::vector<gf::Edit> edits = ed.check(10);
  REQUIRE(edits.size() == 2);
  CHECK(block->num_heads() == 2);  // one added, one removed
  REQUIRE(sink.events.size() == 2);
  CHECK(sink.events[0].type == "grow");
  CHECK(sink.events[0].strings ==
        std::vector<std::pair<std::string, std::string>>{{"policy", "growth"}, {"what", "head"}});
  CHECK(sink.events[0].lists[0].second == std::vector<double>{3});
  CHECK(sink.events[1].type == "prune");
  CHECK(sink.events[1].head == first);
  CHECK(sink.events[1].lists[0].second == std::vector<double>{2});
  // both policies heard both edits, with the new head's id for the addition
  REQUIRE(adder.heard.size() == 2);
  CHECK(adder.heard == remover.heard);
  CHECK(adder.heard[0].second == sink.events[0].head);
  CHECK(adder.heard[1].second == -1);
  // the removed head's parameters, and only those, left the optimizer
  REQUIRE(!opt.forgotten.empty());
  for (const auto& n : opt.forgotten)
    CHECK(n.find("heads." + std::to_string(first) + ".") != std::string::npos);
  // an edit of a block that does not exist is refused
  gf::Edit bad;
  bad.block = 3;
  CHECK_THROWS_AS(ed.apply(bad, 0, 20), gf::RuntimeError);
}

/// Names heads to mute in training and to ablate on the probe, as told.
struct MutingPolicy : gf::GrowthPolicy {
  std::vector<gf::HeadRef> heads;
  std::vector<gf::Edit> check(const gf::TrainView&) override { return {}; }
  std::vector<gf::HeadRef> muted_in_training(size_t) const override { return heads; }
  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView&) const override {
    return {heads};
  }
};

TEST_CASE("structure editor: a head a policy mutes or ablates must exist, named in the refusal") {
  if (!gf_test::registry().find(gf::Kind::Attention, "mha")) {
    MESSAGE("mha plugin not built: skipped");
    return;
  }
  gf::Rng init(1, 1), rng(2, 2);
  gf::AttentionBuild build;
  build.d_model = 8;
  build.registry = &gf_test::registry();
  build.rng = &init;
  auto block = gf_test::registry().create_attention(
      gf::ConfigNode::load_string("plugin: mha\nheads: 2\nhead: {plugin: dot_product}"), build);
  std::vector<int> ids;
  for (const gf::HeadInfo& h : block->heads()) ids.push_back(h.id);
  REQUIRE(ids.size() == 2);
  MutingPolicy policy;
  gf::StructureEditor ed({block.get()}, {{&policy, &rng, "pruning", "my_rule"}}, nullptr, 100);
  policy.heads = {{0, ids[1]}};  // a head the block holds: asked for as before
  CHECK(ed.muted_in_training(5) == policy.heads);
  CHECK(ed.probe_ablations(5) == std::vector<std::vector<gf::HeadRef>>{policy.heads});
  auto refusal = [&](auto&& f) {
    try {
      f();
    } catch (const gf::RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  policy.heads = {{0, ids[0]}, {0, 99}};  // head 99 was never there
  const std::string in_block =
      " head 99 of block 0, which has no such head (its heads: " + std::to_string(ids[0]) + ", " +
      std::to_string(ids[1]) + ")";
  CHECK(refusal([&] { ed.muted_in_training(5); }) ==
        "the pruning policy `my_rule` asked to mute in training" + in_block);
  CHECK(refusal([&] { ed.probe_ablations(5); }) ==
        "the pruning policy `my_rule` asked to ablate" + in_block);
  policy.heads = {{3, ids[0]}};
  CHECK(refusal([&] { ed.probe_ablations(5); }) ==
        "the pruning policy `my_rule` asked to ablate head " + std::to_string(ids[0]) +
            " of block 3, but the model has 1 block(s)");
}

TEST_CASE("reporter: metrics lines, events stamped with the step, summary only when non-empty") {
  gf_test::TempDir tmp;
  gf::RunDir dir((tmp.path / "run").string());
  fs::create_directories(dir.root());
  dir.reset_logs();
  {
    gf::Reporter r(dir, 100, true);
    r.start("");
    r.begin_step(20);
    gf::Event e;
    e.type = "check";
    e.numbers = {{"x", 1.5}, {"bad", NAN}};
    r.events().emit(e);
    gf::TrainWindow w{3.0, 1, 2, 10};
    r.end_step(20, w, {2});
    r.train(20, w, 0.5, {2});
    r.validation(20, gf::EvalResult{0.7, 0.25, 8}, {2});
    r.summary(100, {}, {});
    r.summary(100, {{"heads", 2}}, {});
  }
  auto m = read_lines(dir.metrics());
  REQUIRE(m.size() == 2);
  json t = json::parse(m[0]), v = json::parse(m[1]);
  CHECK(t["split"] == "train");
  CHECK(t["loss"] == 1.5);
  CHECK(t["accuracy"] == 0.5);
  CHECK(t["lr"] == 0.5);
  CHECK(t["heads"] == json({2}));
  CHECK(v["split"] == "val");
  CHECK(v["examples"] == 8);
  auto ev = read_lines(dir.events());
  REQUIRE(ev.size() == 2);
  json e0 = json::parse(ev[0]);
  CHECK(e0["step"] == 20);
  CHECK(e0["x"] == 1.5);
  CHECK(e0["bad"].is_null());
  json e1 = json::parse(ev[1]);
  CHECK(e1["type"] == "summary");
  CHECK(e1["step"] == 100);
  CHECK(e1["growth.heads"] == 2);
}

TEST_CASE(
    "parameter places follow the model's naming; a checkpoint's model is read without building "
    "it") {
  auto place = [](const std::string& n) {
    gf::ParamPlace p = gf::Model::place_of(n);
    return p.block + "|" + p.head;
  };
  CHECK(place("layers.1.attn.heads.12.w_q") == "layers.1|layers.1.attn.heads.12");
  CHECK(place("layers.10.attn.heads.3.b_v") == "layers.10|layers.10.attn.heads.3");
  CHECK(place("layers.0.attn.w_o.3") == "layers.0|");
  CHECK(place("layers.0.ln1.gamma") == "layers.0|");
  CHECK(place("classifier.w") == "classifier|");
  CHECK(place("embed") == "embed|");
  if (!gf_test::registry().find(gf::Kind::Attention, "mha")) {
    MESSAGE("mha plugin not built: skipped");
    return;
  }
  gf::ConfigNode cfg = gf::ConfigNode::load_string(
      "d_model: 12\nlayers: 2\nmax_len: 6\nattention: {plugin: mha, heads: 3}\n", "<test>");
  gf::Model model(cfg, 5, 2, gf_test::registry(), 7);
  gf::ConfigNode whole = gf::ConfigNode::load_string("seed: 1\n", "<test>");
  ScriptedPolicy none;
  RecordingOptimizer opt;
  gf::TrainerState st(1);
  st.step = 17;
  gf::Checkpoint ck = gf::make_training_checkpoint({&whole, &model, &opt, &none, &none, &st});
  gf::CheckpointModel m = gf::read_checkpoint_model(ck, "ck");
  CHECK(m.step == 17);
  CHECK(m.heads_per_block == std::vector<size_t>{3, 3});
  CHECK(m.architecture.size() == 2);
  // an independent count: the model's own parameters, grouped by their head's id
  std::map<std::string, size_t> heads_direct, heads_read;
  size_t total = 0;
  for (auto& [n, v] : model.named_parameters()) {
    auto at = n.find(".attn.heads.");
    if (at != std::string::npos)
      heads_direct[n.substr(0, n.find('.', at + 12))] += v.value().size();
  }
  for (auto& p : m.parameters) {
    total += p.size;
    if (!p.place.head.empty()) heads_read[p.place.head] += p.size;
  }
  CHECK(total == model.num_parameters());
  CHECK(heads_read == heads_direct);
  CHECK(heads_read.size() == 6);
  ck.metadata["heads"] = "[3, oops";
  CHECK_THROWS_WITH_AS(gf::read_checkpoint_model(ck, "ck.safetensors"),
                       doctest::Contains("ck.safetensors: corrupt `heads` record"),
                       gf::RuntimeError);
}

TEST_CASE(
    "run events: what the reporter logs reads back typed; a damaged line names the file and line") {
  gf_test::TempDir tmp;
  gf::RunDir dir((tmp.path / "run").string());
  fs::create_directories(dir.root());
  dir.reset_logs();
  {
    gf::Reporter r(dir, 100, true);
    r.start("");
    r.begin_step(30);
    gf::Event e;
    e.type = "grow";
    e.block = 1;
    e.head = 4;
    e.numbers = {{"W_t", 0.25}, {"bad", NAN}};
    e.strings = {{"policy", "growth"}};
    e.lists = {{"heads", {2, 3}}};
    r.events().emit(e);
    r.summary(100, {{"heads", 5}}, {});
  }
  auto ev = gf::read_run_events(dir.events());
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].step == 30);
  CHECK(ev[0].event.type == "grow");
  CHECK(ev[0].event.block == 1);
  CHECK(ev[0].event.head == 4);
  CHECK(ev[0].number("W_t") == 0.25);
  CHECK(std::isnan(*ev[0].number("bad")));
  CHECK_FALSE(ev[0].number("missing").has_value());
  CHECK(ev[0].text("policy") == "growth");
  CHECK(ev[0].text("missing").empty());
  REQUIRE(ev[0].event.lists.size() == 1);
  CHECK(ev[0].event.lists[0].second == std::vector<double>{2, 3});
  CHECK(ev[1].step == 100);
  CHECK(ev[1].number("growth.heads") == 5);
  std::ofstream(dir.events(), std::ios::app) << "{\"step\": 4}\n";
  const std::string where = dir.events() + ":3: not an event";
  CHECK_THROWS_WITH_AS(gf::read_run_events(dir.events()), doctest::Contains(where.c_str()),
                       gf::RuntimeError);
}
