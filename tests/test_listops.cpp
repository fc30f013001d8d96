// ListOps: evaluator against hand computations, the LRA serialization, tokenizer ids, the
// generator (length bounds, determinism, labels against an independent evaluator), TSV files,
// check_file and the `listops` dataset plugin.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "growformer/config.hpp"
#include "growformer/data/io.hpp"
#include "growformer/data/listops.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
namespace lo = gf::listops;

namespace {

// A scratch directory removed at the end of the test case.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("gf_test_listops_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// Independent oracle: recursive descent over prefix token ids, median as numpy (mean of the
// middle pair, as a double) then truncated.
int oracle(const std::vector<int32_t>& t, size_t& pos) {
  int32_t id = t.at(pos++);
  if (id >= lo::kDigit0) return id - lo::kDigit0;
  std::vector<int> a;
  while (t.at(pos) != lo::kClose) a.push_back(oracle(t, pos));
  ++pos;
  std::sort(a.begin(), a.end());
  size_t n = a.size();
  if (id == lo::kMin) return a.front();
  if (id == lo::kMax) return a.back();
  if (id == lo::kMed) return static_cast<int>(n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2.0);
  int s = 0;
  for (int v : a) s += v;
  return s % 10;
}

// Depth of the tree (root = 1) and the largest arity, from prefix ids.
void shape_of(const std::vector<int32_t>& t, int& depth, int& max_arity, int& min_arity) {
  depth = 0;
  max_arity = 0;
  min_arity = 1 << 30;
  std::vector<int> args;  // arguments seen per open operator
  for (int32_t id : t) {
    if (id == lo::kClose) {
      max_arity = std::max(max_arity, args.back());
      min_arity = std::min(min_arity, args.back());
      args.pop_back();
      continue;
    }
    if (!args.empty()) ++args.back();
    depth = std::max(depth, static_cast<int>(args.size()) + 1);
    if (id < lo::kDigit0) args.push_back(0);
  }
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("listops: evaluate matches hand-computed labels") {
  CHECK(lo::evaluate("7") == 7);
  CHECK(lo::evaluate("[MAX 2 9 ]") == 9);
  CHECK(lo::evaluate("( ( ( [MAX 2 ) 9 ) ] )") == 9);
  CHECK(lo::evaluate("[MIN 4 7 3 ]") == 3);
  CHECK(lo::evaluate("[MED 7 1 5 ]") == 5);           // odd count: middle of 1 5 7
  CHECK(lo::evaluate("[MED 1 2 ]") == 1);             // (1 + 2) / 2 = 1.5 -> 1
  CHECK(lo::evaluate("[MED 9 0 3 8 ]") == 5);         // 0 3 8 9: (3 + 8) / 2 = 5.5 -> 5
  CHECK(lo::evaluate("[MED 2 4 ]") == 3);             // even count, exact mean
  CHECK(lo::evaluate("[SM 9 8 7 ]") == 4);            // 24 mod 10
  CHECK(lo::evaluate("[SM 5 5 ]") == 0);              // wraps to 0
  CHECK(lo::evaluate("[SM 1 2 3 ]") == 6);            // no wrap
  CHECK(lo::evaluate("[MAX 2 [MIN 4 7 ] 0 ]") == 4);  // nesting
  CHECK(lo::evaluate("[MAX 2 9 [MIN 4 7 ] 0 ]") == 9);
  // MED(1 2 3 4) = 2, MAX(9 1) = 9: 2 + 9 + 3 = 14 -> 4
  CHECK(lo::evaluate("[SM [MED 1 2 3 4 ] [MAX 9 1 ] 3 ]") == 4);
  // SM(6 7) = 3, MIN(8, MAX(3 5)) = 5, MED(3 5 9 1) = (3 + 5) / 2 = 4
  CHECK(lo::evaluate("[MED [SM 6 7 ] [MIN 8 [MAX 3 5 ] ] 9 1 ]") == 4);
  // the same in LRA form, parentheses ignored, extra whitespace tolerated
  CHECK(lo::evaluate("( ( ( ( ( [MED ( ( ( [SM 6 ) 7 ) ] ) ) ( ( ( [MIN 8 ) ( ( ( [MAX 3 ) 5 ) ] "
                     ") ) ] ) ) 9 ) 1 )  ] )") == 4);
  CHECK(lo::apply_operator(lo::kMed, {9, 9, 0, 0, 1}) == 1);
  CHECK(lo::apply_operator(lo::kMed, {9, 8}) == 8);
}

TEST_CASE("listops: malformed expressions name the token") {
  auto message = [](const std::string& expr) {
    try {
      lo::evaluate(expr);
    } catch (const gf::RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("[MAX 2 [BAD 3 ] ]").find("token 3") != std::string::npos);
  CHECK(message("[MAX 2 [BAD 3 ] ]").find("[BAD") != std::string::npos);
  CHECK(message("[MAX 2 9").find("never closed") != std::string::npos);
  CHECK(message("[MAX ]").find("token 2") != std::string::npos);
  CHECK(message("] 1").find("token 1") != std::string::npos);
  CHECK(message("1 2").find("token 2") != std::string::npos);
  CHECK(message("[MAX 1 2 ] 3").find("token 5") != std::string::npos);
  CHECK(message("").find("empty") != std::string::npos);
  CHECK(message("( )").find("empty") != std::string::npos);
  CHECK(message("[MAX 12 3 ]").find("token 2") != std::string::npos);  // one digit per token
  CHECK_THROWS_AS(lo::tokenize("[MIN 1 x ]"), gf::RuntimeError);
}

TEST_CASE("listops: serialization follows the LRA pair nesting") {
  CHECK(lo::serialize(lo::tokenize("[MAX 2 9 ]")) == "( ( ( [MAX 2 ) 9 ) ] )");
  CHECK(lo::serialize({lo::kDigit0 + 7}) == "7");
  // (((SM 1) CHILD) ]) with CHILD = (((MIN 2) 3) ])
  CHECK(lo::serialize(lo::tokenize("[SM 1 [MIN 2 3 ] ]")) ==
        "( ( ( [SM 1 ) ( ( ( [MIN 2 ) 3 ) ] ) ) ] )");
  CHECK(lo::serialize(lo::tokenize("[MED 4 5 6 ]")) == "( ( ( ( [MED 4 ) 5 ) 6 ) ] )");
  // tokens -> text -> tokens is the identity
  auto ids = lo::tokenize("[MED [SM 6 7 ] [MIN 8 [MAX 3 5 ] ] 9 1 ]");
  CHECK(lo::tokenize(lo::serialize(ids)) == ids);
  CHECK_THROWS_AS(lo::serialize({lo::kMax, lo::kDigit0}), gf::RuntimeError);  // unclosed
  CHECK_THROWS_AS(lo::serialize({lo::kMax, lo::kClose}), gf::RuntimeError);   // no arguments
  CHECK_THROWS_AS(lo::serialize({lo::kDigit0, lo::kDigit0}), gf::RuntimeError);
  CHECK_THROWS_AS(lo::serialize({}), gf::RuntimeError);
}

TEST_CASE("listops: tokenizer ids and vocabulary") {
  const auto& v = lo::vocabulary();
  REQUIRE(v.size() == lo::kVocabSize);
  CHECK(lo::kVocabSize == 16);
  CHECK(v[0] == "<pad>");
  CHECK(v[1] == "[MIN");
  CHECK(v[2] == "[MAX");
  CHECK(v[3] == "[MED");
  CHECK(v[4] == "[SM");
  CHECK(v[5] == "]");
  for (int d = 0; d < 10; ++d) CHECK(v[6 + d] == std::to_string(d));
  CHECK(lo::tokenize("( ( ( [MAX 2 ) 9 ) ] )") == std::vector<int32_t>{2, 8, 15, 5});
  CHECK(lo::tokenize("[MIN [MED 0 ] [SM 1 ] ]") == std::vector<int32_t>{1, 3, 6, 5, 4, 7, 5, 5});
}

TEST_CASE("listops: generator bounds, determinism and labels") {
  lo::GeneratorConfig cfg;
  cfg.count = 400;
  cfg.min_length = 20;
  cfg.max_length = 100;
  cfg.max_depth = 6;
  cfg.max_args = 5;
  gf::Rng r1(11, "listops"), r2(11, "listops"), r3(12, "listops");
  auto a = lo::generate(cfg, r1);
  auto b = lo::generate(cfg, r2);
  auto c = lo::generate(cfg, r3);
  REQUIRE(a.size() == cfg.count);
  REQUIRE(c.size() == cfg.count);
  size_t same = 0;
  std::set<std::string> texts;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(a[i].label == b[i].label);
    same += a[i].tokens == c[i].tokens;
    const auto& t = a[i].tokens;
    CHECK(t.size() > cfg.min_length);
    CHECK(t.size() < cfg.max_length);
    // length = leaves + 2 per operator node
    size_t leaves = 0, ops = 0;
    for (int32_t id : t) {
      leaves += id >= lo::kDigit0;
      ops += id >= lo::kMin && id <= lo::kSum;
    }
    CHECK(t.size() == leaves + 2 * ops);
    int depth, max_arity, min_arity;
    shape_of(t, depth, max_arity, min_arity);
    CHECK(depth <= cfg.max_depth);
    CHECK(max_arity <= cfg.max_args);
    CHECK(min_arity >= 2);
    std::string text = lo::serialize(t);
    texts.insert(text);
    CHECK(lo::evaluate(text) == a[i].label);
    size_t pos = 0;
    CHECK(oracle(t, pos) == a[i].label);
    CHECK(pos == t.size());
  }
  CHECK(texts.size() == cfg.count);  // distinct trees
  CHECK(same < 5);                   // another seed gives other trees
}

TEST_CASE("listops: generator draw statistics") {
  // Root is a leaf with probability 0.75; an operator's arity is uniform in 2..max_args.
  gf::Rng rng(5, "listops");
  lo::Generated g;
  const int n = 20000;
  int leaves = 0;
  std::vector<int> arity_counts(5, 0);
  for (int i = 0; i < n; ++i) {
    REQUIRE(lo::generate_tree(rng, 3, 4, 0, g));
    if (g.tokens.size() == 1) {
      ++leaves;
      continue;
    }
    int depth, max_arity, min_arity;
    // root arity: count arguments of the outermost operator
    int root = 0, open = 0;
    for (size_t k = 1; k + 1 < g.tokens.size(); ++k) {
      int32_t id = g.tokens[k];
      if (open == 0) ++root;
      if (id >= lo::kMin && id <= lo::kSum) ++open;
      if (id == lo::kClose) --open;
    }
    ++arity_counts.at(root);
    shape_of(g.tokens, depth, max_arity, min_arity);
    CHECK(depth <= 3);
  }
  CHECK(std::abs(leaves / double(n) - 0.75) < 0.02);
  int ops = n - leaves;
  for (int k = 2; k <= 4; ++k) CHECK(std::abs(arity_counts[k] / double(ops) - 1.0 / 3) < 0.04);
  // depth 1 forces a leaf
  REQUIRE(lo::generate_tree(rng, 1, 4, 0, g));
  CHECK(g.tokens.size() == 1);
}

TEST_CASE("listops: impossible generator settings fail") {
  lo::GeneratorConfig cfg;
  cfg.count = 20;  // only 10 trees (single digits) are shorter than 3 tokens
  cfg.min_length = 0;
  cfg.max_length = 3;
  cfg.max_consecutive_rejections = 20000;
  gf::Rng rng(1, "listops");
  CHECK_THROWS_AS(lo::generate(cfg, rng), gf::RuntimeError);
  cfg.count = 10;
  auto ten = lo::generate(cfg, rng);
  CHECK(ten.size() == 10);
  cfg.min_length = 5;
  cfg.max_length = 6;
  CHECK_THROWS_AS(lo::generate(cfg, rng), gf::RuntimeError);
}

TEST_CASE("listops: 20k trees of length <= 512 are quick") {
  lo::GeneratorConfig cfg;
  cfg.count = 20000;
  cfg.min_length = 128;
  cfg.max_length = 513;
  gf::Rng rng(1, "listops");
  auto t0 = std::chrono::steady_clock::now();
  auto trees = lo::generate(cfg, rng);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("generated 20000 trees with 128 < length <= 512 in " << s << " s");
  CHECK(trees.size() == 20000);
  CHECK(s < 10.0);
}

TEST_CASE("listops: TSV files and check_file") {
  TempDir dir;
  lo::GeneratorConfig cfg;
  cfg.count = 50;
  cfg.min_length = 10;
  cfg.max_length = 60;
  gf::Rng rng(3, "listops");
  auto trees = lo::generate(cfg, rng);
  std::vector<lo::Row> rows;
  for (const auto& t : trees) rows.push_back({lo::serialize(t.tokens), t.label, 0});

  for (const std::string name : {"ok.tsv", "ok.tsv.gz"}) {
    std::string path = dir.file(name);
    lo::write_tsv(path, rows);
    auto back = lo::read_tsv(path);
    REQUIRE(back.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      CHECK(back[i].expression == rows[i].expression);
      CHECK(back[i].label == rows[i].label);
      CHECK(back[i].line == i + 2);  // line 1 is the header
    }
    std::ostringstream out;
    CHECK(lo::check_file(path, out) == 0);
    CHECK(out.str() == "50 rows, 0 mismatches\n");
  }
  CHECK(read_all(dir.file("ok.tsv")).rfind("Source\tTarget\n", 0) == 0);

  // corrupt three labels: exactly those lines are reported
  std::vector<lo::Row> bad = rows;
  const size_t corrupt[] = {2, 17, 49};
  for (size_t i : corrupt) bad[i].label = (bad[i].label + 3) % 10;
  std::string path = dir.file("bad.tsv");
  lo::write_tsv(path, bad);
  std::ostringstream out;
  CHECK(lo::check_file(path, out) == 3);
  std::ostringstream want;
  for (size_t i : corrupt)
    want << path << ":" << i + 2 << ": expected " << rows[i].label << ", file says " << bad[i].label
         << "\n";
  want << "50 rows, 3 mismatches\n";
  CHECK(out.str() == want.str());

  // malformed files
  std::ostringstream sink;
  write_text(dir.file("label.tsv"), "Source\tTarget\n[MAX 1 2 ]\t1\n[MAX 1 2 ]\tx\n");
  try {
    lo::check_file(dir.file("label.tsv"), sink);
    FAIL("no error");
  } catch (const gf::ConfigError& e) {
    CHECK(std::string(e.what()).find("label.tsv:3:") != std::string::npos);
  }
  write_text(dir.file("expr.tsv"), "Source\tTarget\n[MAX 1 2 ]\t2\n[MAX 1 [FOO ]\t2\n");
  try {
    lo::check_file(dir.file("expr.tsv"), sink);
    FAIL("no error");
  } catch (const gf::ConfigError& e) {
    std::string m = e.what();
    CHECK(m.find("expr.tsv:3:") != std::string::npos);
    CHECK(m.find("token 3") != std::string::npos);
  }
  write_text(dir.file("cols.tsv"), "Source\tTarget\n[MAX 1 2 ]\n");
  CHECK_THROWS_AS(lo::read_tsv(dir.file("cols.tsv")), gf::ConfigError);
  CHECK_THROWS_AS(lo::read_tsv(dir.file("missing.tsv")), gf::ConfigError);
  // a truncated gzip stream is an error, not a short file
  std::string gz = read_all(dir.file("ok.tsv.gz"));
  write_text(dir.file("cut.tsv.gz"), gz.substr(0, gz.size() / 2));
  CHECK_THROWS_AS(lo::check_file(dir.file("cut.tsv.gz"), sink), gf::ConfigError);
}

TEST_CASE("listops: both column orders are read") {
  TempDir dir;
  write_text(dir.file("nyu.tsv"),
             "9\t( ( ( [MAX 2 ) 9 ) ] )\n4\t[SM [MED 1 2 3 4 ] [MAX 9 1 ] 3 ]\n\n");
  write_text(
      dir.file("lra.tsv"),
      "Source\tTarget\r\n( ( ( [MAX 2 ) 9 ) ] )\t9\r\n[SM [MED 1 2 3 4 ] [MAX 9 1 ] 3 ]\t4\r\n");
  for (const std::string name : {"nyu.tsv", "lra.tsv"}) {
    auto rows = lo::read_tsv(dir.file(name));
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].expression == "( ( ( [MAX 2 ) 9 ) ] )");
    CHECK(rows[0].label == 9);
    CHECK(rows[1].expression == "[SM [MED 1 2 3 4 ] [MAX 9 1 ] 3 ]");
    CHECK(rows[1].label == 4);
    std::ostringstream out;
    CHECK(lo::check_file(dir.file(name), out) == 0);
  }
  // without the header the first column must be the label
  write_text(dir.file("swapped.tsv"), "( ( ( [MAX 2 ) 9 ) ] )\t9\n");
  try {
    lo::read_tsv(dir.file("swapped.tsv"));
    FAIL("no error");
  } catch (const gf::ConfigError& e) {
    CHECK(std::string(e.what()).find("swapped.tsv:1:") != std::string::npos);
  }
}

