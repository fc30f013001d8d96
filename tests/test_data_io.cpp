// Data file helpers (plain/gzip lines, truncated streams, TSV columns, FASTA,
// GFF, k-mers) and the data statistics, against hand-computed expectations.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/data/data_stats.hpp"
#include "growformer/data/io.hpp"
#include "growformer/data/sequences.hpp"
#include "growformer/data/split.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;

namespace {

using gf_test::TempDir;

std::string read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_raw(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::vector<std::string> all_lines(const std::string& path) {
  gf::LineReader in(path);
  std::vector<std::string> out;
  std::string line;
  while (in.next(line)) out.push_back(line);
  return out;
}

using gf_test::error_of;

}  // namespace

TEST_CASE("io: plain and gzip files give the same lines; CRLF and a missing final newline") {
  TempDir dir;
  std::string text = "a\tb\r\n\nthird line\nlast";
  gf::write_file(dir.file("x.tsv"), text);
  gf::write_file(dir.file("x.tsv.gz"), text, true);
  std::vector<std::string> want{"a\tb", "", "third line", "last"};
  CHECK(all_lines(dir.file("x.tsv")) == want);
  CHECK(all_lines(dir.file("x.tsv.gz")) == want);
  CHECK(read_raw(dir.file("x.tsv.gz")).substr(0, 2) == "\x1f\x8b");  // really compressed

  gf::LineReader in(dir.file("x.tsv.gz"));
  std::string line;
  in.next(line);
  in.next(line);
  in.next(line);
  CHECK(in.line_number() == 3);

  // lines longer than the internal buffer come back whole
  std::string big(700000, 'x');
  gf::write_file(dir.file("big.gz"), "h\n" + big + "\nt\n", true);
  auto lines = all_lines(dir.file("big.gz"));
  REQUIRE(lines.size() == 3);
  CHECK(lines[1] == big);
  CHECK(gf::read_file_bytes(dir.file("x.tsv.gz")).size() == text.size());
}

TEST_CASE("io: a truncated or corrupt gzip stream is an error naming the file") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "row " + std::to_string(i * 7919 % 10007) + "\n";
  gf::write_file(dir.file("full.gz"), text, true);
  std::string gz = read_raw(dir.file("full.gz"));
  write_raw(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
  std::string msg = error_of([&] { all_lines(dir.file("cut.gz")); });
  CHECK(msg.find(dir.file("cut.gz")) != std::string::npos);
  CHECK(msg.find("truncated") != std::string::npos);
  CHECK_THROWS_AS(gf::read_file_bytes(dir.file("cut.gz")), gf::ConfigError);

  // only the 8-byte trailer missing: all data is there but the stream never ends
  write_raw(dir.file("notrailer.gz"), gz.substr(0, gz.size() - 8));
  CHECK_THROWS_AS(all_lines(dir.file("notrailer.gz")), gf::ConfigError);

  // a flipped CRC byte
  std::string bad = gz;
  bad[bad.size() - 6] = static_cast<char>(bad[bad.size() - 6] ^ 0x55);
  write_raw(dir.file("crc.gz"), bad);
  CHECK_THROWS_AS(gf::read_file_bytes(dir.file("crc.gz")), gf::ConfigError);
}

TEST_CASE("io: a missing file names its path") {
  std::string msg = error_of([] { gf::LineReader in("/nonexistent/dir/data.tsv.gz"); });
  CHECK(msg.find("/nonexistent/dir/data.tsv.gz") != std::string::npos);
  CHECK(msg.find("No such file") != std::string::npos);
  CHECK_THROWS_AS(gf::read_file_bytes("/nonexistent/x.idx"), gf::ConfigError);
  CHECK_FALSE(gf::file_exists("/nonexistent/x.idx"));
}

TEST_CASE("io: TSV header lookup suggests the closest column") {
  gf::TsvHeader h(gf::split_fields("label\trating\tid\ttext"), "reviews.tsv");
  CHECK(h.index("text") == 3);
  CHECK(h.index("label") == 0);
  std::string msg = error_of([&] { h.index("lable", "label_column"); });
  CHECK(msg.find("reviews.tsv:1:") == 0);
  CHECK(msg.find("did you mean `label`") != std::string::npos);
  CHECK(msg.find("label_column") != std::string::npos);
  CHECK(gf::split_fields("a\t\tb\t") == std::vector<std::string>{"a", "", "b", ""});
}

TEST_CASE("io: FASTA records, and records without sequence") {
  TempDir dir;
  gf::write_file(dir.file("a.fa.gz"), ">one desc\nACGT\nac\n\n>two\nNNA\n", true);
  auto r = gf::read_fasta(dir.file("a.fa.gz"));
  REQUIRE(r.size() == 2);
  CHECK(r[0].id == "one");
  CHECK(r[0].seq == "ACGTAC");
  CHECK(r[1].id == "two");
  CHECK(r[1].line == 5);
  CHECK(r[1].seq == "NNA");

  gf::write_file(dir.file("empty_rec.fa"), ">one\nACGT\n>two\n>three\nAC\n");
  std::string msg = error_of([&] { gf::read_fasta(dir.file("empty_rec.fa")); });
  CHECK(msg.find(dir.file("empty_rec.fa") + ":3:") == 0);
  CHECK(msg.find("`two`") != std::string::npos);
  gf::write_file(dir.file("last_empty.fa"), ">one\nACGT\n>two\n");
  CHECK(error_of([&] { gf::read_fasta(dir.file("last_empty.fa")); }).find(":3:") !=
        std::string::npos);
  gf::write_file(dir.file("nohdr.fa"), "ACGT\n>one\nA\n");
  CHECK(error_of([&] { gf::read_fasta(dir.file("nohdr.fa")); }).find(":1:") != std::string::npos);
}

TEST_CASE("io: GFF gene lookup") {
  TempDir dir;
  gf::write_file(dir.file("a.gff"),
                 "# comment\n.\t.\tgene\t10\t20\t.\t+\t.\t gene_name=S\n"
                 ".\t.\tgene\t30\t45\t.\t+\t.\tID=x;gene_name=ORF1a\n");
  CHECK(gf::gff_gene_region(dir.file("a.gff"), "S") == std::make_pair<size_t, size_t>(10, 20));
  CHECK(gf::gff_gene_region(dir.file("a.gff"), "ORF1a") == std::make_pair<size_t, size_t>(30, 45));
  std::string msg = error_of([&] { gf::gff_gene_region(dir.file("a.gff"), "ORF1A"); });
  CHECK(msg.find("did you mean `ORF1a`") != std::string::npos);
}

TEST_CASE("io: k-mer ids by hand, ambiguous modes, unknown bases") {
  // A=0 C=1 G=2 T=3; id = 2 + code
  gf::KmerTokenizer k2(2, 1, gf::Ambiguous::Token);
  CHECK(k2.vocab_size() == 18);
  auto t = k2.tokenize("ACGT", 0, 4, 0, "w");
  CHECK(t == std::vector<int32_t>{2 + 1, 2 + 6, 2 + 11});  // AC, CG, GT
  auto v = k2.vocab();
  CHECK(v[t[0]] == "AC");
  CHECK(v[t[1]] == "CG");
  CHECK(v[t[2]] == "GT");
  CHECK(k2.tokenize("ACGT", 0, 4, 2, "w").size() == 2);  // max_tokens
  gf::KmerTokenizer k2s(2, 2, gf::Ambiguous::Token);
  CHECK(k2s.tokenize("ACGTA", 0, 5, 0, "w") == std::vector<int32_t>{3, 13});
  CHECK(k2s.tokenize("ACGTA", 1, 5, 0, "w") == std::vector<int32_t>{2 + 6, 2 + 12});  // CG, TA
  CHECK(gf::KmerTokenizer(1, 1, gf::Ambiguous::Token).tokenize("aug", 0, 3, 0, "w") ==
        std::vector<int32_t>{2, 5, 4});  // lower case, U as T

  gf::KmerTokenizer tok(1, 1, gf::Ambiguous::Token), skip(1, 1, gf::Ambiguous::Skip),
      err(1, 1, gf::Ambiguous::Error), res(1, 1, gf::Ambiguous::Resolve);
  CHECK(tok.tokenize("ANG", 0, 3, 0, "w") == std::vector<int32_t>{2, 1, 4});
  CHECK(skip.tokenize("ANG", 0, 3, 0, "w") == std::vector<int32_t>{2, 4});
  std::string msg = error_of([&] { err.tokenize("ANG", 0, 3, 0, "f.fa record `x`"); });
  CHECK(msg.find("f.fa record `x`") == 0);
  CHECK(msg.find("position 2") != std::string::npos);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto r = res.tokenize("RY", 0, 2, 0, "w", seed);
    CHECK((r[0] == 2 || r[0] == 4));  // R = A|G
    CHECK((r[1] == 3 || r[1] == 5));  // Y = C|T
  }
  msg = error_of([&] { tok.tokenize("ACXG", 0, 4, 0, "rec"); });
  CHECK(msg.find("unknown base 'X'") != std::string::npos);
  CHECK(msg.find("position 3") != std::string::npos);
}

