// text_tsv dataset plugin: tokens by hand on small fixtures, vocabulary from the
// training split only, ratio splits by seed, each corrupt input, and the real
// SST-2 and IMDB files (skipped when absent).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
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

gf::DataSplits load(const std::string& yaml, uint64_t seed = 1) {
  gf::ConfigNode node = gf::ConfigNode::load_string("plugin: text_tsv\n" + yaml);
  auto ds = gf_test::registry().create_dataset(node, gf::DatasetBuild{seed});
  return ds->load();
}

using gf_test::error_of;

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(2 + c);
  return v;
}

const char* kTrain =
    "sentence\tlabel\n"
    "the cat sat\t1\n"
    "The dog ran\t0\n"
    "a cat ran\t1\n"
    "the end\t0\n";
const char* kTest =
    "sentence\tlabel\n"
    "the zebra ran\t1\n"
    "cat\t0\n";

}  // namespace

TEST_CASE("text_tsv: char tokens are bytes + 2, truncated at max_len") {
  TempDir dir;
  gf::write_file(dir.file("train.tsv"), kTrain);
  gf::write_file(dir.file("test.tsv.gz"), kTest, true);
  auto d = load("train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") + "\ntest: " +
                dir.file("test.tsv.gz") + "\ntokenizer: char\nmax_len: 9\nlowercase: false\n");
  CHECK(d.vocab_size == 258);
  CHECK(d.pad_id == 0);
  REQUIRE(d.train.size() == 4);
  CHECK(d.train[0].tokens == bytes_of("the cat s"));  // 11 bytes cut to 9
  CHECK(d.train[1].tokens == bytes_of("The dog r"));
  CHECK(d.train[3].tokens == bytes_of("the end"));
  CHECK(d.test[1].tokens == bytes_of("cat"));
  CHECK(d.max_len == 9);
  CHECK(d.num_classes == 2);
  CHECK(d.class_names == std::vector<std::string>{"0", "1"});
  CHECK(d.train[0].label == 1);
  CHECK(d.train[1].label == 0);
  CHECK(d.test[0].label == 1);
  CHECK(d.vocab['a' + 2] == "a");
  // class_names renames the classes in label order; a wrong count is an error
  std::string files = "train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") +
                      "\ntest: " + dir.file("test.tsv.gz") + "\n";
  auto named = load(files + "class_names: [negative, positive]\n");
  CHECK(named.class_names == std::vector<std::string>{"negative", "positive"});
  CHECK(named.train[0].label == 1);
  std::string msg = error_of([&] { load(files + "class_names: [a, b, c]\n"); });
  CHECK(msg.find("class_names lists 3 names") != std::string::npos);
  CHECK(msg.find("2 classes (0, 1)") != std::string::npos);
  // UTF-8 is bytes: one e-acute is two tokens
  gf::write_file(dir.file("utf8.tsv"), "sentence\tlabel\ncaf\xc3\xa9\t1\nx\t0\n");
  auto u = load("train: " + dir.file("utf8.tsv") + "\nval: " + dir.file("utf8.tsv") +
                "\ntest: " + dir.file("utf8.tsv") + "\ntokenizer: char\n");
  CHECK(u.train[0].tokens == std::vector<int32_t>{2 + 'c', 2 + 'a', 2 + 'f', 2 + 0xc3, 2 + 0xa9});
}

