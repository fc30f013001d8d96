// eval on other data and predict: classification figures by hand, datasets that tokenise with a
// saved tokenizer (unseen words -> <unk>, the checkpoint's class order, refusals), the record
// readers of predict, and the command line end to end on a tiny run.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "growformer/classification.hpp"
#include "growformer/config.hpp"
#include "growformer/dataset.hpp"
#include "growformer/data/io.hpp"
#include "growformer/data/sequences.hpp"
#include "growformer/data/listops.hpp"
#include "growformer/rng.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using gf_test::TempDir;

namespace {

std::shared_ptr<gf::Dataset> dataset(const std::string& yaml, const std::string& tokenizer = "") {
  return gf_test::registry().create_dataset(gf::ConfigNode::load_string(yaml),
                                            gf::DatasetBuild{1, tokenizer});
}

std::vector<gf::Record> read_all(gf::Dataset& ds, const std::string& path) {
  auto reader = ds.open_records(path);
  std::vector<gf::Record> out;
  gf::Record r;
  while (reader->next(r)) out.push_back(r);
  return out;
}

struct Cli {
  int status;
  std::string output;
};
Cli run_cli(const std::string& args, const std::string& out_file) {
  std::string cmd = std::string(GF_BIN) + " " + args + " > " + out_file + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WEXITSTATUS(rc), ss.str()};
}
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }
std::string text_of(const std::string& path) {
  auto bytes = gf::read_file_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

const char* kTrain =
    "sentence\tlabel\n"
    "good fun film\t1\n"
    "bad dull film\t0\n"
    "good good story\t1\n"
    "dull bad plot\t0\n"
    "fun story\t1\n"
    "bad film\t0\n";

}  // namespace

TEST_CASE("classification report: figures of a hand-worked confusion matrix") {
  // true 0: 3 right, 1 as class 1; true 1: 2 right, 2 as class 0; class 2 never occurs
  gf::ClassificationReport r = gf::classification_report({{3, 1, 0}, {2, 2, 0}, {0, 0, 0}});
  CHECK(r.examples == 8);
  CHECK(r.accuracy == doctest::Approx(5.0 / 8));
  CHECK(r.classes[0].precision == doctest::Approx(3.0 / 5));
  CHECK(r.classes[0].recall == doctest::Approx(3.0 / 4));
  CHECK(r.classes[0].f1 == doctest::Approx(2 * 0.6 * 0.75 / 1.35));
  CHECK(r.classes[1].precision == doctest::Approx(2.0 / 3));
  CHECK(r.classes[1].recall == doctest::Approx(0.5));
  CHECK(r.classes[1].f1 == doctest::Approx(2 * (2.0 / 3) * 0.5 / (2.0 / 3 + 0.5)));
  CHECK(r.classes[2].support == 0);
  CHECK(r.classes[2].f1 == 0);
  // the absent class does not enter the macro average
  CHECK(r.macro_f1 == doctest::Approx((r.classes[0].f1 + r.classes[1].f1) / 2));
  CHECK_THROWS(gf::classification_report({{1, 2}, {3}}));
}

