// Bad input and faults: crafted checkpoints, IDX files, YAML aliases, plugin files, a full
// disk, and the command line's answers to them. Every fixture is generated here.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "growformer/checkpoint.hpp"
#include "growformer/config.hpp"
#include "growformer/data/io.hpp"
#include "growformer/data/sequences.hpp"
#include "growformer/json_text.hpp"
#include "growformer/kernels.hpp"
#include "growformer/optimizer.hpp"
#include "growformer/rng.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/trainer.hpp"
#include "testing.hpp"

using namespace gf;
namespace fs = std::filesystem;
using json = nlohmann::json;
using gf_test::TempDir;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

struct Cli {
  int status;
  std::string output;
};
Cli run_cli(const std::string& args, const std::string& env = "") {
  TempDir d;
  std::string out = d.file("out.txt");
  std::string cmd = env + " " + std::string(GF_BIN) + " " + args + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), ss.str()};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

const char* kTiny = R"(name: tiny
seed: 3
threads: 1
data: {plugin: listops, train_size: 64, val_size: 16, test_size: 16, min_length: 4,
       max_length: 12, max_depth: 2, max_args: 3}
model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 2}}
optimizer: {plugin: adamw, lr: 0.003}
train: {steps: 6, batch_size: 8, warmup: 1, eval_every: 3, log_every: 3, check_every: 3}
)";

// a finished tiny run in dir; returns its last checkpoint
std::string tiny_run(const std::string& dir) {
  Experiment ex(ConfigNode::load_string(kTiny, "tiny.yaml"), {GF_PLUGIN_DIR});
  RunFlags f;
  f.run_dir = dir;
  f.quiet = true;
  REQUIRE(ex.train(f) == 0);
  return dir + "/checkpoints/last.safetensors";
}

// a checkpoint with its trainer header edited and re-saved (so the checksum is right)
void edit_and_save(const std::string& path, const std::function<void(Checkpoint&)>& edit) {
  Checkpoint ck = load_checkpoint(path);
  edit(ck);
  save_checkpoint(path, ck);
}

// a raw safetensors file with the given header and data, without a checksum
std::string raw_checkpoint(const json& header, const std::string& data) {
  std::string h = header.dump();
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return s + h + data;
}

}  // namespace

// ------------------------------------------------------------------ checkpoints

TEST_CASE("checkpoint: a directory is refused as a checkpoint") {
  TempDir d;
  CHECK(has(error_of([&] { load_checkpoint(d.path.string()); }), "a directory"));
  Cli c = run_cli("eval " + d.path.string());
  CHECK(c.status == 1);
  CHECK(has(c.output, "a directory"));
}

TEST_CASE("checkpoint: a flipped bit anywhere is caught by the checksum") {
  TempDir d;
  std::string ck = tiny_run(d.file("run"));
  std::string bytes = read_text(ck);
  for (size_t at : {bytes.size() - 5, bytes.size() / 2}) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0x10);
    write_text(d.file("flip.safetensors"), b);
    CHECK(has(error_of([&] { load_checkpoint(d.file("flip.safetensors")); }), "checksum mismatch"));
  }
  // an edited header (a digit of the step changed) is caught too
  size_t p = bytes.find("\\\"step\\\":");
  REQUIRE(p != std::string::npos);
  std::string b = bytes;
  b[p + 9] = b[p + 9] == '1' ? '2' : '1';
  write_text(d.file("edit.safetensors"), b);
  CHECK(has(error_of([&] { load_checkpoint(d.file("edit.safetensors")); }), "checksum"));
  // no checksum at all
  write_text(d.file("none.safetensors"), raw_checkpoint({{"__metadata__", json::object()}}, ""));
  CHECK(has(error_of([&] { load_checkpoint(d.file("none.safetensors")); }), "no checksum"));
}

TEST_CASE("checkpoint: shapes whose element count overflows, gaps and trailing bytes") {
  TempDir d;
  auto with_sum = [&](json header, const std::string& data) {
    // put a correct checksum in, so that only the structural checks can refuse it
    header["__metadata__"] = {{"checksum", "crc32:00000000"}};
    std::string raw = raw_checkpoint(header, data);
    std::string path = d.file("x.safetensors");
    write_text(path, raw);
    std::string e = error_of([&] { load_checkpoint(path); });
    REQUIRE(has(e, "checksum mismatch"));
    // recompute as the loader does: CRC-32 of the header without the entry, then the data
    // the loader names the content's checksum in its message
    size_t at = e.find("content crc32:");
    REQUIRE(at != std::string::npos);
    uint32_t crc = static_cast<uint32_t>(std::stoul(e.substr(at + 14, 8), nullptr, 16));
    char buf[24];
    std::snprintf(buf, sizeof buf, "crc32:%08x", crc);
    header["__metadata__"]["checksum"] = buf;
    write_text(path, raw_checkpoint(header, data));
    return error_of([&] { load_checkpoint(path); });
  };
  // [2^62, 4] floats with no data: the element count wraps to 0
  json big = {
      {"w", {{"dtype", "F32"}, {"shape", {uint64_t{1} << 62, 4}}, {"data_offsets", {0, 0}}}}};
  CHECK(has(with_sum(big, ""), "more elements than the file"));
  json neg = {{"w", {{"dtype", "F32"}, {"shape", {-1, 4}}, {"data_offsets", {0, 16}}}}};
  CHECK(has(with_sum(neg, std::string(16, '\0')), "not a size"));
  json gap = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4, 8}}}}};
  CHECK(has(with_sum(gap, std::string(8, '\0')), "gap"));
  json trailing = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  CHECK(has(with_sum(trailing, std::string(12, '\0')), "after the last tensor"));
  json ok = {{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  CHECK(with_sum(ok, std::string(8, '\0')) == "(no error)");
}

TEST_CASE("checkpoint: NaN weights, a negative step and short optimizer state are refused") {
  TempDir d;
  std::string ck = tiny_run(d.file("run"));
  std::string name = "model.layers.0.mlp.fc1.w";
  REQUIRE(load_checkpoint(ck).tensors.count(name));

  fs::copy_file(ck, d.file("nan.safetensors"));
  edit_and_save(d.file("nan.safetensors"), [&](Checkpoint& c) { c.tensors[name][3] = NAN; });
  Cli e = run_cli("eval " + d.file("nan.safetensors"));
  CHECK(e.status == 1);
  CHECK(has(e.output, "non-finite"));

  for (auto [trainer_edit, message] :
       std::vector<std::pair<std::function<void(json&)>, std::string>>{
           {[](json& t) { t["step"] = -100; }, "trainer step -100"},
           {[](json& t) { t["best_step"] = 99; }, "best_step 99"},
           {[](json& t) { t["rng"] = json::array(); }, "corrupt trainer state"}}) {
    std::string run = d.file("run_t");
    fs::remove_all(run);
    fs::copy(d.file("run"), run, fs::copy_options::recursive);
    edit_and_save(run + "/checkpoints/last.safetensors", [&](Checkpoint& c) {
      json t = json::parse(c.metadata["trainer"]);
      trainer_edit(t);
      c.metadata["trainer"] = t.dump();
    });
    std::string metrics = read_text(run + "/metrics.jsonl");
    Cli r = run_cli("resume " + run + " --quiet");
    CHECK(r.status == 1);
    CHECK(has(r.output, message));
    CHECK(read_text(run + "/metrics.jsonl") == metrics);  // nothing dropped
  }

  // AdamW m and v of shape [1] for a [d, 4d] weight: an out-of-bounds read before the fix
  std::string run = d.file("run_m");
  fs::copy(d.file("run"), run, fs::copy_options::recursive);
  edit_and_save(run + "/checkpoints/last.safetensors", [&](Checkpoint& c) {
    c.tensors["optim.m." + name.substr(6)] = Tensor({1}, 0.0f);
    c.tensors["optim.v." + name.substr(6)] = Tensor({1}, 0.0f);
  });
  Cli r = run_cli("resume " + run + " --quiet");
  CHECK(r.status == 1);
  CHECK(has(r.output, "has shape (1) but parameter"));
}

TEST_CASE("optimizers: load_state checks every state entry against the parameters") {
  Registry& reg = gf_test::registry();
  NamedParams params{{"w", parameter(Tensor({2, 3}, 1.0f))}};
  auto adamw = reg.create_optimizer(ConfigNode::load_string("plugin: adamw"));
  CHECK(has(error_of([&] {
              adamw->load_state({{"m.w", Tensor({1}, 0.f)}, {"v.w", Tensor({1}, 0.f)}},
                                {{"t.w", 3}}, params);
            }),
            "has shape (1) but parameter `w` has shape (2, 3)"));
  CHECK(has(error_of([&] {
              adamw->load_state({{"m.q", Tensor({2, 3}, 0.f)}, {"v.q", Tensor({2, 3}, 0.f)}},
                                {{"t.q", 3}}, params);
            }),
            "names no parameter"));
  CHECK(has(error_of([&] {
              adamw->load_state({{"m.w", Tensor({2, 3}, 0.f)}, {"v.w", Tensor({2, 3}, 0.f)}},
                                {{"t.w", -4}}, params);
            }),
            "not a positive integer"));
  adamw->load_state({{"m.w", Tensor({2, 3}, 0.f)}, {"v.w", Tensor({2, 3}, 0.f)}}, {{"t.w", 3}},
                    params);
  CHECK(adamw->state_tensors().size() == 2);
  auto sgd = reg.create_optimizer(ConfigNode::load_string("plugin: sgd"));
  CHECK(has(error_of([&] {
              sgd->load_state({{"momentum.w", Tensor({6}, 0.f)}}, {}, params);
            }),
            "has shape (6)"));
}

TEST_CASE("checkpoint: a full disk leaves no temporary and the previous file intact") {
  TempDir d;
  std::string path = d.file("c.safetensors");
  Checkpoint small;
  small.tensors["w"] = Tensor({4}, 1.0f);
  save_checkpoint(path, small);
  std::string before = read_text(path);
  Checkpoint big;
  big.tensors["w"] = Tensor({1 << 16}, 2.0f);
  // a file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC
  struct rlimit old {};
  getrlimit(RLIMIT_FSIZE, &old);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  auto prev = signal(SIGXFSZ, SIG_IGN);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::string e = error_of([&] { save_checkpoint(path, big); });
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  CHECK(has(e, "write failed"));
  CHECK(has(e, "untouched"));
  size_t files = 0;
  for (auto& ent : fs::directory_iterator(d.path)) files += ent.path() != fs::path(path);
  CHECK(files == 0);
  CHECK(read_text(path) == before);
}

TEST_CASE("checkpoint: concurrent writers use distinct temporary files") {
  TempDir d;
  std::string path = d.file("c.safetensors");
  Checkpoint a;
  a.tensors["w"] = Tensor({1 << 14}, 1.0f);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 20; ++i) save_checkpoint(path, a);
    _exit(0);
  }
  std::string err;
  for (int i = 0; i < 20; ++i) {
    try {
      save_checkpoint(path, a);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(err.empty());
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(load_checkpoint(path).tensors.at("w").size() == (1u << 14));
}

// ------------------------------------------------------------------ data readers

TEST_CASE("idx: dimensions whose product wraps around are refused") {
  TempDir d;
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char((v >> 16) & 255), char((v >> 8) & 255), char(v & 255)};
  };
  write_file(d.file("img"), be32(0x803) + be32(4) + be32(1u << 31) + be32(1u << 31));
  write_file(d.file("lab"), be32(0x801) + be32(4) + std::string(4, '\1'));
  std::string cfg = "plugin: idx_images\ndownsample: 3\ntrain_images: " + d.file("img") +
                    "\ntrain_labels: " + d.file("lab") + "\ntest_images: " + d.file("img") +
                    "\ntest_labels: " + d.file("lab") + "\n";
  std::string e = gf_test::error_of([&] {
    gf_test::registry().create_dataset(ConfigNode::load_string(cfg), DatasetBuild{1})->load();
  });
  CHECK(has(e, "promises more data than the file holds"));
}

