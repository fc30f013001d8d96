// Data-parallel training under mpirun (registered only when the build found MPI): two processes
// sharing each batch of 32 train as one process does on the whole batch (losses and accuracies
// to float-reduction tolerance, the same growth edits), a two-process resume continues exactly,
// and resume works with another process count.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "testing.hpp"

using json = nlohmann::json;
namespace fs = std::filesystem;
using gf_test::metrics_without_timing;

namespace {

// A one-block INCRT run on generated ListOps that grows from one head to four within 40 steps,
// with dropout (each shard must draw its rows of the whole batch's mask) and a pruning rule.
const char* kTinyIncrt = R"(name: tiny_incrt
seed: 3
threads: 1
data:
  plugin: listops
  train_size: 320
  val_size: 72
  test_size: 71
  min_length: 4
  max_length: 24
  max_depth: 3
  max_args: 4
model:
  d_model: 16
  layers: 1
  max_len: 32
  dropout: 0.1
  attention:
    plugin: mha
    heads: 1
    d_k: 8
    max_heads: 8
    head: {plugin: dot_product}
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 40
  batch_size: 32
  warmup: 5
  eval_every: 10
  log_every: 5
  check_every: 2
growth:
  plugin: incrt_geometric
  criterion: energy
  tracker: exact
  calibration: fixed
  calibration_checks: 2
  thresholds: calibrated
  spectrum: positive
  theta_w: 0.05
  dwell_checks: 1
  init: directed
  max_heads: 4
pruning:
  plugin: directional_energy
  calibration_checks: 2
  grace: 10
)";

struct Run {
  int status;
  std::string output;
};

// PROCS processes (0 = without mpirun) of `growformer ARGS`, at most 120 s.
Run growformer(int procs, const std::string& args, const gf_test::TempDir& dir) {
  std::string out = dir.file("out.txt");
  // shared-memory transfers without cross-process memory access (ptrace), which containers
  // often forbid: the tests' messages are small either way
  std::string launch = procs > 0 ? std::string(GF_MPIRUN) +
                                       " --oversubscribe --allow-run-as-root "
                                       "--mca btl_vader_single_copy_mechanism none -np " +
                                       std::to_string(procs) + " "
                                 : "";
  std::string cmd = "timeout 120 " + launch + GF_BIN + " " + args + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WEXITSTATUS(rc), ss.str()};
}

std::vector<json> edits(const std::string& run) {
  std::vector<json> out;
  std::ifstream in(run + "/events.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j["type"] != "check") out.push_back(j);
  }
  return out;
}

bool close(double a, double b, double rel) {
  return std::fabs(a - b) <= rel * std::max(1.0, std::max(std::fabs(a), std::fabs(b)));
}

// Every line the same (step, split, heads, examples, accuracy), losses within REL.
void check_same_metrics(const std::vector<json>& a, const std::vector<json>& b, double rel) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("line " << i << ": " << a[i].dump() << " vs " << b[i].dump());
    CHECK(a[i]["step"] == b[i]["step"]);
    CHECK(a[i]["split"] == b[i]["split"]);
    CHECK(a[i]["heads"] == b[i]["heads"]);
    CHECK(a[i].value("examples", 0) == b[i].value("examples", 0));
    CHECK(a[i]["accuracy"].get<double>() == b[i]["accuracy"].get<double>());
    CHECK(close(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), rel));
    if (a[i].contains("majority_class_accuracy"))
      CHECK(a[i]["majority_class_accuracy"] == b[i]["majority_class_accuracy"]);
  }
}

}  // namespace

