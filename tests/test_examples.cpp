// The out-of-tree C++ growth policy example (examples/grow_on_plateau): it trains from one head
// and grows on plateaus, resumes exactly (found again through plugins.lock), its signal is
// drawn by `growformer report` and its summary column is in the sweep table. The head plugin
// template (examples/plugin_template): its option from its table, described, checked, trained.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "testing.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
using Cli = gf_test::Shell;
Cli run_cli(const std::string& args, const gf_test::TempDir&) {
  return gf_test::run_shell(std::string(GF_BIN) + " " + args);
}
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }
std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const char* kTiny = R"(name: plateau
seed: 4
threads: 1
data: {plugin: listops, train_size: 128, val_size: 32, test_size: 32, min_length: 4, max_length: 16,
       max_depth: 2, max_args: 3}
model: {d_model: 16, layers: 2, max_len: 20, attention: {plugin: mha, heads: 1}}
optimizer: {plugin: adamw, lr: 0.003}
train: {steps: 24, batch_size: 16, warmup: 2, eval_every: 8, log_every: 4, check_every: 4}
growth: {plugin: grow_on_plateau, patience: 1, min_delta: 1.0, max_heads: 3}
)";
}  // namespace

TEST_CASE(
    "grow_on_plateau (C++ example): grows, resumes exactly through the lock, its signal plotted") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTiny;
  const std::string plug = " --plugin-path " GF_EXAMPLE_PLUGIN_DIR;
  Cli whole = run_cli(
      "train " + dir.file("tiny.yaml") + " --run-dir " + dir.file("whole") + plug + " -q", dir);
  REQUIRE_MESSAGE(whole.status == 0, whole.output);
  // it grew on plateaus (one head to every block at a time), logged with the loss
  std::string events = slurp(dir.file("whole/events.jsonl"));
  CHECK(has(events, "\"type\":\"grow\""));
  CHECK(has(events, "plateau at loss"));
  CHECK(has(events, "\"plot\":\"train_loss waited\""));
  std::vector<json> m = gf_test::metrics_without_timing(dir.file("whole"));
  REQUIRE(!m.empty());
  json last_train;
  for (auto& j : m)
    if (j["split"] == "train") last_train = j;
  // min_delta 1 is never met: it grows at every second check (8 and 16), then stops at max_heads
  CHECK(last_train["heads"] == json::array({3, 3}));
  // stopped after step 10 and resumed without --plugin-path: the same metrics to the end
  Cli part = run_cli("train " + dir.file("tiny.yaml") + " --run-dir " + dir.file("part") + plug +
                         " --stop-after 10 -q",
                     dir);
  REQUIRE_MESSAGE(part.status == 0, part.output);
  Cli res = run_cli("resume " + dir.file("part") + " -q", dir);
  REQUIRE_MESSAGE(res.status == 0, res.output);
  CHECK(gf_test::metrics_without_timing(dir.file("part")) == m);
  // the report draws its signal (one figure per plotted name)
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    MESSAGE("skipped the report: gnuplot is not installed (apt-get install gnuplot-nox)");
    return;
  }
  Cli rep = run_cli("report " + dir.file("whole"), dir);
  REQUIRE_MESSAGE(rep.status == 0, rep.output);
  fs::path fig = dir.file("whole/report/figures/signal_grow_on_plateau_train_loss.svg");
  CHECK(fs::exists(fig));
  CHECK(fs::exists(dir.file("whole/report/figures/signal_grow_on_plateau_waited.svg")));
  CHECK(has(slurp(fig.string()), "grow_on_plateau: train_loss"));
}

TEST_CASE("sweep: the policies' summary columns, and no INCRT columns without INCRT") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTiny;
  std::ofstream(dir.file("sweep.yaml"))
      << "name: t\nbase: tiny.yaml\nseeds: [1]\nset: [train.steps=8]\naxes:\n  growth:\n"
         "    none: {plugin: none}\n    plateau: {plugin: grow_on_plateau, patience: 1, min_delta: "
         "1.0}\n";
  Cli c = run_cli("sweep " + dir.file("sweep.yaml") + " --out " + dir.file("out") +
                      " --plugin-path " GF_EXAMPLE_PLUGIN_DIR " -q",
                  dir);
  REQUIRE_MESSAGE(c.status == 0, c.output);
  std::istringstream jobs(slurp(dir.file("out/summary.csv"))),
      groups(slurp(dir.file("out/groups.csv")));
  std::string jh, none, plateau, gh;
  std::getline(jobs, jh);
  std::getline(jobs, none);
  std::getline(jobs, plateau);
  std::getline(groups, gh);
  CHECK(jh == "job,growth,seed,test_accuracy,best_val_accuracy,params,heads,grown,time_s,exit");
  CHECK(gh == "growth,seeds,test_accuracy,best_val_accuracy,params,grown,time_s");
  CHECK(!has(jh, "K_obs"));
  // checks at steps 4 and 8: it grew both blocks once, at the second; none has no such cell
  CHECK(has(plateau, ",2.0000,"));
  CHECK(has(none, ",,"));
}

TEST_CASE(
    "temperature_dot (C++ head template): its option from its table, a bad value named, trains") {
  gf_test::TempDir dir;
  const std::string plug = " --plugin-path " GF_EXAMPLE_HEAD_PLUGIN_DIR;
  const Cli described = run_cli("plugins describe temperature_dot" + plug, dir);
  INFO(described.output);
  REQUIRE(described.status == 0);
  CHECK(has(described.output, "initial_temperature (float, default 1.0)"));
  CHECK(has(described.output, "starting temperature"));
  std::ofstream(dir.file("tiny.yaml")) << kTiny;
  const std::string train =
      "train " + dir.file("tiny.yaml") + plug +
      " --set 'growth={plugin: none}' --set train.steps=4 --set train.eval_every=4 -q";
  const Cli bad = run_cli(train + " --run-dir " + dir.file("bad") +
                              " --set 'model.attention.head={plugin: temperature_dot, "
                              "initial_temperature: 0}'",
                          dir);
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK(has(bad.output,
            "`model.attention.head.initial_temperature`: value 0 out of range [0.01, 100]"));
  const Cli ok = run_cli(train + " --run-dir " + dir.file("ok") +
                             " --set 'model.attention.head={plugin: temperature_dot, "
                             "initial_temperature: 2}'",
                         dir);
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(has(slurp(dir.file("ok") + "/config.resolved.yaml"), "initial_temperature: 2"));
}
