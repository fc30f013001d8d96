// fasta_variants dataset plugin: k-mer tokens and regions by hand, class
// filters, stratified split, each corrupt input, and the real SARS-CoV-2 set.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/data/data_stats.hpp"
#include "growformer/dataset.hpp"
#include "growformer/data/io.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;

namespace {

using gf_test::TempDir;

std::shared_ptr<gf::Dataset> make(const std::string& yaml, uint64_t seed = 1) {
  gf::ConfigNode node = gf::ConfigNode::load_string("plugin: fasta_variants\n" + yaml);
  return gf_test::registry().create_dataset(node, gf::DatasetBuild{seed});
}
gf::DataSplits load(const std::string& yaml, uint64_t seed = 1) { return make(yaml, seed)->load(); }

using gf_test::error_of;

// id -> k-mer text of every token of an example
std::string text_of(const gf::DataSplits& d, const gf::Example& e) {
  std::string s;
  for (int32_t t : e.tokens) s += d.vocab.at(static_cast<size_t>(t)) + " ";
  return s;
}

// 12 genomes: 5 of class A, 4 of B, 2 of C, 1 of D (labels in column `lineage`)
struct Fixture {
  TempDir dir;
  std::string fasta, meta;
  Fixture() {
    fasta = dir.file("g.fasta.gz");
    meta = dir.file("meta.tsv");
    std::string fa, md = "name\tlineage\tother\n";
    const char* labels = "AAAAABBBBCCD";
    for (int i = 0; i < 12; ++i) {
      std::string id = "g" + std::to_string(i);
      fa += ">" + id + " some description\nACGTAC\nGTTT" + std::string(1, "ACGT"[i % 4]) + "\n";
      md += id + "\t" + labels[i] + "\tx\n";
    }
    md += "not_in_fasta\tA\tx\n";
    gf::write_file(fasta, fa, true);
    gf::write_file(meta, md);
  }
  std::string cfg(const std::string& extra = "") const {
    return "fasta: " + fasta + "\nmetadata: " + meta +
           "\nid_column: name\nlabel_column: lineage\nval_ratio: 0.25\ntest_ratio: 0.25\n" + extra;
  }
};

size_t total(const gf::DataSplits& d) { return d.train.size() + d.val.size() + d.test.size(); }

}  // namespace

TEST_CASE("fasta_variants: k-mers and a region by hand") {
  Fixture fx;
  auto d = load(fx.cfg("k: 3\nstride: 3\n"));
  CHECK(d.vocab_size == 2 + 64);
  CHECK(total(d) == 12);
  CHECK(d.class_names == std::vector<std::string>{"A", "B", "C", "D"});
  for (const auto* s : {&d.train, &d.val, &d.test}) {
    for (const auto& e : *s) {
      // ACGTACGTTT? -> ACG TAC GTT (the tail T? is shorter than k)
      CHECK(text_of(d, e) == "ACG TAC GTT ");
    }
  }
  auto r = load(fx.cfg("region_start: 8\nregion_end: 11\n"));  // k = 1: T T T ?
  for (const auto& e : r.train) {
    REQUIRE(e.tokens.size() == 4);
    CHECK(text_of(r, e).substr(0, 6) == "T T T ");
  }
  TempDir g;
  gf::write_file(g.file("a.gff"), ".\t.\tgene\t2\t5\t.\t+\t.\tgene_name=X\n");
  auto x = load(fx.cfg("gene: X\ngff: " + g.file("a.gff") + "\nk: 2\n"));
  CHECK(text_of(x, x.train[0]) == "CG GT TA ");
  auto m = load(fx.cfg("max_len: 2\n"));
  CHECK(m.max_len == 2);
}

TEST_CASE("fasta_variants: class filters and the stratified split") {
  Fixture fx;
  auto d = make(fx.cfg());
  auto s = d->load();
  CHECK(s.num_classes == 4);
  // per class: round(n / 4) to test and to val, at least one kept for training
  auto st = gf::compute_stats(s, 0);
  INFO(gf::format_stats_table(st));
  CHECK(st.splits[0].class_counts == std::vector<size_t>{3, 2, 1, 1});  // A 5: 1/1, B 4: 1/1
  // C 2: one to test, one kept for training; D 1: training only. (Element-wise on purpose:
  // GCC 12.2 with -march=native on AVX-512 miscompiles the constant {1, 1, 0, 0} here.)
  const auto& val = st.splits[1].class_counts;
  const auto& test = st.splits[2].class_counts;
  REQUIRE(val.size() == 4);
  REQUIRE(test.size() == 4);
  CHECK(val[0] == 1);
  CHECK(val[1] == 1);
  CHECK(val[2] == 0);
  CHECK(val[3] == 0);
  CHECK(test[0] == 1);
  CHECK(test[1] == 1);
  CHECK(test[2] == 1);
  CHECK(test[3] == 0);
  CHECK(d->describe().find("1 metadata ids absent") != std::string::npos);

  auto g = load(fx.cfg("min_count: 3\n"));
  CHECK(g.class_names == std::vector<std::string>{"A", "B", "other"});
  CHECK(total(g) == 12);
  auto dr = load(fx.cfg("min_count: 3\nother: drop\n"));
  CHECK(dr.class_names == std::vector<std::string>{"A", "B"});
  CHECK(total(dr) == 9);
  auto in = load(fx.cfg("include: [B, C]\nother_name: rest\n"));
  CHECK(in.class_names == std::vector<std::string>{"B", "C", "rest"});
  std::string msg = error_of([&] { load(fx.cfg("include: [B, c]\n")); });
  CHECK(msg.find("did you mean `C`") != std::string::npos);

  // same seed same split, another seed another split
  auto key = [](const gf::DataSplits& d) {
    std::vector<int32_t> v;
    for (const auto& e : d.test) v.push_back(e.tokens.back());
    return v;
  };
  CHECK(key(load(fx.cfg(), 3)) == key(load(fx.cfg(), 3)));
  bool differs = false;
  for (uint64_t sd = 4; sd < 12 && !differs; ++sd) differs = key(load(fx.cfg(), sd)) != key(s);
  CHECK(differs);
}

