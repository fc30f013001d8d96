// The out-of-tree C++ growth policy example (examples/grow_on_plateau): it trains from one head
// and grows on plateaus and resumes exactly (found again through plugins.lock).
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

TEST_CASE("grow_on_plateau (C++ example): grows, resumes exactly through the lock") {
  gf_test::TempDir dir;
  std::ofstream(dir.file("tiny.yaml")) << kTiny;
  const std::string plug = " --plugin-path " GF_EXAMPLE_PLUGIN_DIR;
  Cli whole = run_cli("train " + dir.file("tiny.yaml") + " --run-dir " + dir.file("whole") + plug + " -q", dir);
  REQUIRE_MESSAGE(whole.status == 0, whole.output);
  // it grew on plateaus (one head to every block at a time), logged with the loss
  std::string events = slurp(dir.file("whole/events.jsonl"));
  CHECK(has(events, "\"type\":\"grow\""));
  CHECK(has(events, "plateau at loss"));
  std::vector<json> m = gf_test::metrics_without_timing(dir.file("whole"));
  REQUIRE(!m.empty());
  json last_train;
  for (auto& j : m)
    if (j["split"] == "train") last_train = j;
  // min_delta 1 is never met: it grows at every second check (8 and 16), then stops at max_heads
  CHECK(last_train["heads"] == json::array({3, 3}));
  // stopped after step 10 and resumed without --plugin-path: the same metrics to the end
  Cli part = run_cli("train " + dir.file("tiny.yaml") + " --run-dir " + dir.file("part") + plug +
                         " --stop-after 10 -q", dir);
  REQUIRE_MESSAGE(part.status == 0, part.output);
  Cli res = run_cli("resume " + dir.file("part") + " -q", dir);
  REQUIRE_MESSAGE(res.status == 0, res.output);
  CHECK(gf_test::metrics_without_timing(dir.file("part")) == m);
}
