// synthetic_variants dataset plugin: every generated sequence carries its
// clade's (inherited) defining states; rate 0 gives exactly reference + states;
// the background rate is what was asked for; same seed same data; bad clade
// files name their line.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/dataset.hpp"
#include "growformer/data/io.hpp"
#include "growformer/rng.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;

namespace {

using gf_test::TempDir;

gf::DataSplits load(const std::string& yaml, uint64_t seed = 1) {
  gf::ConfigNode node = gf::ConfigNode::load_string("plugin: synthetic_variants\n" + yaml);
  return gf_test::registry().create_dataset(node, gf::DatasetBuild{seed})->load();
}

using gf_test::error_of;

// k = 1 tokens back to bases (N for <amb>)
std::string bases(const gf::Example& e) {
  std::string s;
  for (int32_t t : e.tokens) s.push_back(t == 1 ? 'N' : "ACGT"[t - 2]);
  return s;
}

struct Fixture {
  TempDir dir;
  std::string ref_path, clades_path, ref;
  // X: 10 A, 20 C; Y inherits X, adds 30 G and overrides 10 -> T; Z: 40 T
  std::map<std::string, std::map<size_t, char>> states{
      {"X", {{10, 'A'}, {20, 'C'}}}, {"Y", {{10, 'T'}, {20, 'C'}, {30, 'G'}}}, {"Z", {{40, 'T'}}}};
  Fixture() {
    gf::Rng rng(5, 0);
    for (int i = 0; i < 200; ++i) ref.push_back("ACGT"[rng.below(4)]);
    ref[9] = 'G';  // position 10 differs from every clade state
    ref_path = dir.file("ref.fasta");
    std::string fa = ">ref\n";
    for (size_t i = 0; i < ref.size(); i += 60) fa += ref.substr(i, 60) + "\n";
    gf::write_file(ref_path, fa);
    clades_path = dir.file("clades.tsv");
    gf::write_file(clades_path,
                   "clade\tgene\tsite\talt\n\nX\tnuc\t10\tA\nX\tnuc\t20\tC\n\n"
                   "Y\tclade\tX\nY\tnuc\t30\tG\nY\tnuc\t10\tT\nY\tS\t614\tG\n\nZ\tnuc\t40\tT\n");
  }
  std::string cfg(const std::string& extra) const {
    return "reference: " + ref_path + "\nclades_tsv: " + clades_path + "\n" + extra;
  }
};

}  // namespace

TEST_CASE("synthetic_variants: rate 0 is exactly reference + the clade's inherited states") {
  Fixture fx;
  auto d = load(fx.cfg("per_clade: 10\nmutation_rate: 0\n"));
  CHECK(d.class_names == std::vector<std::string>{"X", "Y", "Z"});
  CHECK(d.train.size() == 24);
  CHECK(d.val.size() == 3);
  CHECK(d.test.size() == 3);
  for (const auto* s : {&d.train, &d.val, &d.test}) {
    for (const auto& e : *s) {
      std::string want = fx.ref;
      for (const auto& kv : fx.states.at(d.class_names[e.label])) want[kv.first - 1] = kv.second;
      CHECK(bases(e) == want);
    }
  }
}

TEST_CASE("synthetic_variants: defining states survive mutations and N runs; rate as asked") {
  Fixture fx;
  auto d = load(fx.cfg("per_clade: 200\nmutation_rate: 0.05\nn_runs: 2\nn_run_max: 30\n"));
  size_t mismatches = 0, sites = 0, ns = 0;
  for (const auto* s : {&d.train, &d.val, &d.test}) {
    for (const auto& e : *s) {
      std::string b = bases(e);
      REQUIRE(b.size() == fx.ref.size());
      const auto& st = fx.states.at(d.class_names[e.label]);
      for (const auto& kv : st) CHECK(b[kv.first - 1] == kv.second);
      for (size_t p = 0; p < b.size(); ++p) {
        if (st.count(p + 1)) continue;
        if (b[p] == 'N') {
          ++ns;
          continue;
        }
        ++sites;
        mismatches += b[p] != fx.ref[p];
      }
    }
  }
  // a site under an N run hides its mutation, so the visible rate is 0.05 exactly
  double rate = static_cast<double>(mismatches) / static_cast<double>(sites);
  MESSAGE("observed substitution rate " << rate << ", N bases " << ns);
  CHECK(rate == doctest::Approx(0.05).epsilon(0.08));
  CHECK(ns > 0);
}

