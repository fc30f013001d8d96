// The plugin loader: real plugins, and deliberately broken ones.
#include <string>

#include "growformer/plugin.hpp"
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
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("the build tree's plugins load and register every built-in component") {
  Registry& r = gf_test::registry();
  CHECK(r.failures().empty());
  for (auto [k, n] : std::vector<std::pair<Kind, std::string>>{
           {Kind::Attention, "mha"}, {Kind::Head, "dot_product"}, {Kind::Optimizer, "sgd"},
           {Kind::Optimizer, "adamw"}, {Kind::Growth, "none"}, {Kind::Pruning, "none"},
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
