// A checkpoint never runs code the user did not choose: eval, predict, analyze, inspect and
// report build no growth or pruning policy and load none of the plugin libraries a checkpoint
// records unless told to (--trust-checkpoint-plugins); resume checks the libraries of the run's
// plugins.lock before loading them. The library of tests/evil_plugins leaves a mark when it is
// loaded (its static constructor) and when its policies are built.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "growformer/checkpoint.hpp"
#include "growformer/config.hpp"
#include "growformer/data/io.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using gf_test::TempDir;

namespace {

const std::string kEvil = std::string(GF_EVIL_PLUGIN_DIR) + "/libgf_evil.so";

bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// A tiny text_tsv run in DIR/run trained with PLUGIN_DIR on the search path (so that the
// checkpoint records its library and plugins.lock names it) and GROWTH/PRUNING as its policies.
std::string train_run(const TempDir& dir, const std::string& plugin_dir, const std::string& growth,
                      const std::string& pruning) {
  std::string rows = "sentence\tlabel\n";
  const char* words[] = {"film", "plot", "story", "fun", "dull"};
  for (int i = 0; i < 48; ++i)
    rows += std::string(words[i % 5]) + (i % 2 ? " bad\t0\n" : " good\t1\n");
  gf::write_file(dir.file("train.tsv"), rows);
  gf::write_file(dir.file("test.tsv"), "sentence\tlabel\ngood film\t1\nbad plot\t0\n");
  gf::write_file(dir.file("in.txt"), "good film\nbad plot\n");
  std::ofstream(dir.file("run.yaml"))
      << "name: t\nseed: 3\nthreads: 1\n"
         "data: {plugin: text_tsv, train: train.tsv, test: test.tsv, val_ratio: 0.2}\n"
         "model: {d_model: 8, layers: 1, max_len: 8, attention: {plugin: mha, heads: 2}}\n"
         "optimizer: {plugin: adamw, lr: 0.01}\n"
         "train: {steps: 6, batch_size: 8, warmup: 1, eval_every: 3, log_every: 3, "
         "check_every: 3}\n"
      << "growth: {plugin: " << growth << "}\npruning: {plugin: " << pruning << "}\n";
  gf_test::Shell t =
      gf_test::run_shell(std::string(GF_BIN) + " train " + dir.file("run.yaml") + " --run-dir " +
                         dir.file("run") + " --quiet --plugin-path " + plugin_dir);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  return dir.file("run");
}

// The growformer command ARGS with the marks of the evil library going to MARKS.
gf_test::Shell run_marked(const std::string& marks, const std::string& args) {
  fs::create_directories(marks);
  return gf_test::run_shell("cd " + marks + "/.. && GF_EVIL_MARKER_DIR=" + marks + " " +
                            std::string(GF_BIN) + " " + args);
}

// CK rewritten with its metadata changed by EDIT (the checksum recomputed, as an attacker would).
void edit_checkpoint(const std::string& ck, const std::function<void(gf::Checkpoint&)>& edit) {
  gf::Checkpoint c = gf::load_checkpoint(ck);
  edit(c);
  gf::save_checkpoint(ck, c);
}

}  // namespace

TEST_CASE("eval, predict and analyze never build a checkpoint's growth or pruning policy") {
  TempDir dir;
  const std::string run = train_run(dir, GF_EVIL_PLUGIN_DIR, "evil_growth", "evil_pruning");
  const std::string ck = run + "/checkpoints/last.safetensors", marks = dir.file("marks");
  // the user names the library's folder: loading it is their choice; building its policies is not
  // what eval, predict and analyze need
  const std::string paths = " --plugin-path " + std::string(GF_EVIL_PLUGIN_DIR);
  gf_test::Shell e = run_marked(marks, "eval " + ck + " --json" + paths);
  CHECK_MESSAGE(e.status == 0, e.output);
  gf_test::Shell p = run_marked(marks, "predict " + ck + " " + dir.file("in.txt") + paths);
  CHECK_MESSAGE(p.status == 0, p.output);
  gf_test::Shell a = run_marked(marks, "analyze " + ck + " --json" + paths);
  CHECK_MESSAGE(a.status == 0, a.output);
  CHECK(fs::exists(marks + "/constructor"));  // the library was loaded (the user named it)
  CHECK_MESSAGE(!fs::exists(marks + "/factory"), "a policy was built");
}