TEST_CASE("gff: a negative or non-numeric position is refused") {
  TempDir d;
  write_file(d.file("a.gff"), "chr\tsrc\tgene\t10\t-1\t.\t+\t.\tName=S\n");
  CHECK(has(gf_test::error_of([&] { gff_gene_region(d.file("a.gff"), "S"); }), "not a position"));
  write_file(d.file("b.gff"), "chr\tsrc\tgene\t10\t20\t.\t+\t.\tName=S\n");
  CHECK(gff_gene_region(d.file("b.gff"), "S") == std::pair<size_t, size_t>{10, 20});
}

TEST_CASE("k-mer stride 1e12 is out of range, not a negative number") {
  ConfigNode n = ConfigNode::load_string("stride: 1e12");
  std::string e = gf_test::error_of([&] { Options o(n, KmerTokenizer::options(), "kmers"); });
  CHECK(has(e, "out of range"));
  CHECK(!has(e, "-"));
}

// ------------------------------------------------------------------ YAML

TEST_CASE("yaml: recursive aliases, alias bombs, deep nesting, second documents, BOM") {
  CHECK(
      has(gf_test::error_of([] { ConfigNode::load_string("x: &a [*a]\n"); }), "nested more than"));
  CHECK(has(gf_test::error_of([] { ConfigNode::load_string("x: &a {y: *a}\n"); }),
            "nested more than"));
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) bomb += std::string(j ? ", " : "") + "*a" + std::to_string(i - 1);
    bomb += "]\n";
  }
  auto t0 = std::chrono::steady_clock::now();
  CHECK(has(gf_test::error_of([&] { ConfigNode::load_string(bomb); }), "expands to more than"));
  CHECK(std::chrono::steady_clock::now() - t0 <
        std::chrono::seconds(10));  // exponential would be hours
  CHECK(has(gf_test::error_of([] { ConfigNode::load_string(std::string(5000, '[')); }),
            "nested more than"));
  CHECK(has(gf_test::error_of([] { ConfigNode::load_string("a: 1\n---\nb: 2\n"); }),
            "second YAML document"));
  // a NUL byte made yaml-cpp loop while allocating without bound (found by fuzz_config)
  CHECK(has(gf_test::error_of([] { ConfigNode::load_string(std::string(",s\0lr\xff", 6)); }),
            "control character (byte 0x00)"));
  // and so did loading every document of `,w"[` (found by fuzz_config)
  auto t1 = std::chrono::steady_clock::now();
  gf_test::error_of([] { ConfigNode::load_string(",w\"["); });
  CHECK(std::chrono::steady_clock::now() - t1 <
        std::chrono::seconds(10));  // exponential would be hours
  // and invalid UTF-8 made it loop too
  CHECK(has(gf_test::error_of([] { ConfigNode::load_string(",+\x96"); }), "invalid UTF-8"));
  CHECK(ConfigNode::load_string("name: caf\xc3\xa9\n").child("name").as_string() == "caf\xc3\xa9");
  ConfigNode bom = ConfigNode::load_string("\xEF\xBB\xBFseed: 4\n");
  CHECK(bom.has("seed"));
  CHECK(has(gf_test::error_of([] {
              ConfigNode n = ConfigNode::load_string("a: 1\n");
              n.apply_override("b=&x [*x]");
            }),
            "nested more than"));
}

TEST_CASE("yaml: an empty --set value and a directory as config") {
  ConfigNode n = ConfigNode::load_string("train: {steps: 3}\n");
  n.apply_override("train.steps=");
  std::string e = gf_test::error_of([&] { n.child("train").child("steps").as_int(); });
  CHECK(has(e, "missing value"));
  CHECK(!has(e, "list"));
  TempDir d;
  CHECK(has(gf_test::error_of([&] { ConfigNode::load_file(d.path.string()); }), "is a directory"));
  Cli c = run_cli("config check " + d.path.string());
  CHECK(c.status == 2);
  CHECK(has(c.output, "is a directory"));
}

TEST_CASE("cli: a self-referencing alias in a config or checkpoint is a clean error") {
  TempDir d;
  write_text(d.file("loop.yaml"), "name: x\nseed: &a [*a]\n");
  for (const char* cmd : {"config check", "train"}) {
    Cli c = run_cli(std::string(cmd) + " " + d.file("loop.yaml") +
                    (std::string(cmd) == "train" ? " --run-dir " + d.file("r") : ""));
    CHECK(c.status == 2);
    INFO(c.output);
    CHECK(has(c.output, "nested more than"));
  }
  std::string ck = tiny_run(d.file("run"));
  edit_and_save(ck, [](Checkpoint& c) { c.metadata["config"] = "name: x\nseed: &a [*a]\n"; });
  for (const char* cmd : {"eval", "analyze"}) {
    Cli c = run_cli(std::string(cmd) + " " + ck);
    CHECK(c.status == 2);
    CHECK(has(c.output, "nested more than"));
  }
}

// ------------------------------------------------------------------ plugins

