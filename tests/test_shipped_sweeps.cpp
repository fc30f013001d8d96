// Every shipped sweep file (configs/experiments/, configs/sweeps/) plans, and every one of its
// jobs' resolved configs holds (plugins' option specs included), checked without training or
// reading data (`growformer sweep FILE --check`): a broken shipped experiment file fails here.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "testing.hpp"

namespace fs = std::filesystem;

namespace {
gf_test::Shell run_cli(const std::string& args) {
  return gf_test::run_shell(std::string(GF_BIN) + " " + args);
}
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// the sweep files (a top-level `base:`) of a folder; base configs are checked through them
std::vector<std::string> sweep_files(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("base:", 0) == 0) {
        out.push_back(e.path().string());
        break;
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("every shipped sweep file's jobs have valid configs") {
  std::vector<std::string> files = sweep_files(std::string(GF_SOURCE_DIR) + "/configs/experiments");
  for (auto& f : sweep_files(std::string(GF_SOURCE_DIR) + "/configs/sweeps")) files.push_back(f);
  REQUIRE(files.size() >= 20);
  const bool shared_data = fs::is_directory(GF_SHARED_DATA_DIR);
  size_t checked = 0;
  for (auto& f : files) {
    INFO(f);
    gf_test::Shell c = run_cli("sweep " + f + " --check");
    INFO(c.output);
    // without ../shared/data a job reading its files names the missing file: skipped
    if (c.status != 0 && !shared_data && has(c.output, "file not found")) {
      MESSAGE("skipped (../shared/data absent): " << f);
      continue;
    }
    // a bf16 sweep on a CPU without AVX512_BF16 is refused before anything runs, saying why
    // (its other settings are checked where the CPU has it)
    if (c.status != 0 && has(c.output, "cannot run here: this CPU has no AVX512_BF16")) {
      MESSAGE("skipped (no AVX512_BF16 on this CPU): " << f);
      continue;
    }
    CHECK(c.status == 0);
    CHECK(has(c.output, "are valid (no data read, nothing run)"));
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE(
    "sweep --check refuses a typo in one axis value naming the job and key, running nothing") {
  fs::path dir = fs::temp_directory_path() / ("gf_sweep_check_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "base.yaml")
      << "name: t\nthreads: 1\ndata: {plugin: listops, train_size: 32, val_size: 8, test_size: 8, "
         "min_length: 4, max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 1}}\n"
         "train: {steps: 4, batch_size: 8, warmup: 1, eval_every: 2}\n";
  // the third combination's growth value has a misspelt option of a plugin
  std::ofstream(dir / "sweep.yaml")
      << "name: t\nbase: base.yaml\nseeds: [1]\naxes:\n  growth:\n    plain: {plugin: none}\n"
         "    sched: {plugin: fixed_schedule, every: 2, max_heads: 3}\n"
         "    typo: {plugin: fixed_schedule, evrey: 2}\n";
  for (std::string extra : {" --check", ""}) {
    INFO(extra);
    fs::path out = dir / "out";
    gf_test::Shell c =
        run_cli("sweep " + (dir / "sweep.yaml").string() + " --out " + out.string() + extra);
    INFO(c.output);
    CHECK(c.status == 2);
    CHECK(has(c.output, "sweep job 3/3 `typo__seed1`"));
    CHECK(has(c.output, "evrey"));
    CHECK(has(c.output, "did you mean `every`"));
    CHECK(has(c.output, "nothing was run"));
    CHECK(!fs::exists(out));  // not one job ran, the sweep directory not even made
  }
  fs::remove_all(dir);
}
