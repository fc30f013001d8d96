// text_tsv dataset plugin: tokens by hand on small fixtures, vocabulary from the
// training split only, ratio splits by seed, each corrupt input, and the real
// SST-2 and IMDB files (skipped when absent).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iterator>
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

namespace {

// The records of PATH as `predict` reads them, with the tokenizer of SPLITS.
std::vector<gf::Record> records(const std::string& yaml, const gf::DataSplits& splits,
                                const std::string& path) {
  gf::ConfigNode node = gf::ConfigNode::load_string("plugin: text_tsv\n" + yaml);
  auto ds = gf_test::registry().create_dataset(node, gf::DatasetBuild{1, splits.tokenizer});
  auto reader = ds->open_records(path);
  std::vector<gf::Record> out;
  gf::Record r;
  while (reader->next(r)) out.push_back(r);
  return out;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The words of an example, by the vocabulary.
std::vector<std::string> words_of(const gf::DataSplits& d, const gf::Example& e) {
  std::vector<std::string> w;
  for (int32_t t : e.tokens) w.push_back(d.vocab[static_cast<size_t>(t)]);
  return w;
}

using Words = std::vector<std::string>;

}  // namespace

TEST_CASE("text_tsv: max_len holds when a punctuation mark follows the last word it keeps") {
  TempDir dir;
  // "c" fills max_len 3 and "." would be the 4th token, in training and in predict
  gf::write_file(dir.file("train.tsv"), "sentence\tlabel\na b c.d\tpos\nb c, a\tneg\n");
  gf::write_file(dir.file("new.txt"), "a b c.d e\na b c!\n");
  const std::string yaml = "train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") +
                           "\ntest: " + dir.file("train.tsv") + "\nsplit_punct: true\nmax_len: 3\n";
  auto d = load(yaml);
  CHECK(words_of(d, d.train[0]) == Words{"a", "b", "c"});
  for (const gf::Record& r : records(yaml, d, dir.file("new.txt"))) {
    CHECK(r.error.empty());
    CHECK(r.tokens.size() == 3);
  }
}

TEST_CASE("text_tsv: CSV with quoted fields (RFC 4180), sniffed or by extension") {
  TempDir dir;
  // quoted fields with the delimiter, doubled quotes and a line break inside; a BOM before the
  // header; CRLF line ends; a quote inside an unquoted field is a plain character
  const std::string csv =
      "\xEF\xBB\xBFid,text,label\r\n"
      "1,\"good, very good\",pos\r\n"
      "2,\"he said \"\"bad\"\" twice\",neg\r\n"
      "3,\"two\r\nlines\",pos\r\n"
      "4,5\" screen,neg\r\n";
  gf::write_file(dir.file("train.csv"), csv);
  std::string cfg = "train: " + dir.file("train.csv") + "\nval: " + dir.file("train.csv") +
                    "\ntest: " + dir.file("train.csv") + "\ntext_column: text\n";
  auto d = load(cfg);
  REQUIRE(d.train.size() == 4);
  CHECK(d.class_names == Words{"neg", "pos"});
  CHECK(words_of(d, d.train[0]) == Words{"good,", "very", "good"});
  CHECK(words_of(d, d.train[1]) == Words{"he", "said", "\"bad\"", "twice"});
  CHECK(words_of(d, d.train[2]) == Words{"two", "lines"});
  CHECK(words_of(d, d.train[3]) == Words{"5\"", "screen"});
  CHECK(d.train[0].label == 1);
  CHECK(d.train[1].label == 0);
  // the same rows as TSV (no quoting there) give the same tokens
  gf::write_file(dir.file("train.tsv"),
                 "id\ttext\tlabel\n1\tgood, very good\tpos\n2\the said \"bad\" twice\tneg\n"
                 "3\ttwo lines\tpos\n4\t5\" screen\tneg\n");
  auto t = load("train: " + dir.file("train.tsv") + "\nval: " + dir.file("train.tsv") +
                "\ntest: " + dir.file("train.tsv") + "\ntext_column: text\n");
  CHECK(t.vocab == d.vocab);
  for (size_t i = 0; i < 4; ++i) CHECK(t.train[i].tokens == d.train[i].tokens);

  // no extension: sniffed from the header line (the delimiter whose split names the columns)
  gf::write_file(dir.file("semi"), "text;label\n\"a;b c\";1\nd;0\n");
  auto s = load("train: " + dir.file("semi") + "\nval: " + dir.file("semi") +
                "\ntest: " + dir.file("semi") + "\ntext_column: text\n");
  CHECK(words_of(s, s.train[0]) == Words{"a;b", "c"});
  CHECK(s.train.size() == 2);
  gf::write_file(dir.file("commas.data"), "label,text\n1,x\n0,y\n");
  CHECK(load("train: " + dir.file("commas.data") + "\nval: " + dir.file("commas.data") +
             "\ntest: " + dir.file("commas.data") + "\ntext_column: text\n")
            .train.size() == 2);
  // the delimiter option: a .txt file split at `|`, quoted as CSV
  gf::write_file(dir.file("pipes.txt"), "text|label\n\"x|y\"|1\nz|0\n");
  auto p = load("train: " + dir.file("pipes.txt") + "\nval: " + dir.file("pipes.txt") +
                "\ntest: " + dir.file("pipes.txt") + "\ntext_column: text\ndelimiter: \"|\"\n");
  CHECK(words_of(p, p.train[0]) == Words{"x|y"});
  // format: csv on a .tsv name, and a tab delimiter given as `tab`
  gf::write_file(dir.file("q.tsv"), "text\tlabel\n\"a\tb\"\t1\nc\t0\n");
  auto q = load("train: " + dir.file("q.tsv") + "\nval: " + dir.file("q.tsv") +
                "\ntest: " + dir.file("q.tsv") + "\ntext_column: text\ndelimiter: tab\n");
  CHECK(words_of(q, q.train[0]) == Words{"a", "b"});
  CHECK(q.train.size() == 2);
  // gzip'd CSV keeps its extension
  gf::write_file(dir.file("z.csv.gz"), "text,label\n\"p,q\",1\nr,0\n", true);
  auto z = load("train: " + dir.file("z.csv.gz") + "\nval: " + dir.file("z.csv.gz") +
                "\ntest: " + dir.file("z.csv.gz") + "\ntext_column: text\n");
  CHECK(words_of(z, z.train[0]) == Words{"p,q"});
}