TEST_CASE("plugins: a truncated library or an entry point that is data never reaches dlopen") {
  TempDir d;
  std::string src = std::string(GF_PLUGIN_DIR) + "/libgf_growth_none.so";
  std::string bytes = read_text(src);
  write_text(d.file("libgf_truncated.so"), bytes.substr(0, bytes.size() / 3));
  fs::copy_file(std::string(GF_BROKEN_PLUGIN_DIR) + "/libgf_broken_int_entry.so",
                d.file("libgf_int_entry.so"));
  Registry r;
  std::string e1 = error_of([&] { r.load_library(d.file("libgf_truncated.so")); });
  CHECK(has(e1, "truncated"));
  std::string e2 = error_of([&] { r.load_library(d.file("libgf_int_entry.so")); });
  CHECK(has(e2, "is not a function"));
  // commands that do not need them still work, and each failure is listed once
  std::string env = "GROWFORMER_PLUGIN_PATH=" + d.path.string() + ":" + d.path.string();
  Cli list = run_cli("plugins list --plugin-path " + d.path.string(), env);
  CHECK(list.status == 0);
  size_t count = 0;
  for (size_t p = list.output.find("libgf_truncated.so"); p != std::string::npos;
       p = list.output.find("libgf_truncated.so", p + 1))
    ++count;
  INFO(list.output);
  CHECK(count == 1);
  write_text(d.file("tiny.yaml"), kTiny);
  Cli check = run_cli("config check " + d.file("tiny.yaml"), env);
  CHECK(check.status == 0);
  // every ELF header field the check reads, corrupted in turn, is refused without a crash
  // (offsets and counts are corrupted in their high bytes, so that the result lies outside
  // the file whatever the library's layout; a low-byte change can still land inside it)
  for (size_t at : {4, 5, 16, 18, 39, 47, 54, 57, 58, 61}) {
    CAPTURE(at);
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0x7f);
    if (at == 57 || at == 61) b[at - 1] = static_cast<char>(0xff);  // e_phnum, e_shnum: ~32k
    CHECK(!Registry::check_library_image(reinterpret_cast<const uint8_t*>(b.data()), b.size())
               .empty());
  }
  CHECK(Registry::check_library_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())
            .empty());
}

// ------------------------------------------------------------------ messages, kernels

TEST_CASE("messages: raw bytes are escaped and huge names cut") {
  CHECK(printable(std::string("a\x01\xff") + "b\n\tc") == "a\\x01\\xffb\n\tc");
  CHECK(printable("caf\xc3\xa9") == "caf\xc3\xa9");
  std::string huge = printable(std::string(50 << 20, 'x'));
  CHECK(huge.size() < 1100);
  CHECK(has(huge, "more bytes"));
  TempDir d;
  Cli c = run_cli("config check " + d.file(std::string("no\x01pe") + std::string(3000, 'y')));
  CHECK(c.status == 2);
  CHECK(has(c.output, "no\\x01pe"));
  CHECK(c.output.size() < 3000);
}

TEST_CASE("cli: config --help and data --help succeed") {
  CHECK(run_cli("config --help").status == 0);
  CHECK(run_cli("data --help").status == 0);
}

TEST_CASE(
    "cli: bench reads the model's options through its table: a bad one is named, with its place") {
  // before anything is timed, whether or not --batch and --seq stand in for the config's
  const std::string config = std::string(GF_SOURCE_DIR) + "/configs/bench_mha.yaml";
  TempDir d;
  std::string text = read_text(config);
  const size_t at = text.find("  pool: mean\n");
  REQUIRE(at != std::string::npos);
  text.insert(at, "  dropuot: 0.1\n");  // line 12 of the file, inside `model:`
  write_text(d.file("typo.yaml"), text);
  for (const char* shape : {"", " --batch 2 --seq 8"}) {
    Cli c = run_cli("bench " + d.file("typo.yaml") + shape + " --steps 1 --warmup 0");
    INFO(c.output);
    CHECK(c.status == 2);
    CHECK(has(c.output,
              "typo.yaml:12:3: unknown key `model.dropuot` for model; did you mean `dropout`?"));
  }
  Cli range = run_cli("bench " + config + " --steps 1 --warmup 0 --set model.max_len=0");
  CHECK(range.status == 2);
  CHECK(has(range.output, "--set model.max_len: `model.max_len`: value 0 out of range"));
  Cli attention = run_cli("bench " + config +
                          " --batch 2 --seq 8 --steps 1 --warmup 0 --set model.attention.heds=2");
  CHECK(attention.status == 2);
  CHECK(has(attention.output,
            "unknown key `model.attention.heds` for attention `mha`; did you mean `heads`?"));
}

TEST_CASE("fast_exp: NaN gives NaN without an undefined integer conversion") {
  CHECK(std::isnan(kernels::fast_exp(NAN)));
  CHECK(std::isnan(kernels::fast_exp(-NAN)));
  CHECK(kernels::fast_exp(0.0f) == doctest::Approx(1.0f));
  float row[3] = {0.0f, NAN, 1.0f};
  kernels::softmax_row(row, 3, nullptr);
  CHECK(std::isnan(row[0]));
}

// ------------------------------------------------------------------ run directories

TEST_CASE("run directory: a run name that is not a plain name is refused") {
  for (const char* name : {"..", "."}) {
    ConfigNode cfg = ConfigNode::load_string(kTiny, "tiny.yaml");
    cfg.apply_override(std::string("name=") + name);
    Experiment ex(cfg, {GF_PLUGIN_DIR});
    RunFlags f;
    f.quiet = true;
    CHECK(has(gf_test::error_of([&] { ex.train(f); }), "cannot name a run directory"));
  }
}

TEST_CASE("run directory: a second process is locked out") {
  TempDir d;
  tiny_run(d.file("run"));
  RunDir held(d.file("run"));
  held.lock();
  Cli r = run_cli("resume " + d.file("run") + " --quiet");
  CHECK(r.status == 1);
  CHECK(has(r.output, "in use by another growformer process (pid " + std::to_string(getpid())));
}

TEST_CASE("run directory: a log that is a device, and a full disk, stop with a clear error") {
  TempDir d;
  std::string run = d.file("run");
  tiny_run(run);
  fs::remove(run + "/metrics.jsonl");
  fs::create_symlink("/dev/full", run + "/metrics.jsonl");
  Cli r = run_cli("resume " + run + " --quiet");
  CHECK(r.status == 1);
  CHECK(has(r.output, "not a regular file"));
  fs::remove(run + "/metrics.jsonl");
  // a file-size limit stands in for a full disk; SIGXFSZ ignored so that writes fail instead
  std::string full = d.file("full");
  tiny_run(full);
  fs::remove(full + "/checkpoints/last.safetensors");
  fs::remove(full + "/checkpoints/best.safetensors");
  std::string out = d.file("full.txt");
  int rc = std::system(("bash -c \"trap '' XFSZ; ulimit -f 4; exec " + std::string(GF_BIN) +
                        " resume " + full + " --quiet\" > " + out + " 2>&1")
                           .c_str());
  Cli g{WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), read_text(out)};
  INFO(g.output);
  CHECK(g.status == 1);
  CHECK(has(g.output, "disk full"));
  for (auto& ent : fs::directory_iterator(full + "/checkpoints"))
    CHECK(!has(ent.path().filename().string(), ".tmp"));
}

TEST_CASE("run directory: stopped before its first checkpoint, resume runs it again from 0") {
  TempDir d;
  std::string ref = d.file("ref"), cut = d.file("cut");
  tiny_run(ref);
  tiny_run(cut);
  // what kill -9 before the first checkpoint leaves: the config, a lock, partial logs
  fs::remove_all(cut + "/checkpoints");
  write_text(cut + "/metrics.jsonl", "{\"step\": 3, \"split\": \"train\"}\n{\"ste");
  Cli r = run_cli("resume " + cut + " --quiet");
  CHECK(r.status == 0);
  CHECK(gf_test::metrics_without_timing(cut) == gf_test::metrics_without_timing(ref));
  CHECK(fs::exists(cut + "/checkpoints/last.safetensors"));
}

TEST_CASE("run directory: resume refuses an edited or garbage config.resolved.yaml") {
  TempDir d;
  std::string run = d.file("run");
  tiny_run(run);
  std::string cfg = read_text(run + "/config.resolved.yaml");
  std::string metrics = read_text(run + "/metrics.jsonl");
  for (std::string edited : {cfg + "extra: 1\n", std::string("\x01\x02garbage"), std::string()}) {
    write_text(run + "/config.resolved.yaml", edited);
    Cli r = run_cli("resume " + run + " --quiet");
    CHECK(r.status == 1);
    CHECK(has(r.output, "changed since the run started"));
    CHECK(read_text(run + "/metrics.jsonl") == metrics);
  }
  fs::remove(run + "/config.resolved.yaml");
  CHECK(run_cli("resume " + run + " --quiet").status == 1);
  write_text(run + "/config.resolved.yaml", cfg);
  CHECK(run_cli("resume " + run + " --quiet").status == 0);
}

// ------------------------------------------------------------------ round 3: bounded answers