TEST_CASE("split: a genome dataset's tokenizer, empty splits and held-out counts") {
  gf::GenomeSettings g;
  g.k = 2;
  g.stride = 2;
  g.ambiguous = gf::Ambiguous::Skip;
  const gf::KmerTokenizer tok = gf::genome_tokenizer(g);
  CHECK(tok.tokenize("ACNGTA", 0, 6, 0, "w") ==
        gf::KmerTokenizer(2, 2, gf::Ambiguous::Skip).tokenize("ACNGTA", 0, 6, 0, "w"));
  gf::DataSplits d = gf::genome_splits(tok, {"alpha", "beta", "gamma"});
  CHECK(d.pad_id == 0);
  CHECK(d.vocab_size == 18);
  CHECK(d.vocab == tok.vocab());
  CHECK(d.num_classes == 3);
  CHECK(d.class_names == std::vector<std::string>{"alpha", "beta", "gamma"});
  CHECK((d.train.empty() && d.val.empty() && d.test.empty()));

  g.test_ratio = 0.2;
  g.val_ratio = 0.3;
  const gf::HeldOut h = gf::held_out(10, g);
  CHECK(h.test == 2);
  CHECK(h.val == 3);
  for (size_t i = 0; i < 10; ++i) {
    gf::Example e;
    e.label = static_cast<int32_t>(i);
    h.split_of(d, i).push_back(e);
  }
  // the first `test` examples, then `val`, then the rest, each in order
  auto labels = [](const std::vector<gf::Example>& v) {
    std::vector<int32_t> out;
    for (const auto& e : v) out.push_back(e.label);
    return out;
  };
  CHECK(labels(d.test) == std::vector<int32_t>{0, 1});
  CHECK(labels(d.val) == std::vector<int32_t>{2, 3, 4});
  CHECK(labels(d.train) == std::vector<int32_t>{5, 6, 7, 8, 9});
  CHECK(gf::held_out(3, g).test == 1);  // 0.6, rounded to nearest
  CHECK(gf::held_out(4, g).val == 1);   // 1.2
}

