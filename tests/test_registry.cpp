// The plugin loader: real plugins, and deliberately broken ones.
#include <filesystem>
#include <fstream>
#include <string>

#include "growformer/plugin.hpp"
#include "growformer/tokenizer_fields.hpp"
#include "testing.hpp"

using namespace gf;

namespace {
std::string broken(const std::string& name) {
  return std::string(GF_BROKEN_PLUGIN_DIR) + "/libgf_broken_" + name + ".so";
}
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("the build tree's plugins load and register every built-in component") {
  Registry& r = gf_test::registry();
  CHECK(r.failures().empty());
  for (auto [k, n] : std::vector<std::pair<Kind, std::string>>{{Kind::Attention, "mha"},
                                                               {Kind::Head, "dot_product"},
                                                               {Kind::Optimizer, "sgd"},
                                                               {Kind::Optimizer, "adamw"},
                                                               {Kind::Growth, "none"},
                                                               {Kind::Pruning, "none"},
                                                               {Kind::Dataset, "listops"}}) {
    INFO(n);
    const ComponentInfo* c = r.find(k, n);
    REQUIRE(c != nullptr);
    CHECK(contains(c->library, "libgf_"));
  }
  for (const auto& l : r.libraries()) CHECK(contains(l.sha256, "fnv1a64:"));
}

TEST_CASE("a wrong ABI version is refused naming the file, both versions and the fix") {
  Registry r;
  std::string e = error_of([&] { r.load_library(broken("wrong_abi")); });
  CHECK(contains(e, "libgf_broken_wrong_abi.so"));
  CHECK(contains(e, "ABI version " + std::to_string(GROWFORMER_ABI_VERSION + 98)));
  CHECK(contains(e, "ABI version " + std::to_string(GROWFORMER_ABI_VERSION)));
  CHECK(contains(e, "rebuild"));
}

TEST_CASE("a fingerprint mismatch is refused") {
  Registry r;
  std::string e = error_of([&] { r.load_library(broken("bad_fingerprint")); });
  CHECK(contains(e, "othercc-1/otherlib-1/core-0.0.0"));
  CHECK(contains(e, GROWFORMER_FINGERPRINT));
}

TEST_CASE("a library without the entry point is refused") {
  Registry r;
  std::string e = error_of([&] { r.load_library(broken("no_entry")); });
  CHECK(contains(e, "growformer_plugin_info"));
  CHECK(contains(e, "libgf_broken_no_entry.so"));
}

TEST_CASE("a file that is not a library reports the loader's own message") {
  Registry r;
  std::string e = error_of([&] { r.load_library(std::string(GF_SOURCE_DIR) + "/README.md"); });
  CHECK(contains(e, "cannot load plugin library"));
}

TEST_CASE("a duplicate component name is refused naming both libraries") {
  Registry r;
  r.load_directories({GF_PLUGIN_DIR});
  std::string e = error_of([&] { r.load_library(broken("duplicate")); });
  CHECK(contains(e, "`adamw` registered twice"));
  CHECK(contains(e, "libgf_optim.so"));
  CHECK(contains(e, "libgf_broken_duplicate.so"));
}

TEST_CASE("a register callback that throws registers nothing") {
  Registry r;
  std::string e = error_of([&] { r.load_library(broken("throwing_register")); });
  CHECK(contains(e, "boom from register"));
  CHECK(r.find(Kind::Growth, "half_registered") == nullptr);
}

TEST_CASE("a factory that throws is reported with the component and config location") {
  Registry r;
  r.load_library(broken("throwing_factory"));
  ConfigNode n = ConfigNode::load_string("plugin: exploding\n", "cfg.yaml");
  std::string e = error_of([&] { r.create_dataset(n, DatasetBuild{1}); });
  CHECK(contains(e, "boom from the factory"));
  CHECK(contains(e, "exploding"));
  CHECK(contains(e, "cfg.yaml"));
}

TEST_CASE("an unknown plugin lists the known ones with a did-you-mean") {
  Registry& r = gf_test::registry();
  ConfigNode n = ConfigNode::load_string("attention:\n  plugin: mah\n", "m.yaml");
  AttentionBuild b{16, 0, &r, nullptr};
  std::string e;
  try {
    r.create_attention(n.child("attention"), b);
  } catch (const ConfigError& ex) {
    e = ex.what();
  }
  CHECK(contains(e, "m.yaml:2:11"));
  CHECK(contains(e, "unknown attention plugin `mah`"));
  CHECK(contains(e, "did you mean `mha`?"));
  CHECK(contains(e, "libgf_attn_mha.so"));
}

TEST_CASE("objects keep their library loaded after the registry is gone") {
  std::shared_ptr<Optimizer> opt;
  {
    Registry r;
    r.load_directories({GF_PLUGIN_DIR});
    opt = r.create_optimizer(ConfigNode::load_string("plugin: sgd\nmomentum: 0.5\n"));
  }
  // the registry (and its handles) are destroyed; the object's code must still be mapped
  Var p = parameter(Tensor({2}, 1.0f));
  p.grad_buf().fill(1.0f);
  gf::NamedParams ps{{"p", p}};
  opt->step(ps, 0.1f);
  CHECK(p.value()[0] == doctest::Approx(0.9));
  opt.reset();
}

TEST_CASE(
    "a dataset's formats: which datasets take data in memory, and they outlive the registry") {
  std::shared_ptr<const DataFormats> images;
  {
    Registry r;
    r.load_directories({GF_PLUGIN_DIR});
    // what a config with data in memory and no data plugin reads it with
    CHECK(r.datasets_for("texts", true) == std::vector<std::string>{"text_tsv"});
    CHECK(r.datasets_for("ids", true) == std::vector<std::string>{"text_tsv"});
    CHECK(r.datasets_for("images", true) == std::vector<std::string>{"idx_images"});
    CHECK(r.datasets_for("numbers", false).empty());  // no built-in dataset takes numbers
    CHECK(r.data_formats("listops") == nullptr);      // it reads its own files only
    CHECK(r.data_formats("no_such_dataset") == nullptr);
    const DataFormats* text = r.data_formats("text_tsv");
    REQUIRE(text != nullptr);
    CHECK(text->test_file_options("/d/new.csv") ==
          std::vector<std::string>{"format=auto", "test=\"/d/new.csv\""});
    // the columns a DataFrame is read with: the config's, else the usual names
    ConfigNode named = ConfigNode::load_string("text_column: review", "<t>");
    CHECK(text->columns(named, StagePurpose::train).input == std::vector<std::string>{"review"});
    CHECK(text->columns(named, StagePurpose::train).input_set);
    CHECK(text->columns(ConfigNode(), StagePurpose::train).input ==
          std::vector<std::string>{"text", "sentence"});
    CHECK(r.find(Kind::Dataset, "idx_images")->formats->kinds() ==
          std::vector<std::string>{"images"});
    images = r.find(Kind::Dataset, "idx_images")->formats;
  }
  // a copy holds the plugin's library: its code is still there
  CHECK(images->default_for() == std::vector<std::string>{"images"});
}

namespace {
struct Saved {
  std::string tokenizer;
  int64_t size = 0;
  std::vector<std::string> vocab;
};
const TokenizerFields<Saved>& saved_fields() {
  static const auto t =
      TokenizerFields<Saved>("toy")
          .add("tokenizer", &Saved::tokenizer)
          .add("size", &Saved::size)
          .add("vocab", &Saved::vocab, [](const Saved& s) { return s.tokenizer == "word"; });
  return t;
}
}  // namespace

TEST_CASE("a saved tokenizer declared once: written and read back, a field only when it applies") {
  Saved word{"word", 7, {"<pad>", "caf\xe9"}};  // bytes that are not UTF-8 survive
  const std::string text = saved_fields().save(word);
  CHECK(text.find("\"plugin\":\"toy\"") != std::string::npos);
  Saved back;
  saved_fields().load(text, back);
  CHECK(back.tokenizer == "word");
  CHECK(back.size == 7);
  CHECK(back.vocab == word.vocab);
  Saved chars{"char", 3, {"unused"}};
  CHECK(saved_fields().save(chars).find("vocab") == std::string::npos);
  Saved other;
  other.vocab = {"kept"};
  saved_fields().load(saved_fields().save(chars), other);
  CHECK(other.vocab == std::vector<std::string>{"kept"});  // not read for `char`
  CHECK(contains(error_of([&] { saved_fields().load(R"({"plugin":"text_tsv"})", other); }),
                 "toy: the checkpoint's tokenizer belongs to dataset `text_tsv`, not toy"));
  CHECK(contains(
      error_of([&] { saved_fields().load(R"({"plugin":"toy","tokenizer":"word"})", other); }),
      "toy: corrupt saved tokenizer"));
}

TEST_CASE("search path order: --plugin-path, GROWFORMER_PLUGIN_PATH, build tree, install tree") {
  setenv("GROWFORMER_PLUGIN_PATH", "/env/a:/env/b", 1);
  auto p = Registry::search_path({"/cli"});
  unsetenv("GROWFORMER_PLUGIN_PATH");
  REQUIRE(p.size() >= 5);
  CHECK(p[0] == "/cli");
  CHECK(p[1] == "/env/a");
  CHECK(p[2] == "/env/b");
  CHECK(contains(p[p.size() - 2] + p.back(), "plugins"));
}

namespace {
using Cli = gf_test::Shell;
Cli run_cli(const std::string& env, const std::string& args) {
  return gf_test::run_shell(env + " " + GF_BIN + " " + args);
}
}  // namespace

TEST_CASE(
    "a static initialiser that throws or aborts is isolated: refused naming the file and why") {
  Registry r;
  // its exception leaves dlopen in a child process only (the loader's lock would stay held here)
  std::string e = error_of([&] { r.load_library(broken("throwing_static")); });
  CHECK(contains(e, "libgf_broken_throwing_static.so"));
  // its message, whichever way it came out: as an exception out of dlopen ("a static
  // initialiser threw: ..."), or, where the loader lets nothing through (an ASan build's dlopen
  // ends the child in std::terminate), as the child's last words
  CHECK(contains(e, "boom from a static initialiser"));
  CHECK((contains(e, "a static initialiser threw") || contains(e, "ends the process")));
  // one that ends the process ends the child, with its last message
  std::string a = error_of([&] { r.load_library(broken("aborting_static")); });
  CHECK(contains(a, "libgf_broken_aborting_static.so"));
  CHECK(contains(a, "signal 6"));
  CHECK(contains(a, "aborting from a static initialiser"));
  CHECK(r.libraries().empty());
  // this process goes on: the real plugins load after it
  r.load_directories({GF_PLUGIN_DIR});
  CHECK(r.find(Kind::Optimizer, "adamw") != nullptr);
}

TEST_CASE(
    "load_directories records every broken library and goes on; a failed register names its "
    "components") {
  Registry r;
  r.load_directories({GF_BROKEN_PLUGIN_DIR, GF_PLUGIN_DIR});
  const FailedLibrary *stat = nullptr, *reg = nullptr, *aborts = nullptr;
  for (const auto& f : r.failures()) {
    if (contains(f.path, "throwing_static")) stat = &f;
    if (contains(f.path, "aborting_static")) aborts = &f;
    if (contains(f.path, "throwing_register")) reg = &f;
  }
  REQUIRE(stat != nullptr);
  REQUIRE(reg != nullptr);
  REQUIRE(aborts != nullptr);
  CHECK(contains(stat->error, "boom from a static initialiser"));
  CHECK(contains(aborts->error, "ends the process (signal 6"));
  CHECK(contains(reg->error, "boom from register"));
  REQUIRE(reg->components.size() == 1);
  CHECK(reg->components[0] == "half_registered");
  CHECK(r.find(Kind::Growth, "half_registered") == nullptr);
  CHECK(r.find(Kind::Attention, "mha") != nullptr);
}

TEST_CASE(
    "cli: a broken plugin beside unrelated ones stops no run; describe names its library and why") {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(GF_BROKEN_PLUGIN_DIR) / ("isolated_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (auto n : {"throwing_static", "aborting_static", "throwing_register"})
    fs::copy_file(broken(n), dir / ("libgf_broken_" + std::string(n) + ".so"),
                  fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tiny.yaml")
      << "name: tiny\nthreads: 1\ndata: {plugin: listops, train_size: 32, val_size: 8, test_size: "
         "8, "
         "min_length: 4, max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 1}}\n"
         "train: {steps: 2, batch_size: 8, warmup: 1, eval_every: 2}\n";
  std::string env = "GROWFORMER_PLUGIN_PATH=" + dir.string();
  Cli t = run_cli(env, "train " + (dir / "tiny.yaml").string() + " --run-dir " +
                           (dir / "run").string() + " -q");
  INFO(t.output);
  CHECK(t.status == 0);
  CHECK(fs::exists(dir / "run/checkpoints/last.safetensors"));
  Cli l = run_cli(env, "plugins list");
  CHECK(l.status == 0);
  CHECK(contains(l.output, "failed to load:"));
  CHECK(contains(l.output, "boom from a static initialiser"));
  CHECK(contains(l.output, "aborting from a static initialiser"));
  // a component its register callback had named: the library and the reason
  Cli d = run_cli(env, "plugins describe half_registered");
  INFO(d.output);
  CHECK(d.status == 2);
  CHECK(contains(d.output, "`half_registered` is not available: its library failed to load"));
  CHECK(contains(d.output, "libgf_broken_throwing_register.so"));
  CHECK(contains(d.output, "boom from register"));
  // a library that died in its static initialiser, named after the component
  Cli s = run_cli(env, "plugins describe throwing_static");
  INFO(s.output);
  CHECK(s.status == 2);
  CHECK(contains(s.output, "libgf_broken_throwing_static.so"));
  CHECK(contains(s.output, "boom from a static initialiser"));
  // an unknown name lists the failures it may be among
  Cli u = run_cli(env, "plugins describe nothing_like_this");
  CHECK(u.status == 2);
  CHECK(contains(u.output, "no component named `nothing_like_this`"));
  CHECK(contains(u.output, "libraries that failed to load (it may be in one)"));
  fs::remove_all(dir);
}

TEST_CASE("cli: resume finds a plugin through the run's plugins.lock; a missing library is named") {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(GF_BROKEN_PLUGIN_DIR) / ("lock_" + std::to_string(::getpid()));
  fs::path lib = dir / "plugins" / "libgf_elsewhere.so";
  fs::create_directories(lib.parent_path());
  fs::copy_file(std::string(GF_ELSEWHERE_PLUGIN_DIR) + "/libgf_elsewhere.so", lib);
  std::ofstream(dir / "tiny.yaml")
      << "name: tiny\nthreads: 1\ndata: {plugin: listops, train_size: 32, val_size: 8, test_size: "
         "8, "
         "min_length: 4, max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 1}}\n"
         "train: {steps: 4, batch_size: 8, warmup: 1, eval_every: 2, check_every: 1}\n"
         "growth: {plugin: elsewhere_none}\n";
  auto start = [&](const std::string& run) {
    return run_cli("", "train " + (dir / "tiny.yaml").string() + " --run-dir " +
                           (dir / run).string() + " --plugin-path " + lib.parent_path().string() +
                           " --stop-after 2 -q");
  };
  // without the flag the component is unknown: the lock is what finds it on resume
  Cli plain = run_cli(
      "", "train " + (dir / "tiny.yaml").string() + " --run-dir " + (dir / "x").string() + " -q");
  CHECK(plain.status == 2);
  CHECK(contains(plain.output, "unknown growth plugin `elsewhere_none`"));
  REQUIRE(start("a").status == 0);
  Cli r = run_cli("", "resume " + (dir / "a").string() + " -q");
  INFO(r.output);
  CHECK(r.status == 0);
  std::ifstream m(dir / "a/metrics.jsonl");
  std::string all((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
  CHECK(contains(all, "\"split\":\"test\""));
  // the library moved away: the error names the plugin, where the lock had it, and the fix
  REQUIRE(start("b").status == 0);
  fs::rename(lib.parent_path(), dir / "moved");
  Cli gone = run_cli("", "resume " + (dir / "b").string() + " -q");
  INFO(gone.output);
  CHECK(gone.status == 2);
  CHECK(contains(gone.output, "unknown growth plugin `elsewhere_none`"));
  CHECK(contains(gone.output, "names libraries that are missing now"));
  CHECK(contains(gone.output, "plugin `elsewhere` 1.0.0 from " + lib.string()));
  CHECK(contains(gone.output, "--plugin-path"));
  // given its new folder, it resumes
  Cli moved = run_cli(
      "", "resume " + (dir / "b").string() + " --plugin-path " + (dir / "moved").string() + " -q");
  INFO(moved.output);
  CHECK(moved.status == 0);
  fs::remove_all(dir);
}