namespace {

// A command's answer with its peak memory (the child's own rusage), so that a case can require
// bounded memory; a hung command is killed at 60 s (status 137, which every caller refuses).
struct Bounded {
  int status;
  std::string output;
  double max_rss_mb;
};
Bounded run_bounded(const std::string& args) {
  TempDir d;
  std::string out = d.file("out.txt");
  std::string cmd =
      "exec timeout -s KILL 60 " + std::string(GF_BIN) + " " + args + " > " + out + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  struct rusage ru {};
  wait4(pid, &st, 0, &ru);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), read_text(out),
          ru.ru_maxrss / 1024.0};
}

// one clear refusal: exit 1 or 2 (a hang is killed at 60 s and fails the status check), the
// message, no bare std:: exception, bounded memory
void check_refusal(const Bounded& b, int status, const std::string& message) {
  INFO(b.output);
  CHECK(b.status == status);
  CHECK(has(b.output, message));
  CHECK(!has(b.output, "std::"));
  CHECK(b.max_rss_mb < 1500);
}

}  // namespace

TEST_CASE("devices: /dev/zero as a config, a sweep file, a data file or predict input") {
  if (!fs::exists("/dev/zero")) {
    MESSAGE("skipped: this platform has no /dev/zero");
    return;
  }
  TempDir d;
  std::string ck = tiny_run(d.file("run"));
  check_refusal(run_bounded("config check /dev/zero"), 2, "/dev/zero: is a device");
  check_refusal(run_bounded("sweep /dev/zero"), 2, "/dev/zero: is a device");
  check_refusal(run_bounded("train /dev/zero"), 2, "/dev/zero: is a device");
  check_refusal(run_bounded("eval " + ck + " --data /dev/zero"), 2, "/dev/zero: is a device");
  check_refusal(run_bounded("predict " + ck + " /dev/zero --out " + d.file("p.tsv")), 2,
                "/dev/zero: is a character device, expected a data file");
  CHECK(!fs::exists(d.file("p.tsv")));
  CHECK(has(error_of([] { LineReader r("/dev/zero"); }), "is a character device"));
  CHECK(has(error_of([] { read_file_bytes("/dev/urandom"); }), "is a character device"));
}

TEST_CASE("pipes: a config or data file that is a FIFO is read up to a cap of bytes read") {
  TempDir d;
  std::string fifo = d.file("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // a writer of endless zeros: its size reads as 0, so only the bytes read can bound it
  auto endless_zeros = [&] {
    pid_t pid = fork();
    if (pid == 0) {
      signal(SIGPIPE, SIG_DFL);
      FILE* f = std::fopen(fifo.c_str(), "w");
      std::vector<char> zeros(1 << 16, '\0');
      while (f && std::fwrite(zeros.data(), 1, zeros.size(), f) == zeros.size()) {
      }
      _exit(0);
    }
    return pid;
  };
  pid_t w = endless_zeros();
  check_refusal(run_bounded("config check " + fifo), 2, "more than 16 MiB");
  kill(w, SIGKILL);
  waitpid(w, nullptr, 0);
  w = endless_zeros();
  CHECK(has(error_of([&] {
              LineReader r(fifo);
              std::string line;
              while (r.next(line)) {
              }
            }),
            fifo + ":1: a NUL byte"));
  kill(w, SIGKILL);
  waitpid(w, nullptr, 0);
}

TEST_CASE("data files: a NUL byte and an endless line are named with their line") {
  TempDir d;
  write_text(d.file("nul.tsv"), std::string("label\ttext\n1\tok\n0\tb\0d\n", 22));
  CHECK(has(error_of([&] {
              LineReader r(d.file("nul.tsv"));
              std::string line;
              while (r.next(line)) {
              }
            }),
            "nul.tsv:3: a NUL byte"));
  {
    std::ofstream big(d.file("long.txt"), std::ios::binary);
    std::string chunk(1 << 20, 'x');
    for (size_t i = 0; i <= (LineReader::kMaxLineBytes >> 20); ++i) big << chunk;
  }
  CHECK(has(error_of([&] {
              LineReader r(d.file("long.txt"));
              std::string line;
              r.next(line);
            }),
            "long.txt:1: a line longer than 64 MiB"));
}

TEST_CASE(
    "checkpoint: a structure that disagrees with the tensors, or is crafted, is refused "
    "naming the block, before anything is allocated") {
  TempDir d;
  std::string run = d.file("run");
  std::string ck = tiny_run(run);
  std::string arch0 = json::parse(load_checkpoint(ck).metadata.at("architecture"))[0];
  // the head count of the structure text ("... heads 2 ...") replaced by N
  auto with_heads = [&](const std::string& n) {
    size_t at = arch0.find(" heads ") + 7;
    return arch0.substr(0, at) + n + arch0.substr(arch0.find(' ', at));
  };
  // the structure with its heads edited: ids {0, 1} (what the tensors hold) made IDS
  auto with_ids = [&](std::vector<int> ids) {
    BlockStructure s = BlockStructure::parse(arch0, "tiny", 256);
    REQUIRE(s.ids() == std::vector<int>{0, 1});
    s.heads.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) s.heads[i] = {ids[i], 0, ""};
    s.next_id = *std::max_element(ids.begin(), ids.end()) + 1;
    return json::array({s.text()}).dump();
  };
  const std::string block = "invalid checkpoint: block layers.0.attn: ";
  struct Case {
    std::function<void(Checkpoint&)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      // 10^11 heads in the structure and in the heads record
      {[&](Checkpoint& c) {
         c.metadata["architecture"] = json::array({with_heads("100000000000")}).dump();
         c.metadata["heads"] = "[100000000000]";
       },
       block + "the block structure names 100000000000 heads, more than max_heads = 256"},
      // the structure alone (the heads record agrees with the tensors): the structure's count
      {[&](Checkpoint& c) {
         c.metadata["architecture"] = json::array({with_heads("100000000000")}).dump();
       },
       block + "the block structure names 100000000000 heads, more than max_heads = 256"},
      // no heads record at all: the structure's bound still holds
      {[&](Checkpoint& c) {
         c.metadata["architecture"] = json::array({with_heads("100000000000")}).dump();
         c.metadata.erase("heads");
       },
       block + "the block structure names 100000000000 heads, more than max_heads"},
      // the structure names other heads than the tensors hold: as many, or one more
      {[&](Checkpoint& c) {
         c.metadata["architecture"] = with_ids({0, 5});
       },
       block + "its structure names heads [0, 5] (2) but the tensors hold heads [0, 1] (2)"},
      {[&](Checkpoint& c) {
         c.metadata["architecture"] = with_ids({0, 1, 2});
         c.metadata["heads"] = "[3]";
       },
       block + "its structure names heads [0, 1, 2] (3) but the tensors hold heads [0, 1] (2)"},
      // the same head twice
      {[&](Checkpoint& c) {
         c.metadata["architecture"] = with_ids({1, 1});
       },
       block + "the block structure names head 1 twice"},
      // a heads record that disagrees with the structure (and the tensors)
      {[&](Checkpoint& c) { c.metadata["heads"] = "[3]"; },
       block + "the `heads` record says 3 heads but its structure names 2"},
      {[&](Checkpoint& c) { c.metadata["heads"] = "[2, 2]"; }, "not a list of 1 head counts"},
      {[&](Checkpoint& c) { c.metadata["architecture"] = "[7]"; },
       block + "its structure record is not a string"},
      {[&](Checkpoint& c) { c.metadata["architecture"] = "[\"\"]"; },
       block + "the checkpoint records no structure"},
  };
  for (auto& cs : cases) {
    CAPTURE(cs.message);
    std::string bad = d.file("bad.safetensors");
    fs::copy_file(ck, bad, fs::copy_options::overwrite_existing);
    edit_and_save(bad, cs.edit);
    const Bounded e = run_bounded("eval " + bad);
    check_refusal(e, 1, cs.message);
    CHECK(e.output.find("error") == e.output.rfind("error"));  // one message
    // resume of a run whose last checkpoint is the crafted one: refused, nothing rewritten
    std::string r = d.file("r");
    fs::remove_all(r);
    fs::copy(run, r, fs::copy_options::recursive);
    fs::copy_file(bad, r + "/checkpoints/last.safetensors", fs::copy_options::overwrite_existing);
    std::string metrics = read_text(r + "/metrics.jsonl"),
                best = read_text(r + "/checkpoints/best.safetensors");
    check_refusal(run_bounded("resume " + r + " --quiet"), 1, cs.message);
    CHECK(read_text(r + "/metrics.jsonl") == metrics);
    CHECK(read_text(r + "/checkpoints/best.safetensors") == best);
  }
}