TEST_CASE("text_tsv: word vocabulary from the training split only") {
  TempDir dir;
  gf::write_file(dir.file("train.tsv"), kTrain);
  gf::write_file(dir.file("test.tsv"), kTest);
  auto d = load("train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") +
                "\ntest: " + dir.file("test.tsv") + "\n");
  // train words (lower-cased): the x3, cat x2, ran x2, sat, dog, a, end
  // order: frequency desc, then text: the, cat, ran, a, dog, end, sat
  std::vector<std::string> want{"<pad>", "<unk>", "the", "cat", "ran", "a", "dog", "end", "sat"};
  CHECK(d.vocab == want);
  CHECK(d.vocab_size == want.size());
  CHECK(d.train[0].tokens == std::vector<int32_t>{2, 3, 8});  // the cat sat
  CHECK(d.train[1].tokens == std::vector<int32_t>{2, 6, 4});  // The dog ran
  CHECK(d.test[0].tokens == std::vector<int32_t>{2, 1, 4});   // zebra is unknown
  for (const auto& e : d.test) {
    for (int32_t t : e.tokens) CHECK(t != d.pad_id);
  }

  auto m = load("train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") +
                "\ntest: " + dir.file("test.tsv") + "\nmin_freq: 2\n");
  CHECK(m.vocab == std::vector<std::string>{"<pad>", "<unk>", "the", "cat", "ran"});
  CHECK(m.train[0].tokens == std::vector<int32_t>{2, 3, 1});
  auto c = load("train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") +
                "\ntest: " + dir.file("test.tsv") + "\nmax_vocab: 4\nmax_len: 2\n");
  CHECK(c.vocab == std::vector<std::string>{"<pad>", "<unk>", "the", "cat"});
  CHECK(c.train[1].tokens == std::vector<int32_t>{2, 1});  // "the dog", truncated at 2
  CHECK(c.max_len == 2);

  gf::write_file(dir.file("html.tsv"), "text\ty\nGreat!<br /><br />Loved it.\tpos\nbad\tneg\n");
  auto h = load("train: " + dir.file("html.tsv") + "\nval: " + dir.file("html.tsv") +
                "\ntest: " + dir.file("html.tsv") +
                "\ntext_column: text\nlabel_column: y\nstrip_html: true\nsplit_punct: true\n");
  CHECK(h.class_names == std::vector<std::string>{"neg", "pos"});  // string labels, sorted
  std::vector<std::string> words;
  for (int32_t t : h.train[0].tokens) words.push_back(h.vocab[t]);
  CHECK(words == std::vector<std::string>{"great", "!", "loved", "it", "."});
}

TEST_CASE("text_tsv: ratio split by seed") {
  TempDir dir;
  std::string text = "sentence\tlabel\n";
  for (int i = 0; i < 200; ++i)
    text += "row " + std::to_string(i) + "\t" + std::to_string(i % 3) + "\n";
  gf::write_file(dir.file("all.tsv.gz"), text, true);
  std::string cfg =
      "train: " + dir.file("all.tsv.gz") + "\nval_ratio: 0.1\ntest_ratio: 0.25\ntokenizer: char\n";
  auto a = load(cfg, 7), b = load(cfg, 7), c = load(cfg, 8);
  CHECK(a.train.size() == 130);
  CHECK(a.val.size() == 20);
  CHECK(a.test.size() == 50);
  CHECK(a.num_classes == 3);
  auto key = [](const gf::DataSplits& d) {
    std::vector<std::vector<int32_t>> v;
    for (const auto& e : d.test) v.push_back(e.tokens);
    return v;
  };
  CHECK(key(a) == key(b));
  CHECK(key(a) != key(c));
  // every row lands in exactly one split
  std::set<std::vector<int32_t>> seen;
  for (const auto* s : {&a.train, &a.val, &a.test}) {
    for (const auto& e : *s) CHECK(seen.insert(e.tokens).second);
  }
  CHECK(seen.size() == 200);
  // split_seed overrides the run seed
  auto d = load(cfg + "split_seed: 7\n", 99);
  CHECK(key(d) == key(a));
}

