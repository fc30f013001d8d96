// The strict configuration view: every error names the dotted path and location.
#include <fstream>

#include "growformer/config.hpp"
#include "growformer/fields.hpp"
#include "growformer/model.hpp"
#include "growformer/multihead.hpp"
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
  // a quoted number is a string: refused where a number goes (plain numbers, overrides too)
  CHECK(has(config_error("sec:\n  steps: \"2\"\n", kSpecs),
            "expected an integer, found the string \"2\" (quoted)"));
  CHECK(has(config_error("sec:\n  lr: '0.5'\n", kSpecs), "expected a number, found the string"));
  CHECK(has(config_error("sec:\n  sizes: [1, \"2\"]\n", kSpecs), "(quoted)"));
  CHECK(config_error("sec:\n  steps: 2\n  lr: 0.5\n", kSpecs).empty());
  CHECK(config_error("sec: {}\n", kSpecs, "sec.steps=3").empty());
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
  CHECK_THROWS_WITH_AS(n.child("name").as_string(),
                       "c.yaml:1:7: `name`: the value holds a NUL character "
                       "(a \\0 escape?); no option accepts one",
                       ConfigError);
  CHECK_THROWS_WITH_AS(ConfigNode::load_string("sec:\n  \"tr\\0ain\": 1\n", "c.yaml"),
                       doctest::Contains("c.yaml:2:3: a key under `sec` holds a NUL character"),
                       ConfigError);
  CHECK(config_error("sec:\n  train: \"train.tsv\"\n", specs)
            .empty());  // an ordinary value still reads
}

TEST_CASE("did_you_mean") {
  CHECK(did_you_mean("atention", {"attention", "layers"}) == "attention");
  CHECK(did_you_mean("zzzzzz", {"attention", "layers"}).empty());
}

namespace {
struct Shared {
  double ratio = 0.1;
  int64_t seed = 7;
  static const OptionTable<Shared>& table() {
    static const auto t =
        OptionTable<Shared>()
            .add("ratio", &Shared::ratio, "0.1", "a share", 0, 0.9)
            .add("seed", &Shared::seed, "~", "a seed (default: the initial value)", 0);
    return t;
  }
};
struct Part {
  std::string name = "p";
};
struct Table : Shared {
  std::string first;
  ConfigNode inner;
  std::optional<int64_t> limit;
  Part part;
  int64_t last = 0;
  static const OptionTable<Table>& table() {
    static const auto part = OptionTable<Part>().add("name", &Part::name, "p", "a part's name");
    static const auto t = OptionTable<Table>()
                              .add("first", &Table::first, "", "required: its default is empty")
                              .include(Shared::table(), {"seed"})
                              .add("inner", &Table::inner, "{plugin: x}", "a component")
                              .add("limit", &Table::limit, "~", "unset unless given", 1)
                              .include(part, &Table::part)
                              .add("last", &Table::last, "3", "last")
                              .include(Shared::table(), {"ratio"});
    return t;
  }
};
std::vector<std::string> names(const OptionSpecs& specs) {
  std::vector<std::string> out;
  for (const auto& s : specs) out.push_back(s.name);
  return out;
}
}  // namespace

TEST_CASE(
    "option tables: components, required and optional options, shared tables picked by name") {
  const OptionSpecs specs = Table::table().specs();
  // the picked options of a shared table sit where the table includes them
  CHECK(names(specs) ==
        std::vector<std::string>{"first", "seed", "inner", "limit", "name", "last", "ratio"});
  CHECK(specs[0].required);
  CHECK(!specs[1].required);
  CHECK(specs[2].type == OptType::Component);
  CHECK(specs[3].type == OptType::Int);
  CHECK(specs[3].min == 1);
  CHECK(specs[6].max == doctest::Approx(0.9));
  CHECK_THROWS_AS(OptionTable<Table>().include(Shared::table(), {"nothing"}), std::logic_error);

  ConfigNode n =
      ConfigNode::load_string("first: a\nlimit: 4\nratio: 0.5\ninner: {plugin: y, k: 2}\n");
  Options o(n, specs, "thing");
  const Table t = Table::table().read(o);
  CHECK(t.first == "a");
  CHECK(t.seed == 7);  // `~` and not given: the initial value stays
  CHECK(t.ratio == doctest::Approx(0.5));
  CHECK(t.inner.child("plugin").as_string() == "y");
  CHECK(t.inner.child("k").as_int() == 2);
  REQUIRE(t.limit.has_value());
  CHECK(*t.limit == 4);
  CHECK(t.part.name == "p");
  CHECK(t.last == 3);
  const auto sum = Table::table().summary(t);
  CHECK(sum[3] == std::pair<std::string, std::string>{"limit", "4"});
  CHECK(sum[2] == std::pair<std::string, std::string>{"inner", "{plugin: y, k: 2}"});

  Options unset(ConfigNode::load_string("first: b\nseed: 11\n"), specs, "thing");
  const Table u = Table::table().read(unset);
  CHECK(!u.limit.has_value());
  CHECK(u.seed == 11);
  CHECK(Table::table().summary(u)[3].second == "~");
  CHECK(u.inner.child("plugin").as_string() == "x");  // the default component

  CHECK(has(config_error("sec:\n  limit: 2\n", specs), "missing required key `first`"));
  CHECK(has(config_error("sec:\n  first: a\n  limit: 0\n", specs), "out of range"));
  CHECK(has(config_error("sec:\n  first: a\n  inner: 3\n", specs), "expected a mapping"));
}

TEST_CASE("the model's and the multi-head blocks' options come from their tables") {
  CHECK(names(Model::options()) == std::vector<std::string>{"d_model", "layers", "mlp_ratio",
                                                            "max_len", "pool", "dropout",
                                                            "final_norm", "attention"});
  const OptionSpecs model = Model::options();
  CHECK(model.back().required);
  CHECK(model.back().type == OptType::Component);
  CHECK(model[4].choices == std::vector<std::string>{"mean", "cls"});
  ConfigNode n = ConfigNode::load_string("d_model: 32\npool: cls\nattention: {plugin: mha}\n");
  const ModelSettings m = ModelSettings::table().read(Options(n, model, "model"));
  CHECK(m.d_model == 32);
  CHECK(m.layers == 2);
  CHECK(m.cls);
  CHECK(m.final_norm);
  CHECK(m.attention.child("plugin").as_string() == "mha");

  CHECK(names(MultiHeadBlock::common_options()) ==
        std::vector<std::string>{"heads", "d_k", "d_v", "head", "combine", "max_heads"});
  ConfigNode h = ConfigNode::load_string("heads: 3\ncombine: mean\n");
  const MultiHeadSettings s =
      MultiHeadSettings::table().read(Options(h, MultiHeadBlock::common_options(), "block"));
  CHECK(s.heads == 3);
  CHECK(s.combine_mean);
  CHECK(s.max_heads == 256);
  CHECK(s.head.child("plugin").as_string() == "dot_product");
}
