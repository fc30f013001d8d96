// Strings handed to Experiment.predict (and tokenize) from Python, tokenised as the module does
// (python/src/module.cpp, tokenize_strings): each string one JSON lines record {"sentence": TEXT}
// of a text_tsv model, read back through the dataset's record reader with the model's tokenizer,
// either the one its training data built or the one a checkpoint saved (a model loaded with
// data='none'). The first byte picks the tokenizer and its options; the rest is the strings,
// cut at "\n%%\n". Every string must come back as one record: a record error, or token ids of
// the model's vocabulary (not the pad id), at most max_len of them.
#define GF_FUZZ_LINKED_PLUGIN
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "growformer/dataset.hpp"
#include "growformer/json_text.hpp"

namespace {

struct Model {
  std::shared_ptr<gf::Dataset> ds;  // what open_records runs on
  gf::DataSplits d;                 // the training data's vocabulary and pad id
  int64_t max_len = 0;
};

// Training rows for each tokenizer: words with HTML, punctuation, bytes beyond ASCII, ids.
const char* const kTextTrain =
    "sentence\tlabel\n"
    "The film was <b>great</b>, truly great!\tpos\n"
    "a dull, slow film<br />not great\tneg\n"
    "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 fine\tpos\n"
    "WORST. FILM. EVER?\tneg\n"
    "so-so (at best); ok\tneg\n"
    "great great fun\tpos\n";
const char* const kIdsTrain =
    "sentence\tlabel\n"
    "0 1 2 3\tpos\n"
    "4 5 6\tneg\n"
    "7 8 9 10 11\tpos\n"
    "2 2 3\tneg\n";

// The model of MODE (its low 6 bits), built once: bits 0-1 the tokenizer (char, word, ids),
// bit 2 strip_html and split_punct, bit 3 lowercase off, bits 4-5 max_len (0, 3, 16, 512);
// bit 6 a model loaded from its checkpoint's saved tokenizer.
const Model& model(uint8_t mode) {
  static std::map<uint8_t, std::unique_ptr<Model>> models;
  mode &= 0x7f;
  auto it = models.find(mode);
  if (it != models.end()) return *it->second;
  static const char* const tokenizers[] = {"char", "word", "ids", "word"};
  static const int64_t max_lens[] = {0, 3, 16, 512};
  const std::string tok = tokenizers[mode & 3];
  auto m = std::make_unique<Model>();
  m->max_len = max_lens[(mode >> 4) & 3];
  std::string train = gf_fuzz::put("train_" + tok + ".tsv", tok == "ids" ? kIdsTrain : kTextTrain);
  std::string yaml = "plugin: text_tsv\ntrain: " + train + "\ntokenizer: " + tok +
                     "\nval_ratio: 0.2\ntest_ratio: 0.2\nmax_len: " + std::to_string(m->max_len) +
                     "\n";
  if (mode & 4) yaml += "strip_html: true\nsplit_punct: true\n";
  if (mode & 8) yaml += "lowercase: false\n";
  gf::Registry& reg = gf_fuzz::linked_plugin_registry();
  gf::ConfigNode node = gf::ConfigNode::load_string(yaml);
  m->ds = reg.create_dataset(node, gf::DatasetBuild{1});
  m->d = m->ds->load();
  if (mode & 0x40) {  // as Experiment loads a checkpoint for predict only: no data read
    m->ds =
        reg.create_dataset(gf::ConfigNode::load_string(yaml), gf::DatasetBuild{1, m->d.tokenizer});
  }
  return *models.emplace(mode, std::move(m)).first->second;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Model& m = model(data[0]);
  std::vector<std::string> texts = gf_fuzz::split(data + 1, size - 1, 64);
  while (!texts.empty() && texts.back().empty()) texts.pop_back();
  // the module refuses blank strings (naming the input) before writing them
  std::vector<std::string> kept;
  for (std::string& t : texts)
    if (t.find_first_not_of(" \t\n\r") != std::string::npos) kept.push_back(std::move(t));
  std::string lines;
  for (const std::string& t : kept) lines += gf::dump_json(nlohmann::json{{"sentence", t}}) + "\n";
  const std::string path = gf_fuzz::put("inputs.jsonl", lines);
  size_t records = 0;
  gf_fuzz::expect_clean([&] {
    auto reader = m.ds->open_records(path);
    gf::Record r;
    while (reader->next(r)) {
      ++records;
      if (!r.error.empty()) continue;
      if (r.tokens.empty()) {
        std::fprintf(stderr, "input %zu: no tokens and no error\n", records - 1);
        std::abort();
      }
      if (m.max_len > 0 && r.tokens.size() > static_cast<size_t>(m.max_len)) {
        std::fprintf(stderr, "input %zu: %zu tokens, more than max_len %lld:", records - 1,
                     r.tokens.size(), static_cast<long long>(m.max_len));
        for (int32_t t : r.tokens)
          std::fprintf(stderr, " %d (%s)", t,
                       static_cast<size_t>(t) < m.d.vocab.size() ? m.d.vocab[t].c_str() : "?");
        std::fprintf(stderr, "\n");
        std::abort();
      }
      for (int32_t t : r.tokens)
        if (t < 0 || static_cast<size_t>(t) >= m.d.vocab_size || t == m.d.pad_id) {
          std::fprintf(stderr,
                       "input %zu: token %d is not an id of the vocabulary (size %zu, pad %d)\n",
                       records - 1, t, m.d.vocab_size, static_cast<int>(m.d.pad_id));
          std::abort();
        }
    }
    // the module refuses a reader that gives another count than the strings it was handed
    if (records != kept.size()) {
      std::fprintf(stderr, "%zu strings came back as %zu records\n", kept.size(), records);
      std::abort();
    }
  });
  return 0;
}