TEST_CASE("listops: dataset plugin generates splits") {
  auto make = [](const std::string& yaml, uint64_t seed) {
    return gf_test::registry().create_dataset(gf::ConfigNode::load_string(yaml),
                                              gf::DatasetBuild{seed});
  };
  const std::string yaml =
      "plugin: listops\ntrain_size: 50\nval_size: 7\ntest_size: 9\nmin_length: 30\n"
      "max_length: 200\n";
  gf::DataSplits d = make(yaml, 42)->load();
  CHECK(d.train.size() == 50);
  CHECK(d.val.size() == 7);
  CHECK(d.test.size() == 9);
  CHECK(d.vocab_size == 16);
  CHECK(d.pad_id == 0);
  CHECK(d.num_classes == 10);
  REQUIRE(d.class_names.size() == 10);
  CHECK(d.class_names[3] == "3");
  CHECK(d.vocab == lo::vocabulary());
  size_t longest = 0;
  for (const auto* split : {&d.train, &d.val, &d.test}) {
    for (const auto& e : *split) {
      longest = std::max(longest, e.tokens.size());
      CHECK(e.tokens.size() > 30);
      CHECK(e.tokens.size() < 200);
      CHECK(lo::evaluate(lo::serialize(e.tokens)) == e.label);
      for (int32_t id : e.tokens) CHECK((id >= 1 && id < 16));
    }
  }
  CHECK(d.max_len == longest);

  // same seed: same data; another seed or seed_offset: other data; split = consecutive trees
  gf::DataSplits same = make(yaml, 42)->load();
  CHECK(same.test.back().tokens == d.test.back().tokens);
  gf::DataSplits other = make(yaml, 43)->load();
  CHECK(other.train[0].tokens != d.train[0].tokens);
  gf::DataSplits offset = make(yaml + "seed_offset: 1\n", 42)->load();
  CHECK(offset.train[0].tokens == other.train[0].tokens);
  lo::GeneratorConfig cfg;
  cfg.count = 66;
  cfg.min_length = 30;
  cfg.max_length = 200;
  gf::Rng rng(42, "listops");
  auto trees = lo::generate(cfg, rng);
  CHECK(trees[0].tokens == d.train[0].tokens);
  CHECK(trees[50].tokens == d.val[0].tokens);
  CHECK(trees[65].tokens == d.test[8].tokens);

  CHECK_THROWS_AS(make("plugin: listops\ntrain_sise: 5\n", 1), gf::ConfigError);
  CHECK_THROWS_AS(make("plugin: listops\ntrain_file: x.tsv\n", 1), gf::ConfigError);
  CHECK_THROWS_AS(make("plugin: listops\nmin_length: 100\nmax_length: 101\n", 1), gf::ConfigError);
}