TEST_CASE("text_tsv: CSV errors name the delimiter and the line") {
  TempDir dir;
  auto cfg = [&](const std::string& f, const std::string& extra = "") {
    return "train: " + dir.file(f) + "\nval: " + dir.file(f) + "\ntest: " + dir.file(f) +
           "\ntext_column: text\n" + extra;
  };
  // a row with one field too many
  gf::write_file(dir.file("extra.csv"), "text,label\na,1\nb,c,0\n");
  std::string msg = error_of([&] { load(cfg("extra.csv")); });
  CHECK(msg.find(dir.file("extra.csv") + ":3:") == 0);
  CHECK(has(msg, "expected 2 comma-separated fields (as the header), found 3"));
  CHECK(has(msg, "comma as the delimiter, from the .csv extension"));
  // a quote that never closes: the line where it opened
  gf::write_file(dir.file("open.csv"), "text,label\na,1\n\"b,0\nc,1\nd,0\n");
  msg = error_of([&] { load(cfg("open.csv")); });
  CHECK(msg.find(dir.file("open.csv") + ":3:") == 0);
  CHECK(has(msg, "quoted field opened on this line never closes"));
  // text after a closing quote
  gf::write_file(dir.file("after.csv"), "text,label\n\"a\"b,1\nc,0\n");
  msg = error_of([&] { load(cfg("after.csv")); });
  CHECK(msg.find(dir.file("after.csv") + ":2:") == 0);
  CHECK(has(msg, "field 1: the closing quote is followed by `b`, not by the delimiter (comma)"));
  // a CSV read as TSV (forced): the column is not found, and the message says how it was split
  gf::write_file(dir.file("data.csv"), "text,label\na,1\nb,0\n");
  msg = error_of([&] { load(cfg("data.csv", "format: tsv\n")); });
  CHECK(msg.find(dir.file("data.csv") + ":1:") == 0);
  CHECK(has(msg, "no column `text` (option text_column)"));
  CHECK(has(msg, "the header was split with tab as the delimiter, format: tsv"));
  CHECK(has(msg, "set data.delimiter or data.format"));
  // a semicolon file named .csv: the comma does not split it
  gf::write_file(dir.file("semi.csv"), "text;label\na;1\nb;0\n");
  msg = error_of([&] { load(cfg("semi.csv")); });
  CHECK(has(msg, "comma as the delimiter, from the .csv extension"));
  CHECK(load(cfg("semi.csv", "delimiter: \";\"\n")).train.size() == 2);
  // bad options
  CHECK(has(error_of([&] { load(cfg("data.csv", "delimiter: \"ab\"\n")); }), "is one character"));
  CHECK(has(error_of([&] { load(cfg("data.csv", "format: tsv\ndelimiter: \",\"\n")); }),
            "format tsv is split at tabs"));
  CHECK(has(error_of([&] { load(cfg("data.csv", "format: lines\n")); }),
            "format `lines` (one text per line) has no labels"));
}