TEST_CASE("a checkpoint's recorded plugin folders are used only on --trust-checkpoint-plugins") {
  TempDir dir;
  // the library in a folder of its own, off the search path: the checkpoint records it
  fs::create_directories(dir.file("lib"));
  fs::copy_file(kEvil, dir.file("lib/libgf_evil.so"));
  const std::string run = train_run(dir, dir.file("lib"), "none", "none");
  const std::string ck = run + "/checkpoints/last.safetensors", marks = dir.file("marks");
  {
    gf::Checkpoint c = gf::load_checkpoint(ck);
    REQUIRE(c.metadata.count("plugin_libraries"));
    CHECK(has(c.metadata["plugin_libraries"], dir.file("lib/libgf_evil.so")));
  }
  // without the opt-in nothing of the recorded library is loaded, listed or probed
  for (const std::string& args :
       {"eval " + ck + " --json", "eval " + run + " --split val",
        "predict " + ck + " " + dir.file("in.txt"), "analyze " + ck, "inspect " + ck,
        "report " + run + " --out " + dir.file("report")}) {
    gf_test::Shell s = run_marked(marks, args);
    CHECK_MESSAGE(s.status == 0, (args + "\n" + s.output));
    CHECK_MESSAGE(!fs::exists(marks + "/constructor"), args);
  }
  // with it, the recorded folder is searched
  gf_test::Shell t = run_marked(marks, "eval " + ck + " --trust-checkpoint-plugins");
  CHECK_MESSAGE(t.status == 0, t.output);
  CHECK(fs::exists(marks + "/constructor"));
  fs::remove(marks + "/constructor");

  // a component not found names the recorded libraries and the opt-in, and loads none of them
  edit_checkpoint(ck, [](gf::Checkpoint& c) {
    std::string& cfg = c.metadata["config"];
    cfg.replace(cfg.find("plugin: mha"), 11, "plugin: evil_attention");
  });
  gf_test::Shell n = run_marked(marks, "predict " + ck + " " + dir.file("in.txt"));
  CHECK(n.status == 2);
  CHECK_MESSAGE(has(n.output, "plugin `evil` 1.0.0 from " + dir.file("lib/libgf_evil.so")),
                n.output);
  CHECK_MESSAGE(has(n.output, "--trust-checkpoint-plugins"), n.output);
  CHECK(!fs::exists(marks + "/constructor"));
}

TEST_CASE("recorded folders that are relative or do not hold the library are refused") {
  TempDir dir;
  const std::string run = train_run(dir, dir.file("none"), "none", "none");
  const std::string ck = run + "/checkpoints/last.safetensors", marks = dir.file("marks");
  // a relative folder next to where the command runs (marks/..): never resolved against it
  fs::create_directories(dir.file("evil"));
  fs::copy_file(kEvil, dir.file("evil/libgf_evil.so"));
  edit_checkpoint(ck, [](gf::Checkpoint& c) {
    c.metadata["plugin_libraries"] =
        R"([{"plugin":"evil","version":"1","path":"evil/libgf_evil.so","folder":"evil"}])";
  });
  for (const char* trust : {"", " --trust-checkpoint-plugins"}) {
    gf_test::Shell p = run_marked(marks, "predict " + ck + " " + dir.file("in.txt") + trust);
    CHECK(!fs::exists(marks + "/constructor"));
    if (*trust) {
      CHECK(p.status != 0);
      CHECK_MESSAGE(has(p.output, "relative"), p.output);
    } else {
      CHECK_MESSAGE(p.status == 0, p.output);
    }
  }
  // a path outside its folder (the folder would be searched for any libgf_*.so)
  edit_checkpoint(ck, [&](gf::Checkpoint& c) {
    c.metadata["plugin_libraries"] = json::array({{{"plugin", "evil"},
                                                   {"version", "1"},
                                                   {"path", dir.file("evil/libgf_evil.so")},
                                                   {"folder", dir.file("run")}}})
                                         .dump();
  });
  gf_test::Shell o = run_marked(marks, "eval " + ck + " --trust-checkpoint-plugins");
  CHECK(o.status != 0);
  CHECK_MESSAGE(has(o.output, "does not lie in the recorded folder"), o.output);
  CHECK(!fs::exists(marks + "/constructor"));
}