TEST_CASE("listops: dataset plugin reads files") {
  TempDir dir;
  write_text(dir.file("train.tsv"),
             "Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n[SM [MED 1 2 3 4 ] [MAX 9 1 ] 3 ]\t4\n"
             "[MIN 3 4 ]\t3\n");
  write_text(dir.file("val.tsv"), "1\t[MIN 1 5 ]\n");
  write_text(dir.file("test.tsv"), "5\t[MAX 5 1 ]\n");
  const std::string files = "plugin: listops\nsource: files\ntrain_file: " + dir.file("train.tsv") +
                            "\nval_file: " + dir.file("val.tsv") +
                            "\ntest_file: " + dir.file("test.tsv") + "\n";
  auto make = [](const std::string& yaml) {
    return gf_test::registry().create_dataset(gf::ConfigNode::load_string(yaml),
                                              gf::DatasetBuild{1});
  };
  gf::DataSplits d = make(files)->load();
  REQUIRE(d.train.size() == 3);
  CHECK(d.train[0].tokens == std::vector<int32_t>{2, 8, 15, 5});
  CHECK(d.train[0].label == 9);
  CHECK(d.train[1].label == 4);
  CHECK(d.val.size() == 1);
  CHECK(d.test.size() == 1);
  CHECK(d.max_len == 13);  // [SM [MED 1 2 3 4 ] [MAX 9 1 ] 3 ]: 1 + 6 + 4 + 1 + 1

  // rows longer than max_length are dropped, or truncated on request; train_size caps rows
  gf::DataSplits dropped = make(files + "max_length: 4\n")->load();
  CHECK(dropped.train.size() == 2);
  CHECK(dropped.max_len == 4);
  gf::DataSplits cut = make(files + "max_length: 4\ntruncate: true\n")->load();
  REQUIRE(cut.train.size() == 3);
  CHECK(cut.train[1].tokens == std::vector<int32_t>{4, 3, 7, 8});
  CHECK(make(files + "train_size: 2\n")->load().train.size() == 2);
  // a size equal to the generator's default still caps the rows of a file
  {
    std::string many = "Source\tTarget\n";
    for (int i = 0; i < 2003; ++i)
      many +=
          "[MAX 1 " + std::to_string(i % 10) + " ]\t" + std::to_string(std::max(1, i % 10)) + "\n";
    write_text(dir.file("many.tsv"), many);
    const std::string big = "plugin: listops\nsource: files\ntrain_file: " + dir.file("train.tsv") +
                            "\nval_file: " + dir.file("many.tsv") +
                            "\ntest_file: " + dir.file("many.tsv") + "\n";
    gf::DataSplits capped = make(big + "test_size: 2000\n")->load();
    CHECK(capped.test.size() == 2000);
    CHECK(capped.val.size() == 2003);
  }
  // an option of the other mode at its default value passes (resolved configs spell it out)
  CHECK_NOTHROW(make(files + "max_depth: 10\n"));

  CHECK_THROWS_AS(make(files + "max_depth: 3\n"), gf::ConfigError);
  CHECK_THROWS_AS(
      make("plugin: listops\nsource: files\ntrain_file: " + dir.file("nope.tsv") +
           "\nval_file: " + dir.file("val.tsv") + "\ntest_file: " + dir.file("test.tsv") + "\n"),
      gf::ConfigError);
  write_text(dir.file("val.tsv"), "1\t[MIN 1 [X ]\n");
  try {
    make(files)->load();
    FAIL("no error");
  } catch (const gf::ConfigError& e) {
    CHECK(std::string(e.what()).find("val.tsv:1:") != std::string::npos);
  }
}

TEST_CASE("listops: labels of staged ListOps files") {
  fs::path dir = fs::path(GF_SHARED_DATA_DIR) / "listops";
  std::vector<std::string> files;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      std::string name = e.path().filename().string();
      auto ends = [&](const std::string& x) {
        return name.size() > x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
      };
      if (ends(".tsv") || ends(".tsv.gz")) files.push_back(e.path().string());
    }
  }
  if (files.empty()) {
    MESSAGE("no .tsv(.gz) under " << dir.string() << ": staged-file check skipped");
    return;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ostringstream out;
    size_t bad = lo::check_file(f, out);
    MESSAGE(f << ": " << out.str().substr(out.str().rfind('\n', out.str().size() - 2) + 1));
    CHECK(bad == 0);
  }
}