TEST_CASE("text_tsv: JSON lines with text_column and label_column keys") {
  TempDir dir;
  gf::write_file(dir.file("train.jsonl"),
                 "{\"text\": \"good film\", \"label\": \"pos\", \"extra\": [1, 2]}\n"
                 "\n"
                 "{\"label\": \"neg\", \"text\": \"tab\\tand\\nnewline\"}\n"
                 "{\"text\": \"caf\\u00e9\", \"label\": \"pos\"}\n");
  std::string cfg = "train: " + dir.file("train.jsonl") + "\nval: " + dir.file("train.jsonl") +
                    "\ntest: " + dir.file("train.jsonl") + "\ntext_column: text\n";
  auto d = load(cfg);
  REQUIRE(d.train.size() == 3);
  CHECK(words_of(d, d.train[0]) == Words{"good", "film"});
  CHECK(words_of(d, d.train[1]) == Words{"tab", "and", "newline"});
  CHECK(words_of(d, d.train[2]) == Words{"caf\xc3\xa9"});
  CHECK(d.class_names == Words{"neg", "pos"});
  // integer labels (JSON numbers) as integer classes; sniffed without an extension
  gf::write_file(dir.file("ints"),
                 "{\"text\": \"a\", \"label\": 2}\n{\"text\": \"b\", \"label\": 10}\n"
                 "{\"text\": \"c\", \"label\": 2.0}\n");
  auto n = load("train: " + dir.file("ints") + "\nval: " + dir.file("ints") +
                "\ntest: " + dir.file("ints") + "\ntext_column: text\n");
  CHECK(n.class_names == Words{"2", "10"});
  CHECK(n.train[2].label == 0);
  // errors name the line and the key
  auto bad = [&](const std::string& body) {
    gf::write_file(dir.file("bad.jsonl"), "{\"text\": \"a\", \"label\": 1}\n" + body);
    return error_of([&] {
      load("train: " + dir.file("bad.jsonl") + "\nval: " + dir.file("bad.jsonl") +
           "\ntest: " + dir.file("bad.jsonl") + "\ntext_column: text\n");
    });
  };
  std::string msg = bad("{\"txt\": \"b\", \"label\": 0}\n");
  CHECK(msg.find(dir.file("bad.jsonl") + ":2:") == 0);
  CHECK(has(msg, "no key `text` (option text_column); keys: label, txt; did you mean `txt`?"));
  msg = bad("{\"text\": \"b\", \"label\": 0\n");
  CHECK(msg.find(dir.file("bad.jsonl") + ":2: not a JSON line: parse error") == 0);
  msg = bad("[\"b\", 0]\n");
  CHECK(has(msg, ":2: a JSON line holds one object"));
  msg = bad("{\"text\": 5, \"label\": 0}\n");
  CHECK(has(msg, ":2: key `text` holds 5, not a string"));
  msg = bad("{\"text\": \"b\", \"label\": 0.5}\n");
  CHECK(has(msg, ":2: key `label` holds 0.5; a label is a string or an integer"));
  msg = bad("{\"text\": \"b\", \"label\": null}\n");
  CHECK(has(msg, ":2: key `label` holds null"));
}