TEST_CASE("2 processes x 16 examples train as 1 process x 32: metrics and growth edits") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTinyIncrt;
  std::string one = dir.file("one"), two = dir.file("two");
  Run a = growformer(0, "train " + dir.file("tiny.yaml") + " -q --run-dir " + one, dir);
  REQUIRE_MESSAGE(a.status == 0, a.output);
  Run b = growformer(2, "train " + dir.file("tiny.yaml") + " --run-dir " + two, dir);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  CHECK(b.output.find("data-parallel: 2 processes") != std::string::npos);
  CHECK(b.output.find("16 examples each per step") != std::string::npos);
  // rank 0 alone reports: one banner, one test line
  CHECK(b.output.find("training tiny_incrt") == b.output.rfind("training tiny_incrt"));

  auto ma = metrics_without_timing(one), mb = metrics_without_timing(two);
  check_same_metrics(ma, mb, 1e-5);
  REQUIRE(mb.back()["split"] == "test");
  CHECK(mb.back()["examples"] == 71);  // every test example once, though 71 is odd

  auto ea = edits(one), eb = edits(two);
  size_t grows = 0;
  REQUIRE(ea.size() == eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    INFO(ea[i].dump() << " vs " << eb[i].dump());
    for (auto k : {"type", "step", "block", "head", "heads", "policy", "init"})
      CHECK(ea[i].value(k, json()) == eb[i].value(k, json()));
    if (ea[i].contains("lambda_max"))
      CHECK(close(ea[i]["lambda_max"].get<double>(), eb[i]["lambda_max"].get<double>(), 1e-4));
    grows += ea[i]["type"] == "grow";
  }
  CHECK(grows == 3);  // 1 -> 4 heads: the run did grow
}

TEST_CASE(
    "a 2-process run resumed from its checkpoint equals the uninterrupted run; resume "
    "with 1 process continues it too") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTinyIncrt;
  std::string full = dir.file("full"), cut = dir.file("cut"), cut1 = dir.file("cut1");
  std::string cfg = dir.file("tiny.yaml");
  REQUIRE(growformer(2, "train " + cfg + " -q --run-dir " + full, dir).status == 0);
  // stopped after step 15 (between checks, after the growth): a checkpoint, exit 0
  Run s = growformer(2, "train " + cfg + " -q --run-dir " + cut + " --stop-after 15", dir);
  REQUIRE_MESSAGE(s.status == 0, s.output);
  CHECK(s.output.find("stopped at step 15") != std::string::npos);
  fs::copy(cut, cut1, fs::copy_options::recursive);
  Run r = growformer(2, "resume " + cut + " -q", dir);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  auto mf = metrics_without_timing(full), mr = metrics_without_timing(cut);
  REQUIRE(mf.size() == mr.size());
  for (size_t i = 0; i < mf.size(); ++i) CHECK(mf[i] == mr[i]);
  CHECK(edits(full) == edits(cut));

  Run r1 = growformer(0, "resume " + cut1 + " -q", dir);
  REQUIRE_MESSAGE(r1.status == 0, r1.output);
  check_same_metrics(mf, metrics_without_timing(cut1), 1e-5);
}

TEST_CASE("a batch smaller than the process count is refused with one message") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTinyIncrt;
  Run r = growformer(
      2,
      "train " + dir.file("tiny.yaml") + " --set train.batch_size=1 --run-dir " + dir.file("run"),
      dir);
  CHECK(r.status == 2);
  CHECK(r.output.find("train.batch_size: 1 examples per step cannot be shared by 2 processes") !=
        std::string::npos);
}

TEST_CASE("processes given different run directories stop with one message, nothing written") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTinyIncrt;
  // one process per launch spec (MPMD): rank 0 gets A, rank 1 gets B
  std::string a = dir.file("A"), b = dir.file("B");
  std::string one = std::string(GF_BIN) + " train " + dir.file("tiny.yaml") + " --quiet --run-dir ";
  Run r = growformer(
      1, "train " + dir.file("tiny.yaml") + " --quiet --run-dir " + a + " : -np 1 " + one + b, dir);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("--run-dir: the processes of this run were given different ones") !=
        std::string::npos);
  CHECK(!fs::exists(a));
  CHECK(!fs::exists(b));
}