TEST_CASE("text_tsv: a saved tokenizer maps new words to <unk> and keeps the classes") {
  TempDir dir;
  gf::write_file(dir.file("train.tsv"), kTrain);
  std::string base =
      "plugin: text_tsv\nval: " + dir.file("train.tsv") + "\nclass_names: [neg, pos]\n";
  std::string own = "train: " + dir.file("train.tsv") + "\ntest: " + dir.file("train.tsv");
  gf::DataSplits first = dataset(base + own)->load();
  REQUIRE(!first.tokenizer.empty());

  // other data: new words, and the classes appear in another order in the file
  gf::write_file(dir.file("other.tsv"),
                 "sentence\tlabel\nzebra good\t1\nbad unseen words\t0\nfilm\t1\n");
  gf::DataSplits again =
      dataset(base + "train: " + dir.file("other.tsv") + "\ntest: " + dir.file("other.tsv"),
              first.tokenizer)
          ->load();
  CHECK(again.vocab == first.vocab);
  CHECK(again.class_names == std::vector<std::string>{"neg", "pos"});
  auto id = [&](const std::string& w) {
    for (size_t i = 0; i < first.vocab.size(); ++i)
      if (first.vocab[i] == w) return static_cast<int32_t>(i);
    return int32_t(-1);
  };
  REQUIRE(again.test.size() == 3);
  CHECK(again.test[0].tokens == std::vector<int32_t>{1, id("good")});  // zebra: unknown
  CHECK(again.test[1].tokens == std::vector<int32_t>{id("bad"), 1, 1});
  CHECK(again.test[0].label == 1);
  CHECK(again.test[1].label == 0);

  // a label the checkpoint does not know is refused with its line
  gf::write_file(dir.file("three.tsv"), "sentence\tlabel\ngood\t1\nbad\t2\n");
  std::string e = gf_test::error_of([&] {
    dataset(base + "train: " + dir.file("three.tsv") + "\ntest: " + dir.file("three.tsv"),
            first.tokenizer)
        ->load();
  });
  CHECK(has(e, "three.tsv:3"));
  CHECK(has(e, "not one of the checkpoint's classes (0, 1)"));
  // another plugin's tokenizer is refused
  e = gf_test::error_of([&] { dataset(base + own, "{\"plugin\":\"listops\"}")->load(); });
  CHECK(has(e, "belongs to dataset `listops`"));

  // predict records: the id column when present, tokens as in training
  gf::write_file(dir.file("in.tsv"), "id\tsentence\na7\tgood zebra\nb2\tx\ty\nc9\t\n");
  auto ds = dataset(base + own, first.tokenizer);
  auto recs = read_all(*ds, dir.file("in.tsv"));
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].id == "a7");
  CHECK(recs[0].tokens == std::vector<int32_t>{id("good"), 1});
  CHECK(recs[1].line == 3);
  CHECK(has(recs[1].error, "expected 2 tab-separated fields"));
  CHECK(recs[2].tokens == std::vector<int32_t>{1});  // an empty text pools one <unk>, as training
}

TEST_CASE("fasta_variants: predict reads records one by one; the checkpoint's classes hold") {
  TempDir dir;
  std::string fasta = ">s1 first\nACGTAC\nGTACGT\n>s2\nacgtnn\n>s3\nACGTXA\n>s4\nAC\n";
  gf::write_file(dir.file("g.fa.gz"), fasta, true);
  std::string meta = "strain\tv\ns1\tA\ns2\tB\ns3\tA\ns4\tC\n";
  gf::write_file(dir.file("m.tsv"), meta);
  std::string state =
      "{\"plugin\":\"fasta_variants\",\"k\":3,\"stride\":3,\"ambiguous\":\"token\",\"region\":[0,0]"
      ","
      "\"max_len\":0,\"seed\":1,\"classes\":[\"A\",\"B\",\"other\"],\"other_name\":\"other\"}";
  auto ds = dataset("plugin: fasta_variants\nfasta: " + dir.file("g.fa.gz") +
                        "\nmetadata: " + dir.file("m.tsv") + "\nlabel_column: v\nk: 2\n",
                    state);
  auto recs = read_all(*ds, dir.file("g.fa.gz"));
  REQUIRE(recs.size() == 4);
  gf::KmerTokenizer tok(3, 3, gf::Ambiguous::Token);  // the saved k wins over the config's k: 2
  CHECK(recs[0].id == "s1");
  CHECK(recs[0].line == 1);
  CHECK(recs[0].tokens == tok.tokenize("ACGTACGTACGT", 0, 12, 0, "x"));
  CHECK(recs[1].tokens == tok.tokenize("ACGTNN", 0, 6, 0, "x"));
  CHECK(recs[2].line == 6);
  CHECK(has(recs[2].error, "unknown base 'X'"));
  CHECK(has(recs[3].error, "no k-mer"));
}

TEST_CASE("listops: predict reads expressions, bare or in the dataset's TSV forms") {
  TempDir dir;
  gf::write_file(dir.file("e.txt"), "[MAX 2 9 ]\n\n( [MIN 3 4 ] )\t3\n[MAX 2 Q ]\n");
  auto ds = dataset(
      "plugin: listops\ntrain_size: 10\nval_size: 0\ntest_size: 0\nmin_length: 1\n"
      "max_length: 20\n");
  auto recs = read_all(*ds, dir.file("e.txt"));
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].tokens == gf::listops::tokenize("[MAX 2 9 ]"));
  CHECK(recs[1].id == "3");
  CHECK(recs[1].tokens == gf::listops::tokenize("( [MIN 3 4 ] )"));
  CHECK(recs[2].line == 4);
  CHECK(!recs[2].error.empty());
}