TEST_CASE("text_tsv: predict reads plain text, CSV and JSON lines with the saved tokenizer") {
  TempDir dir;
  gf::write_file(dir.file("train.csv"), "text,label\ngood fun,1\nbad dull,0\ngood story,1\n");
  std::string cfg = "train: " + dir.file("train.csv") + "\nval: " + dir.file("train.csv") +
                    "\ntest: " + dir.file("train.csv") + "\ntext_column: text\n";
  auto d = load(cfg);
  auto id = [&](const std::string& w) {
    for (size_t i = 0; i < d.vocab.size(); ++i)
      if (d.vocab[i] == w) return static_cast<int32_t>(i);
    return int32_t(-1);
  };
  // one text per line (.txt): every non-empty line is a record, its id the line number; a tab or
  // a comma is part of the text
  gf::write_file(dir.file("in.txt"), "good story\n\nbad, dull\tzebra\n");
  auto r = records(cfg, d, dir.file("in.txt"));
  REQUIRE(r.size() == 2);
  CHECK(r[0].id == "1");
  CHECK(r[0].tokens == std::vector<int32_t>{id("good"), id("story")});
  CHECK(r[1].id == "3");
  CHECK(r[1].line == 3);
  CHECK(r[1].tokens == std::vector<int32_t>{1, id("dull"), 1});  // "bad," and "zebra" unknown
  // a CSV with an id column and quoted text; a bad row is reported and reading goes on
  gf::write_file(dir.file("in.csv"), "id,text\nx1,\"good, fun\"\nx2,a,b\nx3,bad\n");
  r = records(cfg, d, dir.file("in.csv"));
  REQUIRE(r.size() == 3);
  CHECK(r[0].id == "x1");
  CHECK(r[0].tokens == std::vector<int32_t>{1, id("fun")});
  CHECK(has(r[1].error, "expected 2 comma-separated fields"));
  CHECK(r[2].tokens == std::vector<int32_t>{id("bad")});
  // JSON lines with ids; a line without the key is a bad record
  gf::write_file(dir.file("in.jsonl"),
                 "{\"id\": 7, \"text\": \"good\"}\n{\"sentence\": \"bad\"}\n");
  r = records(cfg, d, dir.file("in.jsonl"));
  REQUIRE(r.size() == 2);
  CHECK(r[0].id == "7");
  CHECK(r[0].tokens == std::vector<int32_t>{id("good")});
  CHECK(r[1].line == 2);
  CHECK(has(r[1].error, "no key `text`"));
  // a plain file under another name: the header has no such column, and the message says how
  // plain text is read
  gf::write_file(dir.file("in.dat"), "good story\nbad\n");
  std::string msg = error_of([&] { records(cfg, d, dir.file("in.dat")); });
  CHECK(msg.find(dir.file("in.dat") + ":1: no column `text`") == 0);
  CHECK(has(msg, "named .txt or with data.format: lines"));
  // with format: lines it is read as plain text
  r = records(cfg + "format: lines\n", d, dir.file("in.dat"));
  REQUIRE(r.size() == 2);
  CHECK(r[1].tokens == std::vector<int32_t>{id("bad")});
}