TEST_CASE("fasta_variants: bad input names the file and record") {
  Fixture fx;
  std::string msg = error_of([&] { load(fx.cfg("missing: error\n")); });
  CHECK(msg.find(fx.meta + ":14:") == 0);
  CHECK(msg.find("not_in_fasta") != std::string::npos);

  msg = error_of([&] {
    load("fasta: " + fx.fasta + "\nmetadata: " + fx.meta +
         "\nid_column: name\nlabel_column: linage\n");
  });
  CHECK(msg.find(fx.meta + ":1:") == 0);
  CHECK(msg.find("did you mean `lineage`") != std::string::npos);

  TempDir dir;
  gf::write_file(dir.file("empty.fa"), ">g0\nACGT\n>g1\n>g2\nAC\n");
  msg = error_of([&] {
    load("fasta: " + dir.file("empty.fa") + "\nmetadata: " + fx.meta + "\nid_column: name\n");
  });
  CHECK(msg.find(dir.file("empty.fa") + ":3:") == 0);
  CHECK(msg.find("no sequence") != std::string::npos);

  gf::write_file(dir.file("x.fa"), ">g0\nACGT\n>g1\nACJT\n>g2\nACNT\n");
  gf::write_file(dir.file("m.tsv"), "strain\twho_variant\ng0\ta\ng1\tb\ng2\tb\n");
  msg = error_of([&] {
    load("fasta: " + dir.file("x.fa") + "\nmetadata: " + dir.file("m.tsv") +
         "\nval_ratio: 0\ntest_ratio: 0\n");
  });
  CHECK(msg.find(dir.file("x.fa") + ":3: record `g1`") == 0);
  CHECK(msg.find("unknown base 'J'") != std::string::npos);
  CHECK(msg.find("position 3") != std::string::npos);

  gf::write_file(dir.file("n.fa"), ">g0\nACGT\n>g1\nACNT\n>g2\nACGT\n");
  std::string base = "fasta: " + dir.file("n.fa") + "\nmetadata: " + dir.file("m.tsv") + "\n";
  msg = error_of([&] { load(base + "ambiguous: error\n"); });
  CHECK(msg.find("record `g1`") != std::string::npos);
  CHECK(msg.find("ambiguous base 'N'") != std::string::npos);
  msg = error_of([&] { load(base); });  // 3 genomes cannot fill three splits
  CHECK(msg.find("is empty") != std::string::npos);

  std::string full = std::string(fx.fasta);
  gf::write_file(
      dir.file("cut.fa.gz"),
      [] {
        std::string s;
        for (int i = 0; i < 3000; ++i) s += ">r" + std::to_string(i) + "\nACGTTGCAAC\n";
        return s;
      }(),
      true);
  auto size = fs::file_size(dir.file("cut.fa.gz"));
  fs::resize_file(dir.file("cut.fa.gz"), size / 2);
  msg =
      error_of([&] { load("fasta: " + dir.file("cut.fa.gz") + "\nmetadata: " + fx.meta + "\n"); });
  CHECK(msg.find(dir.file("cut.fa.gz")) == 0);
  CHECK(msg.find("truncated") != std::string::npos);
  msg = error_of([&] { load("fasta: " + dir.file("nope.fa") + "\nmetadata: " + fx.meta + "\n"); });
  CHECK(msg.find(dir.file("nope.fa")) == 0);
}

TEST_CASE("fasta_variants: real SARS-CoV-2 genomes") {
  std::string dir = std::string(GF_SHARED_DATA_DIR) + "/sars-cov-2";
  if (!gf::file_exists(dir + "/sequences_2021.fasta.gz")) {
    MESSAGE("no " << dir << ": SARS-CoV-2 check skipped");
    return;
  }
  std::string base =
      "fasta: " + dir + "/sequences_2021.fasta.gz\nmetadata: " + dir + "/metadata_2021.tsv\n";
  auto t0 = std::chrono::steady_clock::now();
  auto d = load(base + "k: 6\nstride: 1\n");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = gf::compute_stats(d, 0);
  MESSAGE("SARS-CoV-2 whole genomes as overlapping 6-mers: "
          << total(d) << " genomes, "
          << st.splits[0].tokens + st.splits[1].tokens + st.splits[2].tokens << " tokens in " << s
          << " s");
  CHECK(total(d) == 1952);
  CHECK(d.num_classes == 11);
  std::vector<std::string> names{"Alpha", "Beta",  "Delta",  "Epsilon", "Eta", "Gamma",
                                 "Iota",  "Kappa", "Lambda", "Theta",   "none"};
  CHECK(d.class_names == names);
  std::vector<size_t> want{225, 94, 83, 39, 33, 95, 25, 14, 17, 5, 1322};
  for (size_t c = 0; c < want.size(); ++c) {
    CHECK(st.splits[0].class_counts[c] + st.splits[1].class_counts[c] +
              st.splits[2].class_counts[c] ==
          want[c]);
  }
  CHECK(st.splits[0].len_max == 29903 - 5);
  CHECK(s < 30.0);

  auto sg = load(base + "label_column: clade\ngene: S\ngff: " + dir +
                 "/annotation.gff\nk: 3\nstride: 3\nmin_count: 20\n");
  CHECK(sg.class_names.back() == "other");
  CHECK(sg.max_len == (25384 - 21563 + 1) / 3);
}
