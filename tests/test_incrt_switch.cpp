// train.switch: a stream whose labelling rule flips after step N (the I4 task-switch
// experiment's mechanism). A constructed two-task case: task A labels a sentence 1 when it
// holds the word `x`, task B labels it 0 then. The model learns A, so its accuracy on the
// training batch is high at step N and near zero at step N + 1 exactly when the switch is there.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "growformer/checkpoint.hpp"
#include "growformer/errors.hpp"
#include "growformer/trainer.hpp"
#include "testing.hpp"

using namespace gf;
namespace fs = std::filesystem;
using json = nlohmann::json;
using gf_test::metrics_without_timing;
using gf_test::TempDir;

namespace {

constexpr long kAt = 60, kSteps = 120;

/// Writes train/val/test TSVs of task A (FLIP false) or B (FLIP true) under DIR/NAME_*.tsv.
void write_task(const fs::path& dir, const std::string& name, bool flip, int classes = 2) {
  std::mt19937 rng(flip ? 11 : 5);
  const char* words[] = {"a", "b", "c", "d", "e"};
  for (auto [split, n] : {std::pair<const char*, int>{"train", 256}, {"val", 64}, {"test", 64}}) {
    std::ofstream out(dir / (name + "_" + split + ".tsv"));
    out << "sentence\tlabel\n";
    for (int i = 0; i < n; ++i) {
      bool has_x = rng() % 2 == 0;
      std::string s;
      for (int w = 0; w < 6; ++w) s += std::string(words[rng() % 5]) + " ";
      if (has_x) s += "x";
      int label = (has_x != flip) ? 1 : 0;
      if (classes > 2 && i % 7 == 0) label = 2;
      out << s << "\t" << label << "\n";
    }
  }
}

std::string data_section(const fs::path& dir, const std::string& name, const std::string& indent) {
  std::string p = (dir / name).string();
  return indent + "plugin: text_tsv\n" + indent + "train: " + p + "_train.tsv\n" + indent +
         "val: " + p + "_val.tsv\n" + indent + "test: " + p + "_test.tsv\n";
}

std::string config(const fs::path& dir, const std::string& b = "b") {
  return "name: switch\nseed: 3\nthreads: 1\ndata:\n" + data_section(dir, "a", "  ") +
         "model:\n  d_model: 16\n  layers: 1\n  max_len: 16\n"
         "  attention: {plugin: mha, heads: 1}\n"
         "optimizer: {plugin: adamw, lr: 0.01}\n"
         "train:\n  steps: " +
         std::to_string(kSteps) +
         "\n  batch_size: 32\n  warmup: 5\n  eval_every: 30\n  log_every: 1\n"
         "  check_every: 10\n  test_on: last\n  switch:\n    at: " +
         std::to_string(kAt) + "\n    data:\n" + data_section(dir, b, "      ");
}

int train(const std::string& cfg_text, const std::string& run_dir, long stop_after = -1,
          const std::vector<std::string>& sets = {}) {
  ConfigNode cfg = ConfigNode::load_string(cfg_text, "switch.yaml");
  for (auto& s : sets) cfg.apply_override(s);
  Experiment ex(cfg, {GF_PLUGIN_DIR});
  RunFlags f;
  f.run_dir = run_dir;
  f.quiet = true;
  f.stop_after = stop_after;
  return ex.train(f);
}

std::vector<json> events(const std::string& run_dir) {
  std::vector<json> out;
  std::ifstream in(run_dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

json metric(const std::vector<json>& m, long step, const std::string& split) {
  for (auto& j : m)
    if (j["step"] == step && j["split"] == split) return j;
  FAIL("no " << split << " line at step " << step);
  return json();
}

std::string config_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    ConfigNode cfg = ConfigNode::load_string(text, "switch.yaml");
    for (auto& s : sets) cfg.apply_override(s);
    Experiment ex(cfg, {GF_PLUGIN_DIR});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE(
    "train.switch: the labelling rule flips after exactly step N, visible in events and "
    "validation, and the final test is on the second task") {
  TempDir tmp;
  write_task(tmp.path, "a", false);
  write_task(tmp.path, "b", true);
  std::string run = (tmp.path / "run").string();
  REQUIRE(train(config(tmp.path), run) == 0);

  int switches = 0;
  for (auto& e : events(run))
    if (e["type"] == "task_switch") {
      ++switches;
      CHECK(e["step"] == kAt);
      CHECK(e["train_examples"] == 256);
    }
  CHECK(switches == 1);

  auto m = metrics_without_timing(run);
  // task A learned by step N; the batch of step N + 1 is task B's: the same rule now scores ~0
  CHECK(metric(m, kAt, "train")["accuracy"].get<double>() >= 0.9);
  CHECK(metric(m, kAt + 1, "train")["accuracy"].get<double>() <= 0.2);
  CHECK(metric(m, kAt - 1, "train")["accuracy"].get<double>() >= 0.9);
  // validation at N is task A's; the last one is task B's (the model relearned the flipped rule)
  CHECK(metric(m, kAt, "val")["accuracy"].get<double>() >= 0.9);
  CHECK(metric(m, kSteps, "val")["accuracy"].get<double>() >= 0.8);

  // the final test is task B's test split: evaluated independently from the last checkpoint
  auto ex = experiment_from_checkpoint(run + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  ex->load_weights(run + "/checkpoints/last.safetensors");
  REQUIRE(ex->switch_data().test.size() == 64);
  EvalResult b = ex->evaluate(ex->switch_data().test);
  EvalResult a = ex->evaluate(ex->data().test);
  json test = metric(m, kSteps, "test");
  CHECK(test["accuracy"].get<double>() == doctest::Approx(b.accuracy).epsilon(1e-12));
  CHECK(test["loss"].get<double>() == doctest::Approx(b.loss).epsilon(1e-6));
  CHECK(a.accuracy < 0.5);  // task A's rule is now the wrong one
}

TEST_CASE(
    "train.switch: a run stopped at or after the switch resumes to the uninterrupted result") {
  TempDir tmp;
  write_task(tmp.path, "a", false);
  write_task(tmp.path, "b", true);
  std::string full = (tmp.path / "full").string();
  REQUIRE(train(config(tmp.path), full) == 0);
  auto want = metrics_without_timing(full);
  auto want_events = events(full);
  for (long stop : {kAt, kAt + 7}) {
    CAPTURE(stop);
    std::string cut = (tmp.path / ("cut" + std::to_string(stop))).string();
    REQUIRE(train(config(tmp.path), cut, stop) == 0);
    auto ex = experiment_from_checkpoint(cut + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
    RunFlags f;
    f.quiet = true;
    REQUIRE(ex->resume(cut, f) == 0);
    auto got = metrics_without_timing(cut);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i]);
    CHECK(events(cut) == want_events);
  }
}

TEST_CASE("train.switch: bad values are refused with the key and the reason") {
  TempDir tmp;
  write_task(tmp.path, "a", false);
  write_task(tmp.path, "b", true);
  write_task(tmp.path, "three", true, 3);
  std::string ok = config(tmp.path);
  CHECK(config_error(ok).empty());
  std::string e = config_error(ok, {"train.switch.at=" + std::to_string(kSteps)});
  CHECK(e.find("train.switch.at") != std::string::npos);
  CHECK(e.find("before the last step") != std::string::npos);
  e = config_error(ok, {"train.switch.at=0"});
  CHECK(e.find("train.switch.at") != std::string::npos);
  e = config_error(ok, {"train.switch.when=3"});
  CHECK(e.find("unknown key") != std::string::npos);
  e = config_error(config(tmp.path, "three"));
  // text_tsv maps labels to the first data's classes and names the offending line
  CHECK(e.find("train.switch.data") != std::string::npos);
  CHECK(e.find("three_train.tsv:") != std::string::npos);
  e = config_error(ok, {"train.switch.data={plugin: listops, train_size: 64, val_size: 8, "
                        "test_size: 8}"});
  CHECK(e.find("train.switch.data: its vocabulary") != std::string::npos);
}

TEST_CASE("train.switch: a second data with another class count is refused (synthetic variants)") {
  std::string dir = std::string(GF_SHARED_DATA_DIR) + "/sars-cov-2";
  if (!fs::exists(dir + "/nextstrain_clades.tsv")) {
    MESSAGE("no " << dir << ": class-count check skipped");
    return;
  }
  auto data = [&](const std::string& clades) {
    return "{plugin: synthetic_variants, reference: " + dir +
           "/MN908947.fasta, clades_tsv: " + dir + "/nextstrain_clades.tsv, clades: " + clades +
           ", per_clade: 10, region_start: 21563, region_end: 23650}";
  };
  std::string text = "name: s\ndata: " + data("[19A, 20A, 20E]") +
                     "\nmodel: {d_model: 8, layers: 1, max_len: 400, attention: {plugin: mha, "
                     "heads: 1}}\ntrain: {steps: 10, switch: {at: 5, data: " +
                     data("[20H, 20I]") + "}}\n";
  std::string e = config_error(text);
  CHECK(e.find("train.switch.data: it has 2 classes (20H, 20I)") != std::string::npos);
  CHECK(e.find("the first data has 3 (19A, 20A, 20E)") != std::string::npos);
  // three other clades of the same region: accepted (class names may differ)
  CHECK(config_error(text, {"train.switch.data.clades=[20H, 20I, 21A]"}).empty());
}