TEST_CASE("resume checks the libraries of plugins.lock before loading them") {
  TempDir dir;
  fs::create_directories(dir.file("lib"));
  fs::copy_file(kEvil, dir.file("lib/libgf_evil.so"));
  const std::string run = train_run(dir, dir.file("lib"), "evil_growth", "none");
  const std::string marks = dir.file("marks");
  std::string lock = gf_test::run_shell("cat " + run + "/plugins.lock").output;
  REQUIRE(has(lock, dir.file("lib/libgf_evil.so")));
  // the library changed since the run started (rebuilt, or replaced by another)
  std::ofstream(dir.file("lib/libgf_evil.so"), std::ios::app) << "tampered";
  gf_test::Shell r = run_marked(marks, "resume " + run + " --quiet");
  CHECK(r.status != 0);
  CHECK_MESSAGE(has(r.output, "checksum expected fnv1a64:"), r.output);
  CHECK_MESSAGE(has(r.output, dir.file("lib/libgf_evil.so")), r.output);
  CHECK(!fs::exists(marks + "/constructor"));
  // the library as it was, and another library put in its folder
  fs::remove(dir.file("lib/libgf_evil.so"));
  fs::copy_file(kEvil, dir.file("lib/libgf_evil.so"));
  fs::copy_file(kEvil, dir.file("lib/libgf_other.so"));
  gf_test::Shell o = run_marked(marks, "resume " + run + " --quiet");
  CHECK(o.status != 0);
  CHECK_MESSAGE(has(o.output, "libgf_other.so is a plugin library the run did not use"), o.output);
  CHECK(!fs::exists(marks + "/constructor"));
  // as the run left it: resumes
  fs::remove(dir.file("lib/libgf_other.so"));
  gf_test::Shell ok = run_marked(marks, "resume " + run + " --quiet");
  CHECK_MESSAGE(ok.status == 0, ok.output);
}

TEST_CASE("a checkpoint's embedded config cannot make eval print the files it names") {
  TempDir dir;
  const std::string run = train_run(dir, dir.file("none"), "none", "none");
  const std::string ck = run + "/checkpoints/last.safetensors";
  gf::write_file(dir.file("secret"), "root:*:SECRET-CONTENT:0:99999:7:::\n");
  auto name_as_test = [&](const std::string& file) {
    edit_checkpoint(ck, [&](gf::Checkpoint& c) {
      std::string& cfg = c.metadata["config"];
      REQUIRE(has(cfg, "test.tsv"));
      cfg.replace(cfg.find("test.tsv"), 8, file);
    });
  };
  name_as_test(dir.file("secret"));
  gf_test::Shell e = gf_test::run_shell(std::string(GF_BIN) + " eval " + ck + " --split test");
  CHECK(e.status == 2);
  CHECK_MESSAGE(!has(e.output, "SECRET"), e.output);
  CHECK_MESSAGE(has(e.output, dir.file("secret")), e.output);
  CHECK_MESSAGE(has(e.output, "withheld"), e.output);
  gf_test::Shell a = gf_test::run_shell(std::string(GF_BIN) + " analyze " + ck);
  CHECK(a.status != 0);
  CHECK_MESSAGE(!has(a.output, "SECRET"), a.output);
  // the same file given by the user: its reader's whole message
  gf_test::Shell u = gf_test::run_shell(std::string(GF_BIN) + " eval " + ck +
                                        " --set data.test=" + dir.file("secret"));
  CHECK(u.status == 2);
  CHECK_MESSAGE(has(u.output, "SECRET"), u.output);
  // a device is not data: refused before it is opened
  edit_checkpoint(ck, [&](gf::Checkpoint& c) {
    std::string& cfg = c.metadata["config"];
    cfg.replace(cfg.find(dir.file("secret")), dir.file("secret").size(), "/dev/zero");
  });
  gf_test::Shell z = gf_test::run_shell(std::string(GF_BIN) + " eval " + ck + " --split test");
  CHECK(z.status != 0);
  CHECK_MESSAGE(has(z.output, "/dev/zero` as data, which is not a regular file"), z.output);
}

TEST_CASE("cli: a run directory, its checkpoints folder, or a config where a checkpoint goes") {
  TempDir dir;
  const std::string run = train_run(dir, dir.file("none"), "none", "none");
  gf_test::Shell i = gf_test::run_shell(std::string(GF_BIN) + " inspect " + run);
  CHECK_MESSAGE(i.status == 0, i.output);
  CHECK(has(i.output, "best.safetensors"));
  gf_test::Shell c = gf_test::run_shell(std::string(GF_BIN) + " inspect " + run + "/checkpoints");
  CHECK_MESSAGE(c.status == 0, c.output);
  gf_test::Shell y = gf_test::run_shell(std::string(GF_BIN) + " eval " + dir.file("run.yaml"));
  CHECK(y.status != 0);
  CHECK_MESSAGE(has(y.output, "a text file (a YAML config?), not a checkpoint"), y.output);
  // eval --data FILE names the file it evaluated, not the split it stands in for
  gf_test::Shell d =
      gf_test::run_shell(std::string(GF_BIN) + " eval " + run + " --data " + dir.file("test.tsv"));
  CHECK_MESSAGE(d.status == 0, d.output);
  CHECK_MESSAGE(has(d.output, dir.file("test.tsv") + ": accuracy"), d.output);
  CHECK(!has(d.output, "test: accuracy"));
  // events.jsonl: head counts as integers
  std::ifstream ev(run + "/events.jsonl");
  std::string line;
  while (std::getline(ev, line))
    if (line.find("\"heads\"") != std::string::npos) CHECK_MESSAGE(!has(line, ".0"), line);
}