TEST_CASE("checkpoint: a fractional step and an unknown format are refused") {
  TempDir d;
  std::string run = d.file("run");
  std::string ck = tiny_run(run);
  for (auto [field, value] : std::vector<std::pair<std::string, json>>{
           {"step", 10.5}, {"best_step", 2.5}, {"val_step", 3.25}, {"step", "6"}}) {
    CAPTURE(field);
    std::string r = d.file("r");
    fs::remove_all(r);
    fs::copy(run, r, fs::copy_options::recursive);
    edit_and_save(r + "/checkpoints/last.safetensors", [&](Checkpoint& c) {
      json t = json::parse(c.metadata["trainer"]);
      t[field] = value;
      c.metadata["trainer"] = t.dump();
    });
    std::string metrics = read_text(r + "/metrics.jsonl");
    Cli c = run_cli("resume " + r + " --quiet");
    CHECK(c.status == 1);
    CHECK(has(c.output, "corrupt trainer state"));
    CHECK(has(c.output, "`" + field + "`"));
    CHECK(read_text(r + "/metrics.jsonl") == metrics);
  }
  std::string frac = d.file("frac.safetensors");
  fs::copy_file(ck, frac);
  edit_and_save(frac, [](Checkpoint& c) {
    json t = json::parse(c.metadata["trainer"]);
    t["step"] = 10.5;
    c.metadata["trainer"] = t.dump();
  });
  Cli i = run_cli("inspect " + frac);
  CHECK(i.status == 1);
  CHECK(has(i.output, "`step` is 10.5, not a whole number"));

  std::string v99 = d.file("v99.safetensors");
  fs::copy_file(ck, v99);
  edit_and_save(v99, [](Checkpoint& c) { c.metadata["format"] = "growformer-checkpoint-99"; });
  for (std::string cmd :
       {"eval " + v99, "inspect " + v99, "predict " + v99 + " " + v99, "analyze " + v99}) {
    CAPTURE(cmd);
    Cli c = run_cli(cmd);
    CHECK(c.status == 1);
    CHECK(has(c.output,
              "checkpoint format `growformer-checkpoint-99` is not the `growformer-checkpoint-1`"));
  }
  std::string none = d.file("none.safetensors");
  fs::copy_file(ck, none);
  edit_and_save(none, [](Checkpoint& c) { c.metadata.erase("format"); });
  Cli n = run_cli("eval " + none);
  CHECK(n.status == 1);
  CHECK(has(n.output, "no `format` entry"));
}

TEST_CASE("sweep --only: the matching jobs run, the others wait for a later run") {
  TempDir d;
  write_text(d.file("tiny.yaml"), kTiny);
  write_text(d.file("s.yaml"),
             "name: s\nbase: tiny.yaml\nseeds: [1, 2]\naxes:\n  train.steps:\n"
             "    short: 3\n    long: 6\n");
  const std::string cmd = "sweep " + d.file("s.yaml") + " --out " + d.file("out");
  auto a = run_bounded(cmd + " --only '^long__seed2$'");
  REQUIRE_MESSAGE(a.status == 0, a.output);
  CHECK(fs::exists(d.file("out/long__seed2/sweep_job.json")));
  for (const char* other : {"short__seed1", "short__seed2", "long__seed1"}) {
    CAPTURE(other);
    CHECK(!fs::exists(d.file(std::string("out/") + other)));
    CHECK(has(a.output, std::string(other) + ": not selected by --only"));
  }
  auto b = run_bounded(cmd + " --only short");  // two more; the finished one joins the table
  REQUIRE_MESSAGE(b.status == 0, b.output);
  CHECK(has(b.output, "long__seed2: finished earlier"));
  CHECK(has(b.output, "long__seed1: not selected by --only"));
  CHECK(fs::exists(d.file("out/short__seed1/sweep_job.json")));
  CHECK(fs::exists(d.file("out/short__seed2/sweep_job.json")));
  CHECK(!fs::exists(d.file("out/long__seed1")));
}

TEST_CASE("sweep --only: no pattern hangs, and ordinary patterns select the jobs they did") {
  TempDir d;
  // every job fails at once on its missing data file, so a run of the sweep shows what it
  // selected: "ran and FAILED" or "not selected by --only"
  write_text(
      d.file("base.yaml"),
      "name: b\nthreads: 1\ndata: {plugin: text_tsv, train: missing.tsv}\n"
      "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 2}}\n"
      "optimizer: {plugin: adamw, lr: 0.003}\ntrain: {steps: 2, batch_size: 8, warmup: 1}\n");
  const std::string a40(40, 'a');  // backtracking tries 2^40 ways to split it for (a*)*b
  write_text(d.file("s.yaml"),
             "name: s\nbase: base.yaml\nseeds: [1, 3]\naxes:\n"
             "  train.steps: {paired: 2, single: 3, " +
                 a40 +
                 ": 4}\n"
                 "  optimizer.lr: {k1: 0.003, k2: 0.002}\n");
  std::vector<std::string> names;
  for (std::string arm : {"paired", "single", a40.c_str()})
    for (std::string k : {"k1", "k2"})
      for (std::string seed : {"seed1", "seed3"}) names.push_back(arm + "__" + k + "__" + seed);
  const std::string cmd = "sweep " + d.file("s.yaml") + " --out " + d.file("out") + " --only ";
  using Selects = std::function<bool(const std::string&)>;
  const std::vector<std::pair<std::string, Selects>> cases = {
      {"paired|k2", [](const std::string& n) { return has(n, "paired") || has(n, "k2"); }},
      {"^single", [](const std::string& n) { return n.rfind("single", 0) == 0; }},
      {"seed[12]$", [](const std::string& n) { return has(n, "seed1"); }}};
  for (const auto& c : cases) {
    CAPTURE(c.first);
    Bounded b = run_bounded(cmd + "'" + c.first + "'");
    INFO(b.output);
    CHECK(b.status == 1);  // the selected jobs failed
    for (const std::string& n : names)
      CHECK(has(b.output, n + (c.second(n) ? ": ran and FAILED" : ": not selected by --only")));
  }
  for (const char* pattern : {"(a*)*b", "(a|a)*b", "a*a*a*a*a*a*a*a*a*a*a*a*b"})
    check_refusal(run_bounded(cmd + "'" + pattern + "'"), 2,
                  std::string("--only ") + pattern + ": matches none of the 12 job names");
  check_refusal(run_bounded(cmd + "'(a)\\1'"), 2,
                "--only (a)\\1: back-references (\\1) are not supported by --only");
  check_refusal(run_bounded(cmd + "'(?!b)'"), 2,
                "lookaround and named groups ((?=, (?!, (?<) are not supported");
  check_refusal(run_bounded(cmd + "'a{2000}'"), 2,
                "--only a{2000}: not a regular expression (a repetition count over 1000)");
}

TEST_CASE("sweep: repeated axis values or seeds, no seeds, too many jobs and absurd shards") {
  TempDir d;
  write_text(d.file("tiny.yaml"), kTiny);
  auto sweep = [&](const std::string& body, const std::string& args = "") {
    write_text(d.file("s.yaml"), "name: s\nbase: tiny.yaml\n" + body);
    return run_bounded("sweep " + d.file("s.yaml") + " --out " + d.file("out") + " " + args);
  };
  check_refusal(sweep("axes:\n  model.d_model: [32, 32]\n"), 2,
                "`axes.model.d_model`: the value `32` is listed twice (entries 1 and 2)");
  check_refusal(sweep("axes:\n  growth: [\"{plugin: none}\", \"{plugin: none}\"]\n"), 2,
                "is listed twice");
  check_refusal(sweep("axes:\n  name: [a/b, a_b]\n"), 2, "name the same run directory `a_b`");
  check_refusal(sweep("seeds: []\n"), 2, "`seeds`: is empty");
  check_refusal(sweep("set: [train.steps=2, model.d_model]\n"), 2,  // found by fuzz_sweep
                "`set`: entry `model.d_model` is not KEY=VALUE");
  check_refusal(sweep("seeds: [1, 2, 1]\n"), 2, "`seeds`: seed 1 is listed twice");
  std::string big = "axes:\n";
  for (int i = 0; i < 12; ++i)
    big += "  k" + std::to_string(i) + ": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n";
  check_refusal(sweep(big), 2, "the sweep has more than 10000 jobs: 10 (k0) x 10 (k1)");
  check_refusal(sweep("seeds: [1, 2]\n", "--shard 1/1000000000000000000000"), 2,
                "--shard 1/1000000000000000000000: expected I/N, whole numbers");
  check_refusal(sweep("seeds: [1, 2]\n", "--shard 1/3"), 2, "3 shards for 2 job(s)");
  check_refusal(sweep("seeds: [1, 2]\n", "--shard 0/-2"), 2, "expected I/N");
  check_refusal(sweep("axes:\n  name: [x__y, x]\n  seed: [\"z\", \"y__z\"]\n"), 2,
                "two jobs share the run directory name `x__y__z__seed1`");
  check_refusal(sweep("seeds: [1, 2]\n", "--only '('"), 2, "--only (: not a regular expression");
  check_refusal(sweep("seeds: [1, 2]\n", "--only zzz"), 2,
                "--only zzz: matches none of the 2 job names (e.g. job__seed1)");
  CHECK(!fs::exists(d.file("out")));  // nothing written
}

