// The strict configuration view: every error names the dotted path and location.
#include <fstream>

#include "growformer/config.hpp"
#include "testing.hpp"

using namespace gf;

namespace {
std::string config_error(const std::string& yaml, const OptionSpecs& specs,
                         const std::string& override_ = "") {
  try {
    ConfigNode n = ConfigNode::load_string(yaml, "c.yaml");
    if (!override_.empty()) n.apply_override(override_);
    Options o(n.child("sec"), specs, "thing");
    (void)o;
    n.check_all_consumed();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }
const OptionSpecs kSpecs = {
    {"steps", OptType::Int, "10", "steps", 1, 100},
    {"lr", OptType::Float, "0.1", "rate", 0, 1},
    {"mode", OptType::String, "fast", "mode", -INFINITY, INFINITY, {"fast", "slow"}},
    {"flag", OptType::Bool, "false", "flag"},
    {"sizes", OptType::IntList, "[1, 2]", "sizes"},
};
}  // namespace

TEST_CASE("values, defaults and overrides") {
  ConfigNode n = ConfigNode::load_string("sec:\n  steps: 5\n  sizes: [3, 4]\n", "c.yaml");
  n.apply_override("sec.lr=0.5");
  Options o(n.child("sec"), kSpecs, "thing");
  CHECK(o.get_int("steps") == 5);
  CHECK(o.get_float("lr") == doctest::Approx(0.5));
  CHECK(o.get_string("mode") == "fast");
  CHECK(o.get_bool("flag") == false);
  CHECK(o.get_int_list("sizes") == std::vector<int64_t>{3, 4});
  CHECK(o.is_set("steps"));
  CHECK(!o.is_set("mode"));
  CHECK(!o.differs_from_default("mode"));
  // a key given with its default value is set (it no longer counts as absent)
  Options same(ConfigNode::load_string("steps: 10\nmode: fast\n", "c.yaml"), kSpecs, "thing");
  CHECK(same.is_set("steps"));
  CHECK(same.is_set("mode"));
  CHECK(!same.differs_from_default("steps"));
  CHECK(!same.differs_from_default("mode"));
  CHECK(o.differs_from_default("steps"));
  CHECK(o.where("lr") == "--set sec.lr");
}

TEST_CASE("an unknown key names file:line:col, the path, the valid keys and a did-you-mean") {
  std::string e = config_error("sec:\n  steps: 5\n  stesp: 3\n", kSpecs);
  CHECK(has(e, "c.yaml:3:3"));
  CHECK(has(e, "`sec.stesp`"));
  CHECK(has(e, "did you mean `steps`?"));
  CHECK(has(e, "valid keys: steps, lr, mode, flag, sizes"));
}

TEST_CASE("wrong types, ranges and choices") {
  CHECK(has(config_error("sec:\n  steps: many\n", kSpecs), "expected an integer, found `many`"));
  CHECK(has(config_error("sec:\n  steps: many\n", kSpecs), "c.yaml:2:10"));
  CHECK(has(config_error("sec:\n  steps: 1000\n", kSpecs), "out of range [1, 100]"));
  CHECK(has(config_error("sec:\n  lr: abc\n", kSpecs), "expected a number"));
  CHECK(has(config_error("sec:\n  flag: maybe\n", kSpecs), "expected true or false"));
  std::string e = config_error("sec:\n  mode: slwo\n", kSpecs);
  CHECK(has(e, "not one of: fast, slow"));
  CHECK(has(e, "did you mean `slow`?"));
  CHECK(has(config_error("sec:\n  sizes: 3\n", kSpecs), "expected a list of int"));
  CHECK(has(config_error("sec:\n  steps: [1]\n", kSpecs), "expected a single value"));
}

TEST_CASE("a duplicate key is an error with its location") {
  std::string e = config_error("sec:\n  steps: 5\n  steps: 6\n", kSpecs);
  CHECK(has(e, "duplicate key `sec.steps`"));
  CHECK(has(e, "c.yaml:3:3"));
}

TEST_CASE("malformed YAML reports file:line") {
  std::string e = config_error("sec:\n  steps: [1, 2\n", kSpecs);
  CHECK(has(e, "malformed YAML"));
  CHECK(has(e, "c.yaml:"));
}

TEST_CASE("a key nobody reads is an error") {
  std::string e = config_error("sec:\n  steps: 5\nextra:\n  deep: 1\n", kSpecs);
  CHECK(has(e, "unknown key `extra.deep`"));
  CHECK(has(e, "c.yaml:4:3"));
}

TEST_CASE("overrides: errors and nested creation") {
  ConfigNode n = ConfigNode::load_string("a:\n  b: 1\n");
  CHECK_THROWS_AS(n.apply_override("novalue"), ConfigError);
  CHECK_THROWS_AS(n.apply_override("a.b.c=1"), ConfigError);  // b is a scalar
  n.apply_override("x.y.z=[1, 2]");
  CHECK(n.child("x").child("y").child("z").is_sequence());
  // an override error names --set
  std::string e = config_error("sec: {}\n", kSpecs, "sec.steps=0");
  CHECK(has(e, "--set sec.steps"));
}

TEST_CASE("files: missing file and relative paths") {
  CHECK_THROWS_WITH_AS(ConfigNode::load_file("/nonexistent/x.yaml"),
                       doctest::Contains("no such configuration file"), ConfigError);
  std::string path = "/tmp/gf_test_cfg.yaml";
  std::ofstream(path) << "sec:\n  file: data/x.tsv\n";
  ConfigNode n = ConfigNode::load_file(path);
  Options o(n.child("sec"), {{"file", OptType::String, "", "a path"}}, "thing");
  CHECK(o.resolve_path(o.get_string("file")) == "/tmp/data/x.tsv");
}

TEST_CASE("a NUL character in a value or a key is refused, naming the key") {
  const OptionSpecs specs = {{"train", OptType::String, "x.tsv", "a path"}};
  // YAML's "\0" escape: the path would otherwise be cut at the NUL (train.tsv read silently)
  std::string e = config_error("sec:\n  train: \"train.tsv\\0.junk\"\n", specs);
  CHECK(has(e, "c.yaml:2:10: `sec.train`: the value holds a NUL character"));
  e = config_error("sec: {}\n", specs, "sec.train=\"a\\0b\"");
  CHECK(has(e, "--set sec.train: `sec.train`: the value holds a NUL character"));
  ConfigNode n = ConfigNode::load_string("name: \"run\\0 and more\"\n", "c.yaml");
  CHECK_THROWS_WITH_AS(n.child("name").as_string(), "c.yaml:1:7: `name`: the value holds a NUL character "
                       "(a \\0 escape?); no option accepts one", ConfigError);
  CHECK_THROWS_WITH_AS(ConfigNode::load_string("sec:\n  \"tr\\0ain\": 1\n", "c.yaml"),
                       doctest::Contains("c.yaml:2:3: a key under `sec` holds a NUL character"), ConfigError);
  CHECK(config_error("sec:\n  train: \"train.tsv\"\n", specs).empty());  // an ordinary value still reads
}

TEST_CASE("did_you_mean") {
  CHECK(did_you_mean("atention", {"attention", "layers"}) == "attention");
  CHECK(did_you_mean("zzzzzz", {"attention", "layers"}).empty());
}