TEST_CASE("mpirun -np 2 sweep: jobs spread over the processes, a failing job recorded, one table") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTinyIncrt;
  // four jobs, one failing (its data file is malformed: the config holds, the job fails when
  // it reads the data); rank 0 runs jobs 1 and 3, rank 1 jobs 2 and 4
  std::ofstream(dir.file("bad.tsv")) << "no header here\n";
  std::ofstream(dir.file("sweep.yaml"))
      << "name: t\nbase: " << dir.file("tiny.yaml")
      << "\nseeds: [1, 2]\nset: [train.steps=6, train.eval_every=3]\n"
         "axes:\n  data:\n    plain: {plugin: listops, train_size: 320, val_size: 72, test_size: "
         "71, "
         "min_length: 4, max_length: 24, max_depth: 3, max_args: 4}\n"
         "    broken: {plugin: text_tsv, train: "
      << dir.file("bad.tsv") << "}\n";
  std::string out = dir.file("sweep");
  Run r = growformer(2, "sweep " + dir.file("sweep.yaml") + " --out " + out + " -q", dir);
  INFO(r.output);
  CHECK(r.status == 1);  // a job failed; the others ran
  CHECK(r.output.find("(2 processes)") != std::string::npos);
  CHECK(r.output.find("rank 0 [1/4] plain__seed1: ran") != std::string::npos);
  CHECK(r.output.find("rank 1 [2/4] plain__seed2: ran") != std::string::npos);
  CHECK(r.output.find("rank 0 [3/4] broken__seed1: ran and FAILED") != std::string::npos);
  CHECK(r.output.find(dir.file("bad.tsv")) != std::string::npos);
  // one table, by rank 0, holding every job
  CHECK(r.output.find("| plain__seed2 |") == r.output.rfind("| plain__seed2 |"));
  std::ifstream g(out + "/groups.csv");
  std::string header, plain, broken;
  std::getline(g, header);
  std::getline(g, plain);
  std::getline(g, broken);
  CHECK(plain.rfind("plain,2/2,", 0) == 0);
  CHECK(broken.rfind("broken,0/2,", 0) == 0);
  // each job single-process: the job run by rank 1 trained alone (no data-parallel banner)
  CHECK(fs::exists(out + "/plain__seed2/metrics.jsonl"));
}

TEST_CASE(
    "2 processes: random growth and head-importance pruning (head-mask gradients summed "
    "across processes) make the edits of 1 process") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("hi.yaml")) << R"(name: hi
seed: 5
threads: 1
data: {plugin: listops, train_size: 320, val_size: 64, test_size: 64, min_length: 4, max_length: 24}
model: {d_model: 16, layers: 2, max_len: 32, dropout: 0.1, attention: {plugin: mha, heads: 4}}
optimizer: {plugin: adamw, lr: 0.003}
train: {steps: 40, batch_size: 32, eval_every: 20, log_every: 10, check_every: 5}
growth: {plugin: random, probability: 0.4, max_heads: 6}
pruning: {plugin: head_importance, grace: 5, mode: fraction, fraction: 0.3, min_heads: 1}
)";
  std::string one = dir.file("one"), two = dir.file("two");
  REQUIRE(growformer(0, "train " + dir.file("hi.yaml") + " -q --run-dir " + one, dir).status == 0);
  REQUIRE(growformer(2, "train " + dir.file("hi.yaml") + " -q --run-dir " + two, dir).status == 0);
  auto ea = edits(one), eb = edits(two);
  REQUIRE(ea.size() == eb.size());
  size_t prunes = 0, grows = 0;
  for (size_t i = 0; i < ea.size(); ++i) {
    for (auto k : {"type", "step", "block", "head", "heads", "policy"})
      CHECK(ea[i].value(k, json()) == eb[i].value(k, json()));
    prunes += ea[i]["type"] == "prune";
    grows += ea[i]["type"] == "grow";
  }
  CHECK(prunes >= 5);
  CHECK(grows >= 2);
  check_same_metrics(metrics_without_timing(one), metrics_without_timing(two), 1e-5);
}