TEST_CASE("run directory: best but no last continues from the best") {
  TempDir d;
  std::string run = d.file("run");
  tiny_run(run);
  const std::vector<json> metrics = gf_test::metrics_without_timing(run);
  fs::remove(run + "/checkpoints/last.safetensors");
  REQUIRE(fs::exists(run + "/checkpoints/best.safetensors"));
  const std::string best = read_text(run + "/checkpoints/best.safetensors");
  Cli r = run_cli("resume " + run);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(has(r.output,
            run + ": no checkpoints/last.safetensors (the run stopped between writing its best and "
                  "its last checkpoint); continuing from a copy of checkpoints/best.safetensors"));
  CHECK(gf_test::metrics_without_timing(run) ==
        metrics);  // the steps since the best, repeated alike
  CHECK(read_text(run + "/checkpoints/best.safetensors") == best);
  CHECK(fs::exists(run + "/checkpoints/last.safetensors"));

  // a sweep job in that state resumes as well, instead of failing on every rerun
  write_text(d.file("tiny.yaml"), kTiny);
  write_text(d.file("s.yaml"), "name: s\nbase: tiny.yaml\nseeds: [1]\n");
  std::string out = d.file("out");
  REQUIRE(run_cli("sweep " + d.file("s.yaml") + " --out " + out + " --quiet").status == 0);
  std::string job = out + "/job__seed1";
  const std::vector<json> job_metrics = gf_test::metrics_without_timing(job);
  fs::remove(job + "/sweep_job.json");
  fs::remove(job + "/checkpoints/last.safetensors");
  Cli c = run_cli("sweep " + d.file("s.yaml") + " --out " + out + " --quiet");
  INFO(c.output);
  CHECK(c.status == 0);
  CHECK(has(c.output, "job__seed1: resumed,"));
  CHECK(gf_test::metrics_without_timing(job) == job_metrics);
}

TEST_CASE(
    "run directory: kill -9 right after any checkpoint write leaves a run that resume finishes "
    "alike") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("sanitizer build: the LD_PRELOAD shim cannot come before the sanitizer; skipped");
#else
  TempDir d;
  write_text(d.file("tiny.yaml"), kTiny);
  // checkpoint_every 0: checkpoints at the validations (steps 3 and 6), and the first validation
  // is always the best so far, so the first write is a best when no last is there yet
  const std::string train =
      "train " + d.file("tiny.yaml") + " --set train.checkpoint_every=0 --quiet --run-dir ";
  const std::string ref = d.file("ref");
  REQUIRE(run_cli(train + ref).status == 0);
  const std::vector<json> want = gf_test::metrics_without_timing(ref);
  size_t writes = 0;  // how many checkpoint writes the run makes
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    const std::string run = d.file("kill" + std::to_string(n));
    Cli k = run_cli(train + run,
                    "GF_KILL_AFTER_CHECKPOINTS=" + std::to_string(n) + " LD_PRELOAD=" GF_KILL_SHIM);
    INFO(k.output);
    if (k.status == 0) break;  // fewer than N writes
    ++writes;
    CHECK(k.status == 128 + SIGKILL);
    Cli r = run_cli("resume " + run + " --quiet");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(gf_test::metrics_without_timing(run) == want);
    CHECK(fs::exists(run + "/checkpoints/last.safetensors"));
    CHECK(fs::exists(run + "/checkpoints/best.safetensors"));
  }
  CHECK(writes >= 3);  // best and last of step 3, last of step 6: every boundary was tried
#endif
}

TEST_CASE("messages: a full disk at the first checkpoint claims no previous checkpoint") {
  TempDir d;
  write_text(d.file("tiny.yaml"), kTiny);
  const std::string run = d.file("run"), out = d.file("full.txt");
  // a file-size limit stands in for a full disk: the logs fit, the checkpoint of step 1 does not
  int rc =
      std::system(("bash -c \"trap '' XFSZ; ulimit -f 4; exec " + std::string(GF_BIN) + " train " +
                   d.file("tiny.yaml") + " --set train.checkpoint_every=1 --run-dir " + run +
                   " --quiet\" > " + out + " 2>&1")
                      .c_str());
  const std::string msg = read_text(out);
  INFO(msg);
  CHECK(WEXITSTATUS(rc) == 1);
  CHECK(has(msg, "write failed (disk full?)"));
  CHECK(has(msg, "(there was no last.safetensors before; no partial file is left)"));
  CHECK(!has(msg, "untouched"));
  CHECK(fs::is_empty(run + "/checkpoints"));
}

TEST_CASE(
    "messages: a log write with no checkpoint yet, a FASTA record's place once, a switch to "
    "another dataset") {
  TempDir d;
  // a full disk before the first checkpoint: no "the last checkpoint is intact"
  write_text(d.file("tiny.yaml"), kTiny);
  std::string run = d.file("run");
  std::string out = d.file("full.txt");
  int rc = std::system(("bash -c \"trap '' XFSZ; ulimit -f 4; exec " + std::string(GF_BIN) +
                        " train " + d.file("tiny.yaml") +
                        " --set train.steps=200 --set train.eval_every=0 --set "
                        "train.log_every=1 --run-dir " +
                        run + " --quiet\" > " + out + " 2>&1")
                           .c_str());
  std::string msg = read_text(out);
  INFO(msg);
  CHECK(WEXITSTATUS(rc) == 1);
  CHECK(has(msg, "metrics.jsonl: cannot write the run log"));
  CHECK(has(msg, "no checkpoint was written yet"));
  CHECK(!has(msg, "intact"));
  CHECK(!fs::exists(run + "/checkpoints/last.safetensors"));

  // predict: a FASTA record with a bad base names its file, line and record once
  std::string fasta, meta = "strain\tv\n";
  Rng rng(5, "fasta");
  for (int i = 0; i < 24; ++i) {
    std::string seq;
    for (int j = 0; j < 40; ++j) seq += "ACGT"[rng.below(4)];
    fasta += ">g" + std::to_string(i) + "\n" + seq + "\n";
    meta += "g" + std::to_string(i) + "\t" + "AB"[i % 2] + "\n";
  }
  write_text(d.file("g.fa"), fasta);
  write_text(d.file("m.tsv"), meta);
  write_text(d.file("f.yaml"),
             "name: f\nseed: 2\nthreads: 1\n"
             "data: {plugin: fasta_variants, fasta: g.fa, metadata: m.tsv, label_column: v, k: 3, "
             "stride: 3, val_ratio: 0.25, test_ratio: 0.25}\n"
             "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 2}}\n"
             "train: {steps: 4, batch_size: 4, warmup: 1, eval_every: 2, log_every: 2}\n");
  REQUIRE(
      run_cli("train " + d.file("f.yaml") + " --run-dir " + d.file("frun") + " --quiet").status ==
      0);
  write_text(d.file("bad.fa"), ">ok\nACGTACGTACGT\n>bad\nACGTXACGT\n");
  Cli p =
      run_cli("predict " + d.file("frun/checkpoints/last.safetensors") + " " + d.file("bad.fa"));
  CHECK(p.status == 2);
  std::string where = d.file("bad.fa") + ":3: record `bad`";
  CHECK(has(p.output, where + ": unknown base 'X'"));
  CHECK(p.output.find(where) == p.output.rfind(where));  // once

  // a task switch to another dataset plugin names both plugins, not "16 tokens is not 16 tokens"
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char((v >> 16) & 255), char((v >> 8) & 255), char(v & 255)};
  };
  std::string pixels, labels;
  for (int i = 0; i < 40 * 16; ++i) pixels += static_cast<char>(rng.below(256));
  for (int i = 0; i < 40; ++i) labels += static_cast<char>(i % 10);
  write_file(d.file("img"), be32(0x803) + be32(40) + be32(4) + be32(4) + pixels);
  write_file(d.file("lab"), be32(0x801) + be32(40) + labels);
  std::string idx = "{plugin: idx_images, levels: 15, train_images: " + d.file("img") +
                    ", train_labels: " + d.file("lab") + ", test_images: " + d.file("img") +
                    ", test_labels: " + d.file("lab") + "}";
  Cli s = run_cli("train " + d.file("tiny.yaml") + " --set \"train.switch={at: 3, data: " + idx +
                  "}\" --run-dir " + d.file("srun") + " --quiet");
  INFO(s.output);
  CHECK(s.status == 2);
  CHECK(has(s.output, "dataset `idx_images`, the first data by `listops`"));
  CHECK(!fs::exists(d.file("srun")));
}