TEST_CASE("synthetic_variants: deterministic by seed; region, k-mers, clade choice") {
  Fixture fx;
  std::string c = fx.cfg("per_clade: 20\nmutation_rate: 0.02\n");
  auto a = load(c, 3), b = load(c, 3), other = load(c, 4);
  auto key = [](const gf::DataSplits& d) {
    std::vector<std::vector<int32_t>> v;
    for (const auto& e : d.train) v.push_back(e.tokens);
    return v;
  };
  CHECK(key(a) == key(b));
  CHECK(key(a) != key(other));
  CHECK(key(load(c + "seed: 3\n", 99)) == key(a));

  auto r =
      load(fx.cfg("per_clade: 10\nmutation_rate: 0\nregion_start: 5\nregion_end: 34\n"
                  "clades: [X, Y]\nk: 3\nstride: 3\n"));
  CHECK(r.num_classes == 2);
  CHECK(r.max_len == 10);
  CHECK(r.vocab_size == 66);
  std::string y = fx.ref;
  for (const auto& kv : fx.states.at("Y")) y[kv.first - 1] = kv.second;
  for (const auto& e : r.train) {
    if (e.label != 1) continue;
    std::string s;
    for (int32_t t : e.tokens) s += r.vocab[t];
    CHECK(s == y.substr(4, 30));
  }
  // only Z's site 40 is outside 5..34: X and Z would be the reference there... but X has 10, 20
  std::string msg = error_of(
      [&] { load(fx.cfg("per_clade: 10\nregion_start: 50\nregion_end: 100\nclades: [X, Z]\n")); });
  CHECK(msg.find("identical defining states") != std::string::npos);
  msg = error_of([&] { load(fx.cfg("clades: [X, y]\n")); });
  CHECK(msg.find("did you mean `Y`") != std::string::npos);
  auto n2 = load(fx.cfg("per_clade: 10\nnum_clades: 2\n"));
  CHECK(n2.class_names == std::vector<std::string>{"X", "Y"});
}

TEST_CASE("synthetic_variants: bad clade files name the line") {
  Fixture fx;
  gf::write_file(fx.dir.file("bad_site.tsv"), "clade\tgene\tsite\talt\nX\tnuc\t999\tA\n");
  std::string msg = error_of([&] {
    load("reference: " + fx.ref_path + "\nclades_tsv: " + fx.dir.file("bad_site.tsv") + "\n");
  });
  CHECK(msg.find(fx.dir.file("bad_site.tsv") + ":2:") == 0);
  gf::write_file(fx.dir.file("bad_alt.tsv"),
                 "clade\tgene\tsite\talt\nX\tnuc\t9\tQ\nY\tnuc\t9\tA\n");
  msg = error_of([&] {
    load("reference: " + fx.ref_path + "\nclades_tsv: " + fx.dir.file("bad_alt.tsv") + "\n");
  });
  CHECK(msg.find(":2:") != std::string::npos);
  gf::write_file(fx.dir.file("loop.tsv"),
                 "clade\tgene\tsite\talt\nX\tclade\tY\nX\tnuc\t9\tA\nY\tclade\tX\n");
  msg = error_of([&] {
    load("reference: " + fx.ref_path + "\nclades_tsv: " + fx.dir.file("loop.tsv") + "\n");
  });
  CHECK(msg.find("inherits from itself") != std::string::npos);
  gf::write_file(fx.dir.file("cols.tsv"), "clade\tgene\tposition\talt\n");
  msg = error_of([&] {
    load("reference: " + fx.ref_path + "\nclades_tsv: " + fx.dir.file("cols.tsv") + "\n");
  });
  CHECK(msg.find("no column `site`") != std::string::npos);
}

TEST_CASE("synthetic_variants: real reference and Nextstrain clades") {
  std::string dir = std::string(GF_SHARED_DATA_DIR) + "/sars-cov-2";
  if (!gf::file_exists(dir + "/nextstrain_clades.tsv")) {
    MESSAGE("no " << dir << ": real clade check skipped");
    return;
  }
  auto d = load("reference: " + dir + "/MN908947.fasta\nclades_tsv: " + dir +
                "/nextstrain_clades.tsv\nclades: [20A, 20B, 20I, 21A]\nper_clade: 10\n"
                "mutation_rate: 0.001\n");
  CHECK(d.max_len == 29903);
  // 20I (Alpha) inherits 20B -> 20A -> 19A: 20A's 23403G (D614G) and 20B's 28881A
  for (const auto& e : d.train) {
    std::string b = bases(e);
    CHECK(b[23403 - 1] == 'G');
    if (d.class_names[e.label] == "20I" || d.class_names[e.label] == "20B") {
      CHECK(b[28881 - 1] == 'A');
    }
  }
}