TEST_CASE("text_tsv: tokenizer ids takes integer token ids, the padding one past them") {
  TempDir dir;
  gf::write_file(dir.file("train.jsonl"),
                 "{\"text\": [3, 1, 4], \"label\": 0}\n{\"text\": \"1 5 9 2\", \"label\": 1}\n"
                 "{\"text\": [0], \"label\": 1}\n");
  gf::write_file(dir.file("test.tsv"), "text\tlabel\n9 9 0\t0\n");
  std::string cfg = "train: " + dir.file("train.jsonl") + "\nval: " + dir.file("train.jsonl") +
                    "\ntest: " + dir.file("test.tsv") +
                    "\ntext_column: text\ntokenizer: ids\nmax_len: 3\n";
  auto d = load(cfg);
  CHECK(d.vocab_size == 10 + 1);  // ids 0..9 and the padding
  CHECK(d.pad_id == 10);
  CHECK(d.vocab.empty());  // the ids are their own text
  CHECK(d.train[0].tokens == std::vector<int32_t>{3, 1, 4});
  CHECK(d.train[1].tokens == std::vector<int32_t>{1, 5, 9});  // max_len 3
  CHECK(d.test[0].tokens == std::vector<int32_t>{9, 9, 0});
  // num_tokens fixes the count; an id past it is refused with its line
  auto n = load(cfg + "num_tokens: 20\n");
  CHECK(n.pad_id == 20);
  std::string msg = error_of([&] { load(cfg + "num_tokens: 6\n"); });
  CHECK(msg.find(dir.file("train.jsonl") + ":2: token id 9 is not below 6") == 0);
  gf::write_file(dir.file("big.tsv"), "text\tlabel\n3 12\t0\n");
  msg = error_of([&] {
    load("train: " + dir.file("train.jsonl") + "\nval: " + dir.file("train.jsonl") +
         "\ntest: " + dir.file("big.tsv") + "\ntext_column: text\ntokenizer: ids\n");
  });
  CHECK(msg.find(dir.file("big.tsv") + ":2: token id 12 is not below 10") == 0);
  CHECK(has(msg, "largest id + 1; set num_tokens"));
  gf::write_file(dir.file("huge.tsv"), "text\tlabel\n3 16777216\t0\n1\t1\n");
  msg = error_of([&] {
    load("train: " + dir.file("huge.tsv") + "\nval: " + dir.file("huge.tsv") +
         "\ntest: " + dir.file("huge.tsv") + "\ntext_column: text\ntokenizer: ids\n");
  });
  CHECK(msg.find(dir.file("huge.tsv") + ":2: token id 16777216 is not below 16777216") == 0);
  gf::write_file(dir.file("word.tsv"), "text\tlabel\n3 x\t0\n");
  msg = error_of([&] {
    load("train: " + dir.file("word.tsv") + "\nval: " + dir.file("train.jsonl") +
         "\ntest: " + dir.file("train.jsonl") + "\ntext_column: text\ntokenizer: ids\n");
  });
  CHECK(msg.find(dir.file("word.tsv") + ":2: token `x` is not a token id") == 0);
  msg = error_of(
      [&] { load("train: " + dir.file("test.tsv") + "\ntext_column: text\nnum_tokens: 5\n"); });
  CHECK(has(msg, "num_tokens"));
  CHECK(has(msg, "is an option of tokenizer: ids"));
  // predict with the saved tokenizer: ids past the saved count are a bad record
  gf::write_file(dir.file("in.txt"), "1 2\n4 10\n");
  auto r = records(cfg, d, dir.file("in.txt"));
  REQUIRE(r.size() == 2);
  CHECK(r[0].tokens == std::vector<int32_t>{1, 2});
  CHECK(has(r[1].error, "token id 10 is not below 10"));
}

TEST_CASE("text_tsv: words and labels that are not UTF-8 survive the saved tokenizer") {
  TempDir dir;
  gf::write_file(dir.file("t.tsv"), "sentence\tlabel\ncaf\xe9 ok\tn\xe9g\nfine\tpos\n");
  std::string cfg = "train: " + dir.file("t.tsv") + "\nval: " + dir.file("t.tsv") +
                    "\ntest: " + dir.file("t.tsv") + "\n";
  auto d = load(cfg);
  CHECK(d.class_names == Words{"n\xe9g", "pos"});
  // the same data again through the saved tokenizer: the same vocabulary, classes and tokens
  gf::ConfigNode node = gf::ConfigNode::load_string("plugin: text_tsv\n" + cfg);
  auto again = gf_test::registry().create_dataset(node, gf::DatasetBuild{1, d.tokenizer})->load();
  CHECK(again.vocab == d.vocab);
  CHECK(again.class_names == d.class_names);
  CHECK(again.train[0].tokens == d.train[0].tokens);
  CHECK(again.train[0].tokens[0] != 1);  // caf\xe9 is a known word, not <unk>
}

namespace {
struct Cli {
  int status;
  std::string output;
};
Cli run_cli(const std::string& args, const std::string& out_file) {
  std::string cmd = std::string(GF_BIN) + " " + args + " > " + out_file + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out_file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  return {WEXITSTATUS(rc), text};
}
}  // namespace