TEST_CASE("memory: a run that cannot fit is refused up front with the estimate and the limit") {
  TempDir d;
  write_text(d.file("tiny.yaml"), kTiny);
  // 2^20 examples of up to 12 tokens, width 1024: about 1.5 TiB of activations, beyond any
  // machine these tests run on; a training set of 64 examples (the batch repeats them)
  Bounded b = run_bounded("train " + d.file("tiny.yaml") +
                          " --set train.batch_size=1048576 --set "
                          "model.d_model=1024 --run-dir " +
                          d.file("run"));
  check_refusal(b, 2, "train.batch_size: a training step needs about");
  CHECK(has(b.output, "batch 1048576 x "));
  CHECK(has(b.output, "more than the "));
  CHECK(!fs::exists(d.file("run")));
  // parameters alone: d_model 65536 with 2 layers is over a TiB of weights and optimizer state
  Bounded p =
      run_bounded("train " + d.file("tiny.yaml") +
                  " --set model.d_model=65536 --set model.layers=2 --run-dir " + d.file("run"));
  check_refusal(p, 2, "model: the parameters with their gradients and optimizer state need about");
  CHECK(has(p.output, "lower model.d_model"));
  CHECK(!fs::exists(d.file("run")));
  // the same model in a checkpoint's embedded config: eval refuses it before building it
  std::string ck = tiny_run(d.file("ok"));
  edit_and_save(ck, [](Checkpoint& c) {
    ConfigNode cfg = ConfigNode::load_string(c.metadata["config"]);
    cfg.apply_override("model.d_model=65536");
    c.metadata["config"] = cfg.dump();
  });
  check_refusal(run_bounded("eval " + ck), 2, "model: the parameters");
}

TEST_CASE("threads: more than the cores are capped with a warning") {
  TempDir d;
  write_text(d.file("tiny.yaml"), kTiny);
  Bounded b = run_bounded("train " + d.file("tiny.yaml") + " --set threads=4096 --run-dir " +
                          d.file("run"));
  INFO(b.output);
  CHECK(b.status == 0);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  CHECK(has(b.output, "warning: threads: 4096 is more than the " + std::to_string(cores) +
                          " cores of this machine; using " + std::to_string(cores)));
  CHECK(has(b.output, ", " + std::to_string(cores) + " threads, "));
  Bounded p = run_bounded("predict " + d.file("run/checkpoints/last.safetensors") + " " +
                          d.file("tiny.yaml") + " --threads 4096 --bad-records skip -q");
  CHECK(has(p.output, "warning: --threads 4096 is more than the"));
}

TEST_CASE(
    "eval on new files: a model of generated ListOps on a test file, and --data with only the test "
    "file") {
  TempDir d;
  std::string ck = tiny_run(d.file("run"));  // source: generate, min_length 4 (not the default)
  write_text(d.file("t.tsv"),
             "Source\tTarget\n[MAX 2 9 ]\t9\n( [MIN 3 4 ] )\t3\n[SM 1 2 ]\t3\n7\t7\n");
  // switching to files from --set: the embedded generate options are dropped, not refused
  Cli e = run_cli("eval " + ck +
                  " --set data.source=files --set data.test_file=" + d.file("t.tsv") + " --json");
  INFO(e.output);
  REQUIRE(e.status == 0);
  json j = json::parse(e.output.substr(e.output.find('{')));
  CHECK(j["examples"] == 4);
  // an option of the other mode given on the command line is still refused
  Cli m =
      run_cli("eval " + ck + " --set data.source=files --set data.test_file=" + d.file("t.tsv") +
              " --set data.min_length=3");
  CHECK(m.status == 2);
  CHECK(has(m.output, "`data.min_length`: is only used with source: generate"));
  // --data with source: files needs only the file of the split evaluated
  write_text(d.file("data.yaml"),
             "data: {plugin: listops, source: files, test_file: t.tsv, max_length: 12}\n");
  Cli f = run_cli("eval " + ck + " --data " + d.file("data.yaml") + " --json");
  INFO(f.output);
  REQUIRE(f.status == 0);
  CHECK(json::parse(f.output.substr(f.output.find('{')))["examples"] == 4);
  // the val split asked for: the val file is the one required
  Cli v = run_cli("eval " + ck + " --data " + d.file("data.yaml") + " --split val");
  CHECK(v.status == 2);
  CHECK(has(v.output, "`data.val_file`: is required with source: files"));
  // a training run still needs all three
  ConfigNode cfg = ConfigNode::load_string(kTiny, "tiny.yaml");
  cfg.apply_override("data={plugin: listops, source: files, test_file: " + d.file("t.tsv") + "}");
  CHECK(has(error_of([&] { Experiment ex(cfg, {GF_PLUGIN_DIR}); }),
            "`data.train_file`: is required"));
}

TEST_CASE("json text: any bytes survive JSON, valid UTF-8 unchanged, and the form round-trips") {
  // valid UTF-8 (and text without a leading U+FFFD) is itself
  for (std::string s : {std::string(""), std::string("plain"), std::string("caf\xc3\xa9"),
                        std::string("a\\x41"), std::string("x\xef\xbf\xbd")}) {
    CHECK(json_text(s) == s);
    CHECK(json_bytes(s) == s);
  }
  CHECK(json_text("caf\xe9") ==
        "\xef\xbf\xbd"
        "caf\\xe9");
  CHECK(json_text("a\\b\xff") ==
        "\xef\xbf\xbd"
        "a\\\\b\\xff");
  // a leading U+FFFD is escaped too, so the form stays one to one
  CHECK(json_text("\xef\xbf\xbd"
                  "\\xff") == "\xef\xbf\xbd\xef\xbf\xbd\\\\xff");
  // text json_text would not write is itself (an old checkpoint's U+FFFD from a lossy dump)
  CHECK(json_bytes("\xef\xbf\xbd"
                   "abc") ==
        "\xef\xbf\xbd"
        "abc");
  CHECK(json_bytes("\xef\xbf\xbd"
                   "\\x41") ==
        "\xef\xbf\xbd"
        "\\x41");
  // overlong forms, surrogates, code points past U+10FFFF and cut sequences are not UTF-8
  for (const char* bad : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80"})
    CHECK(!is_utf8(bad));
  gf::Rng rng(7, "json_text");
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng.below(12), '\0');
    for (char& c : s)
      c = "\\\xef\xbf\xbd"
          "a\xc3\xa9\xff\x80\x00"[rng.below(10)];
    const std::string t = json_text(s);
    CHECK(is_utf8(t));
    CHECK(json_bytes(t) == s);
    // through nlohmann::json, as keys and as values (compared outside CHECK: printing the
    // expected JSON would need a dump that these bytes cannot have)
    const bool same =
        json_bytes_tree(json::parse(dump_json(json{{s, {s, 1}}}))) == json{{s, {s, 1}}};
    CHECK(same);
  }
}

namespace {
// A FASTA data set in FOLDER (a name that is not UTF-8) whose ids and labels hold bytes that
// are not UTF-8 either, and its config, run.yaml.
void write_non_utf8_fasta(const std::string& folder) {
  fs::create_directories(folder);
  gf::Rng rng(5, "fasta");
  const char* motif[] = {"AAAAAAAAA", "CCCCCCCCC", "GGGGGGGGG"};
  const char* labels[] = {"caf\xe9", "\xff\xfe",
                          "\xef\xbf\xbd"
                          "ok\\"};
  std::string fasta, meta = "strain\tv\n";
  for (int i = 0; i < 62; ++i) {
    std::string seq;
    for (int j = 0; j < 60; ++j) seq += "ACGT"[rng.below(4)];
    std::string id = "g" + std::to_string(i) + "\xff";
    if (i < 60) {
      seq.replace(static_cast<size_t>(3 * rng.below(15)), 9, motif[i % 3]);
      meta += id + "\t" + labels[i % 3] + "\n";
    }
    fasta += ">" + id + " genome\n" + seq.substr(0, 30) + "\n" + seq.substr(30) + "\n";
  }
  write_file(folder + "/g.fa", fasta);
  write_file(folder + "/m.tsv", meta);
  write_text(folder + "/run.yaml",
             "name: f\nseed: 2\nthreads: 1\n"
             "data: {plugin: fasta_variants, fasta: g.fa, metadata: m.tsv, label_column: v, k: 3, "
             "stride: 3, val_ratio: 0.2, test_ratio: 0.2}\n"
             "model: {d_model: 16, layers: 1, max_len: 24, attention: {plugin: mha, heads: 2}}\n"
             "optimizer: {plugin: adamw, lr: 0.01}\n"
             "train: {steps: 20, batch_size: 8, warmup: 2, eval_every: 10, log_every: 10}\n");
}
}  // namespace