TEST_CASE("data stats: nearest-rank percentiles, class counts, truncation, JSON") {
  gf::DataSplits d;
  d.num_classes = 2;
  d.vocab_size = 10;
  d.class_names = {"neg", "pos"};
  for (int len = 1; len <= 10; ++len) {
    gf::Example e;
    e.tokens.assign(static_cast<size_t>(len), 3);
    e.label = len % 3 == 0 ? 1 : 0;
    d.train.push_back(e);
  }
  d.val.push_back(d.train[0]);
  d.max_len = 10;
  gf::DataStats s = gf::compute_stats(d, 7);
  const auto& tr = s.splits[0];
  CHECK(tr.size == 10);
  CHECK(tr.len_min == 1);
  CHECK(tr.len_p50 == 5);
  CHECK(tr.len_p90 == 9);
  CHECK(tr.len_p95 == 10);
  CHECK(tr.len_max == 10);
  CHECK(tr.len_mean == doctest::Approx(5.5));
  CHECK(tr.truncated == 3);  // 8, 9, 10
  CHECK(tr.class_counts == std::vector<size_t>{7, 3});
  CHECK(s.splits[2].size == 0);
  std::string table = gf::format_stats_table(s);
  CHECK(table.find("pos") != std::string::npos);
  CHECK(table.find("train") != std::string::npos);
  auto j = nlohmann::json::parse(gf::stats_json(s));
  CHECK(j["splits"]["train"]["len_p90"] == 9);
  CHECK(j["splits"]["train"]["truncated"] == 3);
  CHECK(j["class_names"][1] == "pos");
  CHECK(j["vocab_size"] == 10);
  // totals: 10 train + 1 val + 0 test; the val example (length 1) is class 0
  CHECK(j["total_examples"] == 11);
  CHECK(j["train_val_examples"] == 11);
  CHECK(j["class_totals"] == nlohmann::json::array({8, 3}));
  CHECK(table.find("total" + std::string(8, ' ') + "11  (train+val 11)") != std::string::npos);
  CHECK(table.find("total" + std::string(7, ' ') + "10" + std::string(8, ' ') + "1" +
                   std::string(8, ' ') + "0" + std::string(7, ' ') + "11") != std::string::npos);
}

TEST_CASE("configs/data: every example config's data section loads (real data)") {
  std::string dir = std::string(GF_SOURCE_DIR) + "/configs/data";
  if (!fs::exists(std::string(GF_SHARED_DATA_DIR) + "/sst2")) {
    MESSAGE("no " << GF_SHARED_DATA_DIR << ": example data configs skipped");
    return;
  }
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    std::string name = entry.path().filename().string();
    if (name == "fashion_mnist.yaml" &&
        !gf::file_exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
      continue;
    }
    INFO(name);
    gf::ConfigNode root = gf::ConfigNode::load_file(entry.path().string());
    auto t0 = std::chrono::steady_clock::now();
    auto ds = gf_test::registry().create_dataset(
        root.child("data"), gf::DatasetBuild{uint64_t(root.child("seed").as_int())});
    gf::DataSplits d = ds->load();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t model_len = static_cast<size_t>(root.child("model").child("max_len").as_int());
    gf::DataStats st = gf::compute_stats(d, model_len);
    MESSAGE(name << " loaded in " << s << " s\n" << gf::format_stats_table(st));
    CHECK(d.train.size() > 0);
    CHECK(d.val.size() > 0);
    CHECK(d.test.size() > 0);
    CHECK(d.num_classes >= 2);
    CHECK(d.max_len <= model_len);  // the example configs truncate in the data already
    size_t bad = 0;                 // the pad id or out of the vocabulary
    for (const auto* split : {&d.train, &d.val, &d.test}) {
      for (const auto& e : *split) {
        for (int32_t t : e.tokens) bad += t <= 0 || static_cast<size_t>(t) >= d.vocab_size;
      }
    }
    CHECK(bad == 0);
    ++n;
  }
  CHECK(n >= 4);
}