TEST_CASE("text_tsv: the program trains on CSV, evaluates JSON lines, predicts plain text") {
  TempDir dir;
  // the label is whether `good` occurs; texts quoted with commas inside
  std::string csv = "text,label\n", jsonl;
  const char* words[] = {"film", "plot", "story", "fun", "dull", "actor", "scene"};
  for (int i = 0; i < 120; ++i) {
    bool pos = i % 2 == 0;
    std::string text =
        std::string(words[i % 7]) + ", " + (pos ? "good" : "bad") + " " + words[(i / 7) % 7];
    csv += "\"" + text + "\"," + (pos ? "yes" : "no") + "\n";
  }
  gf::write_file(dir.file("train.csv"), csv);
  gf::write_file(dir.file("test.jsonl"),
                 "{\"text\": \"good, fun\", \"label\": \"yes\"}\n"
                 "{\"text\": \"bad plot\", \"label\": \"no\"}\n"
                 "{\"text\": \"scene, good\", \"label\": \"yes\"}\n");
  gf::write_file(dir.file("in.txt"), "good, fun\nbad plot\nscene, good\n");
  std::ofstream(dir.file("run.yaml"))
      << "name: t\nseed: 3\nthreads: 1\n"
         "data: {plugin: text_tsv, train: train.csv, text_column: text, val_ratio: 0.1, "
         "test_ratio: 0.1}\n"
         "model: {d_model: 16, layers: 1, max_len: 8, attention: {plugin: mha, heads: 2}}\n"
         "optimizer: {plugin: adamw, lr: 0.01}\n"
         "train: {steps: 40, batch_size: 8, warmup: 2, eval_every: 20, log_every: 10}\n";
  const std::string out = dir.file("out.txt");
  Cli stats = run_cli("data stats " + dir.file("run.yaml") + " --json", out);
  REQUIRE_MESSAGE(stats.status == 0, stats.output);
  nlohmann::json sj = nlohmann::json::parse(stats.output);
  CHECK(sj.dump().find("\"no\"") != std::string::npos);
  CHECK(sj["max_len"] == 8);  // model.max_len, as the run cuts its texts
  // without model.max_len the model's default (512) cuts, and data stats counts it so
  {
    std::string long_csv = "text,label\n";
    for (int i = 0; i < 20; ++i) {
      std::string words;
      for (int w = 0; w < 600; ++w) words += (w ? " " : "") + std::string(w % 2 ? "good" : "fun");
      long_csv += words + "," + (i % 2 ? "yes" : "no") + "\n";
    }
    gf::write_file(dir.file("long.csv"), long_csv);
    std::ofstream(dir.file("long.yaml"))
        << "name: t\nseed: 3\n"
           "data: {plugin: text_tsv, train: long.csv, text_column: text, max_len: 1000}\n"
           "model: {d_model: 16, layers: 1, attention: {plugin: mha, heads: 2}}\n";
    Cli ls = run_cli("data stats " + dir.file("long.yaml") + " --json", out);
    REQUIRE_MESSAGE(ls.status == 0, ls.output);
    nlohmann::json lj = nlohmann::json::parse(ls.output);
    CHECK(lj["max_len"] == 512);
    CHECK(lj["splits"]["train"]["truncated"].get<size_t>() ==
          lj["splits"]["train"]["size"].get<size_t>());  // every 600-word text is cut
  }
  Cli t =
      run_cli("train " + dir.file("run.yaml") + " --run-dir " + dir.file("run") + " --quiet", out);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const std::string best = dir.file("run/checkpoints/best.safetensors");
  Cli e = run_cli("eval " + best + " --set data.test=" + dir.file("test.jsonl") + " --json", out);
  REQUIRE_MESSAGE(e.status == 0, e.output);
  nlohmann::json ej = nlohmann::json::parse(e.output);
  CHECK(ej["examples"] == 3);
  CHECK(ej["classes"][0]["name"] == "no");
  Cli p = run_cli(
      "predict " + best + " " + dir.file("in.txt") + " --out " + dir.file("p.tsv") + " --quiet",
      out);
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::ifstream pin(dir.file("p.tsv"));
  std::string line;
  std::getline(pin, line);
  CHECK(line == "id\tpredicted\tp_no\tp_yes");
  std::vector<std::string> ids, predicted;
  while (std::getline(pin, line)) {
    auto f = gf::split_fields(line);
    ids.push_back(f[0]);
    predicted.push_back(f[1]);
  }
  CHECK(ids == std::vector<std::string>{"1", "2", "3"});
  // the predictions of the plain lines are those eval scored: as many right as its accuracy says
  const std::vector<std::string> truth{"yes", "no", "yes"};
  size_t right = 0;
  for (size_t i = 0; i < predicted.size(); ++i) right += predicted[i] == truth[i];
  CHECK(static_cast<double>(right) / 3 == doctest::Approx(ej["accuracy"].get<double>()));
  // a CSV that is not one: the message names the delimiter and the line
  gf::write_file(dir.file("bad.csv"), "text,label\n\"a, b\",yes\nc,d,no\n");
  Cli b = run_cli("eval " + best + " --set data.test=" + dir.file("bad.csv"), out);
  CHECK(b.status == 2);
  CHECK(has(b.output, dir.file("bad.csv") + ":3: expected 2 comma-separated fields"));
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