TEST_CASE("processes whose growth diverges stop at that check with a message naming the step") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTinyIncrt;
  std::string run = dir.file("run");
  Run r = growformer(2,
                     "train " + dir.file("tiny.yaml") + " --plugin-path " + GF_RANK_PLUGIN_DIR +
                         " --set 'growth={plugin: rank_divergent}' --set 'pruning={plugin: none}'"
                         " --run-dir " +
                         run,
                     dir);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("the 2 processes of this data-parallel run hold different models after the "
                      "structure check (step 2)") != std::string::npos);
  // the checkpoint of an earlier step (none here: the first check is at step 2) is not touched
  CHECK_FALSE(fs::exists(run + "/checkpoints/last.safetensors"));
}

TEST_CASE("2 processes grow the MLP as 1 process does: the same edits, widths and metrics") {
  gf_test::TempDir dir;
  std::string cfg = kTinyIncrt;
  cfg = cfg.substr(0, cfg.find("growth:")) +
        "growth: {plugin: mlp_schedule, at: [10, 24], units: 8}\n";
  std::ofstream(dir.file("mlp.yaml")) << cfg;
  std::string one = dir.file("one"), two = dir.file("two");
  Run a = growformer(0, "train " + dir.file("mlp.yaml") + " -q --run-dir " + one, dir);
  REQUIRE_MESSAGE(a.status == 0, a.output);
  Run b = growformer(2, "train " + dir.file("mlp.yaml") + " -q --run-dir " + two, dir);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  check_same_metrics(metrics_without_timing(one), metrics_without_timing(two), 1e-5);
  auto mlp_edits = [](std::vector<json> all) {
    all.erase(std::remove_if(all.begin(), all.end(),
                             [](const json& j) { return j.value("what", "") != "mlp_units"; }),
              all.end());
    return all;
  };
  auto ea = mlp_edits(edits(one)), eb = mlp_edits(edits(two));
  REQUIRE(ea.size() == 2);
  REQUIRE(eb.size() == 2);
  for (size_t i = 0; i < ea.size(); ++i)
    for (auto k : {"type", "step", "block", "what", "units", "width", "mlp_widths", "policy"})
      CHECK(ea[i].value(k, json()) == eb[i].value(k, json()));
  CHECK(eb[1]["mlp_widths"] == json::array({80}));  // 64 + 8 + 8: both growths happened
}

TEST_CASE("2 processes deepen the model as 1 process does: the same edits, blocks and metrics") {
  gf_test::TempDir dir;
  std::string cfg = kTinyIncrt;
  // INCRT's pruning keeps state per block: it moves with the blocks on every process alike
  cfg = cfg.substr(0, cfg.find("growth:")) +
        "growth: {plugin: depth_schedule, at: [10, 24], index: 0}\n" +
        cfg.substr(cfg.find("pruning:"));
  std::ofstream(dir.file("depth.yaml")) << cfg;
  std::string one = dir.file("one"), two = dir.file("two");
  Run a = growformer(0, "train " + dir.file("depth.yaml") + " -q --run-dir " + one, dir);
  REQUIRE_MESSAGE(a.status == 0, a.output);
  Run b = growformer(2, "train " + dir.file("depth.yaml") + " -q --run-dir " + two, dir);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  check_same_metrics(metrics_without_timing(one), metrics_without_timing(two), 1e-5);
  auto block_edits = [](std::vector<json> all) {
    all.erase(std::remove_if(all.begin(), all.end(),
                             [](const json& j) { return j.value("what", "") != "block"; }),
              all.end());
    return all;
  };
  auto ea = block_edits(edits(one)), eb = block_edits(edits(two));
  REQUIRE(ea.size() == 2);
  REQUIRE(eb.size() == 2);
  for (size_t i = 0; i < ea.size(); ++i)
    for (auto k : {"type", "step", "block", "what", "op", "blocks", "heads", "policy"})
      CHECK(ea[i].value(k, json()) == eb[i].value(k, json()));
  CHECK(eb[1]["blocks"] == 3);  // 1 + 1 + 1: both insertions happened
}