TEST_CASE("cli: eval --set data.test=FILE gives the run's own test figures; predict; refusals") {
  TempDir dir;
  // a learnable toy task: the label is whether the word `good` occurs
  std::string rows = "sentence\tlabel\n";
  const char* words[] = {"film", "plot", "story", "fun", "dull", "actor", "scene"};
  for (int i = 0; i < 160; ++i) {
    bool pos = i % 2 == 0;
    rows += std::string(words[i % 7]) + " " + (pos ? "good" : "bad") + " " + words[(i / 7) % 7] +
            "\t" + (pos ? "1" : "0") + "\n";
  }
  gf::write_file(dir.file("train.tsv"), rows);
  gf::write_file(
      dir.file("test.tsv"),
      "sentence\tlabel\ngood unseen\t1\nbad\t0\nnovel good words\t1\nbad bad\t0\nfun\t1\n");
  std::ofstream(dir.file("run.yaml"))
      << "name: t\nseed: 3\nthreads: 1\n"
         "data: {plugin: text_tsv, train: train.tsv, test: test.tsv, val_ratio: 0.1}\n"
         "model: {d_model: 16, layers: 1, max_len: 8, attention: {plugin: mha, heads: 2, "
         "head: {plugin: dot_product}}}\n"
         "optimizer: {plugin: adamw, lr: 0.01}\n"
         "train: {steps: 30, batch_size: 8, warmup: 2, eval_every: 15, log_every: 10}\n";
  std::string out = dir.file("out.txt");
  Cli t =
      run_cli("train " + dir.file("run.yaml") + " --run-dir " + dir.file("run") + " --quiet", out);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  json test_line;
  {
    std::ifstream m(dir.file("run/metrics.jsonl"));
    std::string line;
    while (std::getline(m, line))
      if (json::parse(line)["split"] == "test") test_line = json::parse(line);
  }
  REQUIRE(test_line.is_object());
  std::string best = dir.file("run/checkpoints/best.safetensors");

  // the same file named on the command line, from another directory
  gf::write_file(dir.file("copy.tsv"),
                 "sentence\tlabel\ngood unseen\t1\nbad\t0\nnovel good "
                 "words\t1\nbad bad\t0\nfun\t1\n");
  Cli e = run_cli("eval " + best + " --set data.test=" + dir.file("copy.tsv") + " --json", out);
  REQUIRE_MESSAGE(e.status == 0, e.output);
  json ej = json::parse(e.output);
  CHECK(ej["examples"] == 5);
  CHECK(ej["accuracy"].get<double>() == test_line["accuracy"].get<double>());
  CHECK(ej["loss"].get<double>() ==
        doctest::Approx(test_line["loss"].get<double>()).epsilon(1e-12));
  CHECK(ej["confusion"].size() == 2);
  size_t total = 0;
  for (auto& row : ej["confusion"])
    for (auto& v : row) total += v.get<size_t>();
  CHECK(total == 5);

  // a whole other data section, its relative paths against its own file
  fs::create_directories(dir.file("sub"));
  std::ofstream(dir.file("sub/other.yaml"))
      << "data: {plugin: text_tsv, train: ../train.tsv, test: ../copy.tsv, val_ratio: 0.1}\n";
  Cli od = run_cli("eval " + best + " --data " + dir.file("sub/other.yaml") + " --json", out);
  REQUIRE_MESSAGE(od.status == 0, od.output);
  CHECK(json::parse(od.output)["accuracy"] == ej["accuracy"]);
  CHECK(json::parse(od.output)["confusion"] == ej["confusion"]);

  // predict: one row per record, probabilities summing to 1, the class names
  Cli p = run_cli(
      "predict " + best + " " + dir.file("copy.tsv") + " --out " + dir.file("p.tsv") + " --quiet",
      out);
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::ifstream pin(dir.file("p.tsv"));
  std::string line;
  std::getline(pin, line);
  CHECK(line == "id\tpredicted\tp_0\tp_1");
  size_t n = 0, correct = 0;
  int labels[] = {1, 0, 1, 0, 1};
  while (std::getline(pin, line)) {
    auto f = gf::split_fields(line);
    REQUIRE(f.size() == 4);
    CHECK(std::abs(std::stod(f[2]) + std::stod(f[3]) - 1.0) < 1e-5);
    correct += f[1] == std::to_string(labels[n]);
    ++n;
  }
  CHECK(n == 5);
  CHECK(static_cast<double>(correct) / n == ej["accuracy"].get<double>());

  // the checkpoint alone: with the training and test files gone, predict gives the same rows
  // and eval on a file reads only that file
  fs::rename(dir.file("train.tsv"), dir.file("train.moved"));
  fs::rename(dir.file("test.tsv"), dir.file("test.moved"));
  Cli p2 = run_cli(
      "predict " + best + " " + dir.file("copy.tsv") + " --out " + dir.file("p2.tsv") + " --quiet",
      out);
  REQUIRE_MESSAGE(p2.status == 0, p2.output);
  CHECK(text_of(dir.file("p2.tsv")) == text_of(dir.file("p.tsv")));
  Cli e2 = run_cli("eval " + best + " --set data.test=" + dir.file("copy.tsv") + " --json", out);
  REQUIRE_MESSAGE(e2.status == 0, e2.output);
  json e2j = json::parse(e2.output);
  for (const char* k : {"examples", "accuracy", "loss", "confusion", "macro_f1"})
    CHECK(e2j[k] == ej[k]);
  Cli gone = run_cli("eval " + best + " --split val", out);  // val is carved from train.tsv
  CHECK(gone.status != 0);
  CHECK(has(gone.output, "train.tsv"));
  CHECK(has(gone.output, "--data FILE"));  // and what to do instead
  // --data: a data file (not a config) is the test split; a data config naming only the test
  // file takes the rest of the checkpoint's options (text_tsv's required `train`, not read)
  Cli e3 = run_cli("eval " + best + " --data " + dir.file("copy.tsv") + " --json", out);
  REQUIRE_MESSAGE(e3.status == 0, e3.output);
  std::ofstream(dir.file("test_only.yaml"))
      << "data: {plugin: text_tsv, test: " << dir.file("copy.tsv") << "}\n";
  Cli e4 = run_cli("eval " + best + " --data " + dir.file("test_only.yaml") + " --json", out);
  REQUIRE_MESSAGE(e4.status == 0, e4.output);
  for (const char* k : {"examples", "accuracy", "confusion"}) {
    CHECK(json::parse(e3.output)[k] == ej[k]);
    CHECK(json::parse(e4.output)[k] == ej[k]);
  }
  Cli e5 = run_cli("eval " + best + " --data " + dir.file("copy.tsv") + " --split val", out);
  CHECK(e5.status == 2);
  CHECK(has(e5.output, "--data FILE is evaluated as the test split"));
  // a run directory: its best checkpoint, else its last; neither is an error naming both
  const std::string run_dir = fs::path(best).parent_path().parent_path().string();
  Cli d1 = run_cli("eval " + run_dir + " --set data.test=" + dir.file("copy.tsv") + " --json", out);
  REQUIRE_MESSAGE(d1.status == 0, d1.output);
  CHECK(json::parse(d1.output)["checkpoint"] == best);
  Cli d2 = run_cli("predict " + run_dir + " " + dir.file("copy.tsv") + " --out " +
                       dir.file("p3.tsv") + " --quiet",
                   out);
  REQUIRE_MESSAGE(d2.status == 0, d2.output);
  CHECK(text_of(dir.file("p3.tsv")) == text_of(dir.file("p.tsv")));
  fs::create_directories(dir.file("empty_run/checkpoints"));
  Cli d3 = run_cli("eval " + dir.file("empty_run"), out);
  CHECK(d3.status == 1);
  CHECK(has(d3.output, "checkpoints/best.safetensors"));
  CHECK(has(d3.output, "checkpoints/last.safetensors"));
  fs::rename(dir.file("train.moved"), dir.file("train.tsv"));
  fs::rename(dir.file("test.moved"), dir.file("test.tsv"));

  // a bad record: fatal with its line, or skipped
  gf::write_file(dir.file("bad.tsv"), "sentence\tlabel\ngood\t1\nx\ty\tz\nbad\t0\n");
  Cli bad = run_cli("predict " + best + " " + dir.file("bad.tsv"), out);
  CHECK(bad.status == 2);
  CHECK(has(bad.output, "bad.tsv:3"));
  Cli skip = run_cli(
      "predict " + best + " " + dir.file("bad.tsv") + " --bad-records skip --format jsonl", out);
  CHECK(skip.status == 0);
  CHECK(has(skip.output, "skipped: "));
  CHECK(has(skip.output, "\"predicted\""));

  // refusals: a label the checkpoint does not know; another task's data; not a data key
  gf::write_file(dir.file("three.tsv"), "sentence\tlabel\ngood\t1\nbad\t7\n");
  Cli r1 = run_cli("eval " + best + " --set data.test=" + dir.file("three.tsv"), out);
  CHECK(r1.status == 2);
  CHECK(has(r1.output, "label `7` is not one of the checkpoint's classes"));
  std::ofstream(dir.file("lo.yaml")) << "data: {plugin: listops, train_size: 20, val_size: 5, "
                                        "test_size: 5, min_length: 1, max_length: 20}\n";
  Cli r2 = run_cli("eval " + best + " --data " + dir.file("lo.yaml"), out);
  CHECK(r2.status == 2);
  CHECK(has(r2.output, "trained on dataset `text_tsv`, not `listops`"));
  Cli r3 = run_cli("eval " + best + " --set model.d_model=8", out);
  CHECK(r3.status == 2);
  CHECK(has(r3.output, "only data.KEY=VALUE"));
}