TEST_CASE(
    "json text: labels, ids and a config folder that are not UTF-8 train, evaluate, predict and "
    "resume") {
  TempDir d;
  const std::string folder = d.file("data\xe9");
  write_non_utf8_fasta(folder);
  const std::string run = d.file("run"), best = run + "/checkpoints/best.safetensors";
  // the first checkpoint holds the folder and the labels: no `type_error.316`, no step lost
  Cli t = run_cli("train '" + folder + "/run.yaml' --run-dir " + run + " -q");
  INFO(t.output);
  REQUIRE(t.status == 0);
  CHECK(!has(t.output, "json.exception"));
  Checkpoint ck = load_checkpoint(run + "/checkpoints/last.safetensors");
  CHECK(ck.metadata.at("config_dir") == folder);  // the bytes themselves, back from the file
  // the model evaluates on its own data: the saved class names compare equal to the data's
  Cli e = run_cli("eval " + best + " --split all --json");
  INFO(e.output);
  REQUIRE(e.status == 0);
  json ej = json::parse(e.output);
  CHECK(ej["examples"] == 60);
  std::set<std::string> names;
  for (auto& c : ej["classes"]) names.insert(json_bytes(c["name"].get<std::string>()));
  CHECK(names == std::set<std::string>{"caf\xe9", "\xff\xfe",
                                       "\xef\xbf\xbd"
                                       "ok\\"});
  // predictions name each record by its id, escaped in the documented form
  Cli p = run_cli("predict " + best + " '" + folder + "/g.fa' --format jsonl --out " +
                  d.file("p.jsonl") + " -q");
  INFO(p.output);
  REQUIRE(p.status == 0);
  std::ifstream in(d.file("p.jsonl"));
  std::string line;
  std::set<std::string> ids;
  while (std::getline(in, line))
    ids.insert(json_bytes(json::parse(line).at("id").get<std::string>()));
  CHECK(ids.size() == 62);
  CHECK(ids.count("g7\xff") == 1);
  // statistics and inspection as JSON
  Cli s = run_cli("data stats '" + folder + "/run.yaml' --json");
  INFO(s.output);
  REQUIRE(s.status == 0);
  CHECK(json::parse(s.output.substr(s.output.find('{')))["class_names"].size() == 3);
  CHECK(run_cli("inspect " + best + " --json").status == 0);
  // the resolved config names the folder: a run stopped before its first checkpoint starts
  // again from it (the relative data paths resolve against the folder)
  fs::remove_all(run + "/checkpoints");
  fs::create_directories(run + "/checkpoints");
  Cli r = run_cli("resume " + run + " -q");
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE(
    "messages: a symlink loop as the config, a 500-deep mapping, a ListOps file that is a "
    "directory or /dev/null") {
  TempDir d;
  fs::create_symlink(d.file("b.yaml"), d.file("a.yaml"));
  fs::create_symlink(d.file("a.yaml"), d.file("b.yaml"));
  Cli loop = run_cli("train " + d.file("a.yaml"));
  CHECK(loop.status == 2);
  CHECK(has(loop.output, "a loop of symbolic links"));
  CHECK(!has(loop.output, "no such configuration file"));

  std::string deep;
  for (int i = 0; i < 500; ++i)
    deep += std::string(2 * static_cast<size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
  const std::string e = gf_test::error_of([&] { ConfigNode::load_string(deep, "deep.yaml"); });
  CHECK(has(e, "deep.yaml:65: mappings or lists nested more than 64 levels deep"));
  CHECK(!has(e, "bad file"));
  // lists in lists on one line count too; 60 levels are fine
  std::string dashes;
  for (int i = 0; i < 70; ++i) dashes += "- ";
  CHECK(has(gf_test::error_of([&] { ConfigNode::load_string("a:\n" + dashes + "x\n"); }),
            "nested more than"));
  std::string ok;
  for (int i = 0; i < 60; ++i)
    ok += std::string(2 * static_cast<size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
  CHECK(ConfigNode::load_string(ok + std::string(120, ' ') + "v: |\n" + std::string(200, ' ') +
                                "text\n")
            .has("k0"));

  fs::create_directories(d.file("dir"));
  for (const std::string& f : {d.file("dir"), std::string("/dev/null")}) {
    ConfigNode cfg = ConfigNode::load_string(kTiny, "tiny.yaml");
    cfg.apply_override("data={plugin: listops, source: files, train_file: " + f +
                       ", val_file: " + f + ", test_file: " + f + "}");
    const std::string m = error_of([&] { Experiment ex(cfg, {GF_PLUGIN_DIR}); });
    INFO(m);
    CHECK(has(m, "`data.train_file`: " + f + ": is a " +
                     (f == "/dev/null" ? "character device" : "directory") +
                     ", expected a data file"));
    CHECK(!has(m, "not found"));
  }
}

TEST_CASE("messages: a run directory that is a file; a directory another process is running in") {
  TempDir d;
  write_text(d.file("file"), "x");
  Cli r = run_cli("resume " + d.file("file"));
  CHECK(r.status == 1);
  CHECK(has(r.output, d.file("file") + ": not a directory (a file)"));
  CHECK(!has(r.output, "no such run directory"));
  write_text(d.file("tiny.yaml"), kTiny);
  Cli t = run_cli("train " + d.file("tiny.yaml") + " --run-dir " + d.file("file"));
  CHECK(t.status == 2);
  CHECK(has(t.output, "--run-dir names a file, not a directory"));

  // the loser of a race for a run directory: the winner holds its lock and has written it
  tiny_run(d.file("run"));
  RunDir held(d.file("run"));
  held.lock();
  Cli lost = run_cli("train " + d.file("tiny.yaml") + " --run-dir " + d.file("run"));
  INFO(lost.output);
  CHECK(has(lost.output, "another growformer process (pid " + std::to_string(getpid()) +
                             ") is running in this run directory now; choose another --run-dir"));
  CHECK(!has(lost.output, "growformer resume"));  // not while the winner runs
}

TEST_CASE("messages: a process that races a run for its lock names the holder's pid, not `pid ?`") {
  TempDir d;
  const std::string run = d.file("run");
  fs::create_directories(run);
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  pid_t holder = fork();
  if (holder == 0) {  // takes the lock, and writes its pid only when told (a moment later)
    int fd = ::open((run + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
    ::flock(fd, LOCK_EX);
    char c = 'x';
    if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) _exit(1);
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::pwrite(fd, me.data(), me.size(), 0) < 0) _exit(1);
    ::sleep(20);
    _exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  // the loser finds the lock taken and an empty file: the holder is between its flock and its
  // write; its pid comes 100 ms later
  auto lost = std::async(std::launch::async, [&] {
    return error_of([&] {
      RunDir r(run);
      r.lock();
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(::write(go[1], "x", 1) == 1);
  const std::string msg = lost.get();
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  INFO(msg);
  CHECK(has(msg, "in use by another growformer process (pid " + std::to_string(holder) + ")"));
}

TEST_CASE("messages: an option left out is placed at its component, not `default of`") {
  TempDir d;
  write_text(d.file("c.yaml"), "name: x\ngrowth:\n  plugin: random\n");
  ConfigNode cfg = ConfigNode::load_file(d.file("c.yaml"));
  Options o(cfg.child("growth"), {{"options", OptType::Any, "{}", "kwargs"}}, "growth `python`");
  CHECK(o.where("options") == d.file("c.yaml") + ":3:3 (`growth.options` not set: its default)");
}

TEST_CASE(
    "sweep: a job another process is running is skipped as running, not `finished earlier and "
    "FAILED`") {
  TempDir d;
  write_text(d.file("base.yaml"), kTiny);
  write_text(d.file("sw.yaml"), "name: s\nbase: " + d.file("base.yaml") +
                                    "\nseeds: [1]\naxes:\n  model.attention.heads: [1, 2]\n");
  const std::string out = d.file("out");
  fs::create_directories(out + "/1__seed1");
  write_text(out + "/1__seed1/config.resolved.yaml", "name: tiny\n");
  RunDir held(out + "/1__seed1");
  held.lock();  // another sweep's process runs this job now
  Cli s = run_cli("sweep " + d.file("sw.yaml") + " --out " + out + " --quiet");
  INFO(s.output);
  CHECK(s.status == 1);
  CHECK(has(s.output,
            "1__seed1: running in another process now (pid " + std::to_string(getpid()) + ")"));
  CHECK(!has(s.output, "FAILED"));
  CHECK(!fs::exists(out + "/1__seed1/sweep_job.json"));  // its own process records it
  CHECK(fs::exists(out + "/2__seed1/sweep_job.json"));   // the other job ran
}