TEST_CASE("text_tsv: bad input ends in one message naming file and line") {
  TempDir dir;
  gf::write_file(dir.file("ok.tsv"), kTrain);
  std::string ok = dir.file("ok.tsv");
  auto cfg = [&](const std::string& train, const std::string& extra = "") {
    return "train: " + train + "\nval: " + ok + "\ntest: " + ok + "\n" + extra;
  };

  std::string msg = error_of([&] { load(cfg(dir.file("missing.tsv"))); });
  CHECK(msg.find(dir.file("missing.tsv")) != std::string::npos);

  std::string big = "sentence\tlabel\n";
  for (int i = 0; i < 5000; ++i) big += "some words number " + std::to_string(i) + "\t1\n";
  gf::write_file(dir.file("full.tsv.gz"), big, true);
  std::ifstream in(dir.file("full.tsv.gz"), std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(dir.file("cut.tsv.gz"), std::ios::binary) << gz.substr(0, gz.size() * 2 / 3);
  msg = error_of([&] { load(cfg(dir.file("cut.tsv.gz"))); });
  CHECK(msg.find(dir.file("cut.tsv.gz")) != std::string::npos);
  CHECK(msg.find("truncated") != std::string::npos);

  msg = error_of([&] { load(cfg(ok, "label_column: lable\n")); });
  CHECK(msg.find(ok + ":1:") == 0);
  CHECK(msg.find("did you mean `label`") != std::string::npos);

  gf::write_file(dir.file("badlabel.tsv"), "sentence\tlabel\na\t1\nb\t0\nc\tpositive\n");
  msg = error_of([&] { load(cfg(dir.file("badlabel.tsv"))); });
  CHECK(msg.find(dir.file("badlabel.tsv") + ":4:") == 0);
  CHECK(msg.find("not an integer") != std::string::npos);
  // as named classes the same file loads: 0, 1 and positive
  CHECK(load(cfg(dir.file("badlabel.tsv"), "label_type: string\n")).num_classes == 3);

  gf::write_file(dir.file("fields.tsv"), "sentence\tlabel\na\t1\nb\tc\t0\n");
  msg = error_of([&] { load(cfg(dir.file("fields.tsv"))); });
  CHECK(msg.find(dir.file("fields.tsv") + ":3:") == 0);

  gf::write_file(dir.file("unseen.tsv"), "sentence\tlabel\na\t1\nb\t2\n");
  msg = error_of(
      [&] { load("train: " + ok + "\nval: " + ok + "\ntest: " + dir.file("unseen.tsv") + "\n"); });
  CHECK(msg.find(dir.file("unseen.tsv") + ":3:") == 0);

  gf::write_file(dir.file("header_only.tsv"), "sentence\tlabel\n");
  msg = error_of([&] {
    load("train: " + ok + "\nval: " + ok + "\ntest: " + dir.file("header_only.tsv") + "\n");
  });
  CHECK(msg.find("split `test` is empty") != std::string::npos);
  msg = error_of([&] { load("train: " + ok + "\ntest: " + ok + "\nval_ratio: 0\n"); });
  CHECK(msg.find("split `val` is empty") != std::string::npos);
  CHECK_THROWS_AS(load("train: " + ok + "\ntokeniser: char\n"), gf::ConfigError);  // typo key
}

TEST_CASE("text_tsv: real SST-2 (GLUE train + dev)") {
  std::string dir = std::string(GF_SHARED_DATA_DIR) + "/sst2";
  if (!gf::file_exists(dir + "/train.tsv.gz")) {
    MESSAGE("no " << dir << ": SST-2 check skipped");
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto d = load("train: " + dir + "/train.tsv.gz\ntest: " + dir +
                "/dev.tsv.gz\nval_ratio: 0.1\nmax_len: 64\n");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("SST-2 word: train " << d.train.size() << " val " << d.val.size() << " test "
                               << d.test.size() << " vocab " << d.vocab_size << " in " << s
                               << " s");
  CHECK(d.train.size() + d.val.size() == 67349);
  CHECK(d.val.size() == 6735);
  CHECK(d.test.size() == 872);
  auto st = gf::compute_stats(d, 64);
  CHECK(st.splits[2].class_counts == std::vector<size_t>{428, 444});
  CHECK(st.splits[0].class_counts[0] + st.splits[1].class_counts[0] == 29780);
  CHECK(d.vocab_size > 10000);
}

TEST_CASE("text_tsv: real IMDB at char level within seconds") {
  std::string dir = std::string(GF_SHARED_DATA_DIR) + "/imdb";
  if (!gf::file_exists(dir + "/train.tsv.gz")) {
    MESSAGE("no " << dir << ": IMDB check skipped");
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto d = load("train: " + dir + "/train.tsv.gz\nval: " + dir + "/test.tsv.gz\ntest: " + dir +
                "/test.tsv.gz\ntext_column: text\ntokenizer: char\nmax_len: 4096\n");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = gf::compute_stats(d, 1024);
  MESSAGE("IMDB char (train + test read twice): "
          << d.train.size() << " / " << d.test.size() << " in " << s << " s; train p50 "
          << st.splits[0].len_p50 << " p99 " << st.splits[0].len_p99 << ", "
          << st.splits[0].truncated << " over 1024");
  CHECK(d.train.size() == 25000);
  CHECK(d.test.size() == 25000);
  CHECK(st.splits[0].class_counts == std::vector<size_t>{12500, 12500});
  CHECK(st.splits[2].class_counts == std::vector<size_t>{12500, 12500});
  CHECK(d.max_len == 4096);
  CHECK(s < 30.0);
}