TEST_CASE("cli: predict on a FASTA agrees with eval on the same genomes") {
  TempDir dir;
  // 60 labelled genomes in 3 classes (a class motif in random sequence) and 2 without metadata
  gf::Rng rng(5, "fasta");
  const char* bases = "ACGT";
  const char* motif[] = {"AAAAAAAAA", "CCCCCCCCC", "GGGGGGGGG"};
  std::string fasta, meta = "strain\tv\n";
  std::map<std::string, std::string> label;
  for (int i = 0; i < 62; ++i) {
    std::string seq;
    for (int j = 0; j < 60; ++j) seq += bases[rng.below(4)];
    std::string id = "g" + std::to_string(i);
    if (i < 60) {
      seq.replace(static_cast<size_t>(3 * rng.below(15)), 9, motif[i % 3]);
      label[id] = std::string(1, "ABC"[i % 3]);
      meta += id + "\t" + label[id] + "\n";
    }
    fasta += ">" + id + " genome\n" + seq.substr(0, 30) + "\n" + seq.substr(30) + "\n";
  }
  gf::write_file(dir.file("g.fa.gz"), fasta, true);
  gf::write_file(dir.file("m.tsv"), meta);
  std::ofstream(dir.file("run.yaml"))
      << "name: f\nseed: 2\nthreads: 1\n"
         "data: {plugin: fasta_variants, fasta: g.fa.gz, metadata: m.tsv, label_column: v, k: 3, "
         "stride: 3, val_ratio: 0.2, test_ratio: 0.2}\n"
         "model: {d_model: 16, layers: 1, max_len: 24, attention: {plugin: mha, heads: 2, head: "
         "{plugin: dot_product}}}\noptimizer: {plugin: adamw, lr: 0.01}\n"
         "train: {steps: 30, batch_size: 8, warmup: 2, eval_every: 15, log_every: 10}\n";
  std::string out = dir.file("out.txt");
  Cli t = run_cli("train " + dir.file("run.yaml") + " --run-dir " + dir.file("run") + " -q", out);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  std::string best = dir.file("run/checkpoints/best.safetensors");
  Cli e = run_cli("eval " + best + " --split all --json", out);
  REQUIRE_MESSAGE(e.status == 0, e.output);
  json ej = json::parse(e.output);
  REQUIRE(ej["examples"] == 60);
  Cli p = run_cli(
      "predict " + best + " " + dir.file("g.fa.gz") + " --out " + dir.file("p.tsv") + " -q", out);
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::ifstream in(dir.file("p.tsv"));
  std::string line;
  std::getline(in, line);
  std::vector<std::vector<size_t>> confusion(3, std::vector<size_t>(3, 0));
  size_t rows = 0;
  while (std::getline(in, line)) {
    auto f = gf::split_fields(line);
    ++rows;
    if (!label.count(f[0])) continue;
    confusion[static_cast<size_t>(label[f[0]][0] - 'A')][static_cast<size_t>(f[1][0] - 'A')]++;
  }
  CHECK(rows == 62);  // one row per genome, labelled or not
  CHECK(json(confusion) == ej["confusion"]);

  // the checkpoint alone: the training FASTA and metadata gone, the same rows from a copy
  fs::copy_file(dir.file("g.fa.gz"), dir.file("new.fa.gz"));
  fs::rename(dir.file("g.fa.gz"), dir.file("g.moved"));
  fs::rename(dir.file("m.tsv"), dir.file("m.moved"));
  Cli p2 = run_cli(
      "predict " + best + " " + dir.file("new.fa.gz") + " --out " + dir.file("p2.tsv") + " -q",
      out);
  REQUIRE_MESSAGE(p2.status == 0, p2.output);
  CHECK(text_of(dir.file("p2.tsv")) == text_of(dir.file("p.tsv")));
}
