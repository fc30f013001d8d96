// text_tsv: text classification from files with a header row (TSV, CSV with quoted fields) or
// JSON lines, plain or gzip (text_table.hpp reads them). Splits come from separate files or are
// carved from the training file by ratio and seed; tokens are UTF-8 bytes (char), words with a
// vocabulary built from the training split only, or integer token ids given in the text (ids).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <growformer/config.hpp>
#include <growformer/data/io.hpp>
#include <growformer/data/split.hpp>
#include <growformer/dataset.hpp>
#include <growformer/json_text.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>
#include <growformer/rng.hpp>
#include <growformer/tokenizer_fields.hpp>
#include <map>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "text_table.hpp"

namespace {

constexpr int32_t kPad = 0;
constexpr int32_t kUnk = 1;

struct Row {
  std::vector<int32_t> ids;        // char tokens (tokenised while reading)
  std::vector<std::string> words;  // word tokens (mapped once the vocabulary exists)
  std::string label;
  size_t line = 0;
};

struct FileRows {
  std::string path;
  std::vector<Row> rows;
};

/// The options of `text_tsv`, each declared once (`table()`): its own, and the data library's
/// split options (`split_seed` into `seed`).
struct Settings : gf::SplitSettings {
  std::string train, val, test;
  gf_text::Format format = gf_text::Format::Auto;
  std::string delimiter;   // "" = the format's own or sniffed
  int64_t num_tokens = 0;  // ids: how many token ids (0 = the training split's largest + 1)
  std::string text_column, label_column, label_type, tokenizer;
  bool lowercase = true, split_punct = false, strip_html = false;
  int64_t min_freq = 1, max_vocab = 0, max_len = 0, subsample = 0;
  std::vector<std::string> class_names;  // display names by class id (empty = the labels)
  // a tokenizer saved with a checkpoint (DatasetBuild::tokenizer): its vocabulary and labels
  bool restored = false;
  bool label_int = false;
  std::vector<std::string> labels, vocab;
  std::string only;  // with a saved tokenizer: the one split wanted (DatasetBuild::only)

  static const gf::OptionTable<Settings>& table();
  /// The saved tokenizer: what shapes the tokens and labels, so new data is tokenised exactly
  /// as the training data was.
  static const gf::TokenizerFields<Settings>& saved() {
    using S = Settings;
    static const auto t =
        gf::TokenizerFields<S>("text_tsv")
            .add("tokenizer", &S::tokenizer)
            .add("lowercase", &S::lowercase)
            .add("split_punct", &S::split_punct)
            .add("strip_html", &S::strip_html)
            .add("max_len", &S::max_len)
            .add("label_int", &S::label_int)
            .add("labels", &S::labels)
            .add("class_names", &S::class_names)
            .add("vocab", &S::vocab, [](const S& s) { return s.tokenizer == "word"; })
            .add("num_tokens", &S::num_tokens, [](const S& s) { return s.tokenizer == "ids"; });
    return t;
  }
};

bool parse_int(const std::string& s, long long& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

std::string preprocess(std::string text, const Settings& s) {
  if (s.strip_html) {
    // tags such as <br /> become a space; a '<' that opens no short tag stays
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '<') {
        size_t close = text.find('>', i);
        if (close != std::string::npos && close - i <= 32 && text.find('<', i + 1) > close) {
          out.push_back(' ');
          i = close;
          continue;
        }
      }
      out.push_back(text[i]);
    }
    text.swap(out);
  }
  if (s.lowercase) {
    for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return text;
}

std::vector<std::string> split_words(const std::string& text, bool split_punct, size_t max_len) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&]() {
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  for (char c : text) {
    if (max_len && out.size() >= max_len) break;  // a mark may have gone one past: cut below
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isspace(u)) {
      flush();
    } else if (split_punct && u < 128 && std::ispunct(u)) {
      flush();
      out.emplace_back(1, c);
    } else {
      cur.push_back(c);
    }
  }
  flush();
  if (max_len && out.size() > max_len) out.resize(max_len);
  return out;
}

// The most token ids `tokenizer: ids` takes (an embedding row each).
constexpr int64_t kMaxIds = int64_t(1) << 24;

// The integer token ids of TEXT (separated by white space), at most MAX_LEN (0: all); "" or
// what is wrong.
std::string parse_ids(const std::string& text, size_t max_len, std::vector<int32_t>& out) {
  std::istringstream in(text);
  std::string tok;
  while (in >> tok && (!max_len || out.size() < max_len)) {
    long long v;
    if (!parse_int(tok, v) || v < 0)
      return "token `" + tok.substr(0, 40) + "` is not a token id (an integer >= 0)";
    if (v >= kMaxIds)
      return "token id " + tok + " is not below " + std::to_string(kMaxIds) +
             ", the most ids tokenizer: ids takes (number the tokens 0, 1, ... densely)";
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) return "no token ids (an example needs at least one)";
  return "";
}

// An id of a model over NUM_TOKENS ids; "" or what is wrong.
std::string check_id(int32_t id, int64_t num_tokens, bool from_option) {
  if (id < num_tokens) return "";
  return "token id " + std::to_string(id) + " is not below " + std::to_string(num_tokens) +
         ", the number of token ids (" +
         (from_option ? std::string("the num_tokens option")
                      : "the training split's largest id + 1; set num_tokens for more") +
         ")";
}

gf_text::TableSpec table_spec(const Settings& s) {
  gf_text::TableSpec t;
  t.format = s.format;
  t.delimiter = s.delimiter;
  t.text_column = s.text_column;
  t.label_column = s.label_column;
  t.ids_as_text = s.tokenizer == "ids";
  return t;
}

class TextTsv : public gf::Dataset {
 public:
  explicit TextTsv(Settings s) : s_(std::move(s)) {}

  std::string describe() const override {
    std::ostringstream os;
    os << "text_tsv(train=" << s_.train;
    if (!s_.val.empty()) os << ", val=" << s_.val;
    if (!s_.test.empty()) os << ", test=" << s_.test;
    if (s_.format != gf_text::Format::Auto) os << ", format=" << gf_text::format_name(s_.format);
    os << ", tokenizer=" << s_.tokenizer << ", max_len=" << s_.max_len << ")";
    return os.str();
  }

  gf::DataSplits load() override {
    // With a saved tokenizer the vocabulary and classes need no training rows, so when one
    // split is wanted only its file is read (the training file too when the split is carved
    // from it).
    auto wanted = [&](const char* split) {
      return !s_.restored || s_.only.empty() || s_.only == split;
    };
    bool read_train = wanted("train") || (s_.only == "val" && s_.val.empty()) ||
                      (s_.only == "test" && s_.test.empty());
    FileRows train, val, test;
    train.path = s_.train;
    if (read_train) train = read_file(s_.train);
    if (!s_.val.empty() && wanted("val")) val = read_file(s_.val);
    if (!s_.test.empty() && wanted("test")) test = read_file(s_.test);
    if (read_train) carve(train, val, test);

    for (auto* f : {&train, &val, &test}) {
      const char* split = f == &train ? "train" : f == &val ? "val" : "test";
      if (!wanted(split)) continue;
      if (f->rows.empty()) {
        throw gf::ConfigError(std::string("text_tsv: split `") + split + "` is empty (from " +
                              f->path + "); give a file or a ratio that leaves examples");
      }
    }

    gf::DataSplits d;
    d.pad_id = kPad;
    map_labels(train, val, test, d);
    if (s_.tokenizer == "ids") {
      id_vocab(train, d);
    } else if (s_.tokenizer == "char") {
      d.vocab_size = 258;
      d.vocab = {"<pad>", "<unk>"};
      for (int b = 0; b < 256; ++b) {
        if (b >= 32 && b < 127) {
          d.vocab.emplace_back(1, static_cast<char>(b));
        } else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", b);
          d.vocab.emplace_back(buf);
        }
      }
    } else {
      build_vocab(train, d);
    }
    std::unordered_map<std::string, int32_t> index;
    for (size_t i = 2; i < d.vocab.size(); ++i) index.emplace(d.vocab[i], static_cast<int32_t>(i));
    emit(train, d.train, index, d);
    emit(val, d.val, index, d);
    emit(test, d.test, index, d);
    // inputs to predict on are tokenised with this vocabulary and these classes from now on,
    // and they are what the checkpoint saves
    if (s_.tokenizer == "word") s_.vocab = d.vocab;
    if (s_.tokenizer == "ids") s_.num_tokens = num_tokens_;
    s_.label_int = label_int_;
    s_.labels = labels_;
    s_.class_names = d.class_names;
    d.tokenizer = Settings::saved().save(s_);
    loaded_ = true;
    return d;
  }

  // Prediction input: a file of texts (TSV or CSV with a header holding text_column, JSON
  // lines with that key, or plain text, one text per line); the id is column (key) `id` when
  // present, else the line number. Other columns (a label, say) are ignored.
  std::unique_ptr<gf::RecordReader> open_records(const std::string& path) override {
    require_vocabulary();
    class Reader : public gf::RecordReader {
     public:
      Reader(const TextTsv& ds, const std::string& path)
          : ds_(ds), in_(path, table_spec(ds.s_), false) {}
      bool next(gf::Record& r) override {
        gf_text::TextRow row;
        if (!in_.next(row)) return false;
        r = gf::Record();
        r.line = row.line;
        r.id = row.has_id ? row.id : std::to_string(row.line);
        r.error = std::move(row.error);
        if (r.error.empty()) r.error = ds_.record_tokens(std::move(row.text), r.tokens);
        if (!r.error.empty()) r.tokens.clear();
        return true;
      }

     private:
      const TextTsv& ds_;
      gf_text::TextTable in_;
    };
    index_vocabulary();
    return std::make_unique<Reader>(*this, path);
  }

  // Strings to predict on: each the text of one record.
  std::unique_ptr<gf::RecordReader> open_strings(const std::vector<std::string>& inputs) override {
    require_vocabulary();
    class Reader : public gf::RecordReader {
     public:
      Reader(const TextTsv& ds, const std::vector<std::string>& inputs)
          : ds_(ds), inputs_(inputs) {}
      bool next(gf::Record& r) override {
        if (at_ >= inputs_.size()) return false;
        r = gf::Record();
        r.line = at_ + 1;
        r.id = std::to_string(at_);
        r.error = ds_.record_tokens(inputs_[at_++], r.tokens);
        if (!r.error.empty()) r.tokens.clear();
        return true;
      }

     private:
      const TextTsv& ds_;
      const std::vector<std::string>& inputs_;
      size_t at_ = 0;
    };
    index_vocabulary();
    return std::make_unique<Reader>(*this, inputs);
  }

 private:
  Settings s_;
  std::unordered_map<std::string, int32_t> vocab_index_;  // word -> id of records to predict on
  std::map<std::string, int32_t> class_of_;
  std::vector<std::string> labels_;  // label spellings by class id
  bool label_int_ = false;
  int64_t num_tokens_ = 0;  // ids: how many token ids
  bool loaded_ = false;     // load() ran: the vocabulary is known

  void require_vocabulary() const {
    if (!s_.restored && !loaded_ && s_.tokenizer != "char")
      throw gf::ConfigError("text_tsv: " + s_.tokenizer +
                            " tokens need the vocabulary of the "
                            "training data (load the data first, or a checkpoint)");
  }
  void index_vocabulary() {
    vocab_index_.clear();
    for (size_t i = 2; i < s_.vocab.size(); ++i)
      vocab_index_.emplace(s_.vocab[i], static_cast<int32_t>(i));
  }

  // The tokens of a record's TEXT into OUT, as the training texts were tokenised; "" or what is
  // wrong.
  std::string record_tokens(std::string text, std::vector<int32_t>& out) const {
    size_t max_len = static_cast<size_t>(s_.max_len);
    if (s_.tokenizer == "ids") {
      std::string e = parse_ids(text, max_len, out);
      for (size_t i = 0; e.empty() && i < out.size(); ++i)
        e = check_id(out[i], s_.num_tokens, false);
      return e;
    }
    text = preprocess(std::move(text), s_);
    if (s_.tokenizer == "char") {
      size_t n = max_len ? std::min(max_len, text.size()) : text.size();
      for (size_t i = 0; i < n; ++i) out.push_back(2 + static_cast<unsigned char>(text[i]));
    } else {
      for (const auto& w : split_words(text, s_.split_punct, max_len)) {
        auto t = vocab_index_.find(w);
        out.push_back(t == vocab_index_.end() ? kUnk : t->second);
      }
    }
    if (out.empty()) out.push_back(kUnk);  // as in training
    return "";
  }

  FileRows read_file(const std::string& path) {
    FileRows f;
    f.path = path;
    gf_text::TextTable in(path, table_spec(s_), true);
    gf_text::TextRow row;
    while (in.next(row)) {
      if (!row.error.empty()) gf::data_error(path, row.line, row.error);
      Row r;
      r.line = row.line;
      r.label = std::move(row.label);
      if (r.label.empty()) gf::data_error(path, r.line, "empty label");
      std::string error = tokenize(std::move(row.text), r);
      if (!error.empty()) gf::data_error(path, r.line, error);
      f.rows.push_back(std::move(r));
    }
    if (s_.subsample > 0 && f.rows.size() > static_cast<size_t>(s_.subsample)) {
      shuffle(f.rows, "subsample:" + path);
      f.rows.resize(static_cast<size_t>(s_.subsample));
    }
    return f;
  }

  // The tokens of a training text into R (char and ids: R.ids; word: R.words); "" or what is wrong.
  std::string tokenize(std::string text, Row& r) const {
    size_t max_len = static_cast<size_t>(s_.max_len);
    if (s_.tokenizer == "ids") return parse_ids(text, max_len, r.ids);
    text = preprocess(std::move(text), s_);
    if (s_.tokenizer == "char") {
      size_t n = max_len ? std::min(max_len, text.size()) : text.size();
      r.ids.resize(n);
      for (size_t i = 0; i < n; ++i) r.ids[i] = 2 + static_cast<unsigned char>(text[i]);
    } else {
      r.words = split_words(text, s_.split_punct, max_len);
    }
    return "";
  }

  // ids: the number of token ids N (saved, the option, or the training split's largest + 1);
  // ids 0..N-1 are the tokens, N the padding.
  void id_vocab(const FileRows& train, gf::DataSplits& d) {
    if (s_.restored || s_.num_tokens > 0) {
      num_tokens_ = s_.num_tokens;
    } else {
      int32_t top = 0;
      for (const auto& r : train.rows)
        for (int32_t t : r.ids) top = std::max(top, t);
      num_tokens_ = int64_t(top) + 1;
    }
    d.vocab.clear();  // the ids are their own text: no vocabulary to keep
    d.vocab_size = static_cast<size_t>(num_tokens_) + 1;
    d.pad_id = static_cast<int32_t>(num_tokens_);
  }

  void shuffle(std::vector<Row>& rows, const std::string& stream) {
    gf::Rng rng(s_.seed, "text_tsv." + stream);
    gf::seeded_shuffle(rows, rng);
  }

  // Splits missing val/test out of the training rows: a seeded shuffle, then
  // test first, val next, the rest stays train.
  void carve(FileRows& train, FileRows& val, FileRows& test) {
    bool need_val = s_.val.empty(), need_test = s_.test.empty();
    if (!need_val && !need_test) return;
    shuffle(train.rows, "split");
    size_t n = train.rows.size();
    size_t n_test = need_test ? gf::ratio_count(n, s_.test_ratio) : 0;
    size_t n_val = need_val ? gf::ratio_count(n, s_.val_ratio) : 0;
    if (n_test + n_val > n) n_test = n_val = 0;  // empty-split error below names it
    auto take = [&](FileRows& dst, size_t count) {
      dst.path = train.path + " (" + std::to_string(count) + " rows carved by ratio)";
      dst.rows.assign(std::make_move_iterator(train.rows.end() - count),
                      std::make_move_iterator(train.rows.end()));
      train.rows.resize(train.rows.size() - count);
    };
    if (need_test) take(test, n_test);
    if (need_val) take(val, n_val);
    // the remaining training rows go back to file order (stable across ratios)
    std::sort(train.rows.begin(), train.rows.end(),
              [](const Row& a, const Row& b) { return a.line < b.line; });
  }

  void map_labels(FileRows& train, FileRows& val, FileRows& test, gf::DataSplits& d) {
    bool as_int = s_.label_type == "int";
    if (s_.restored) {
      as_int = s_.label_int;
    } else if (s_.label_type == "auto") {
      long long v;
      as_int = parse_int(train.rows.front().label, v);
    }
    label_int_ = as_int;
    if (as_int) {  // "01" and "1" name the same class
      for (auto* f : {&train, &val, &test}) {
        for (auto& r : f->rows) {
          long long v;
          if (!parse_int(r.label, v)) {
            gf::data_error(f->path, r.line,
                           "label `" + r.label + "` in column `" + s_.label_column +
                               "` is not an integer (labels are integers in this data set; set "
                               "label_type: string for named classes)");
          }
          r.label = std::to_string(v);
        }
      }
    }
    if (s_.restored) {  // the checkpoint's classes, in its order
      for (size_t i = 0; i < s_.labels.size(); ++i)
        class_of_[s_.labels[i]] = static_cast<int32_t>(i);
      labels_ = s_.labels;
      d.class_names = s_.class_names;
      d.num_classes = s_.labels.size();
      return;
    }
    std::vector<std::string> names;
    for (const auto& r : train.rows) names.push_back(r.label);
    std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
      return as_int ? std::stoll(a) < std::stoll(b) : a < b;
    });
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (size_t i = 0; i < names.size(); ++i) class_of_[names[i]] = static_cast<int32_t>(i);
    labels_ = names;
    d.class_names = names;
    d.num_classes = names.size();
    if (d.num_classes < 2) {
      throw gf::ConfigError("text_tsv: " + train.path + ": the training split has only " +
                            std::to_string(d.num_classes) + " class(es) in column `" +
                            s_.label_column + "`");
    }
    if (!s_.class_names.empty()) {
      if (s_.class_names.size() != names.size()) {
        std::string found;
        for (const auto& n : names) found += (found.empty() ? "" : ", ") + n;
        throw gf::ConfigError("text_tsv: class_names lists " +
                              std::to_string(s_.class_names.size()) + " names but " + train.path +
                              " has " + std::to_string(names.size()) + " classes (" + found + ")");
      }
      d.class_names = s_.class_names;
    }
  }

  void build_vocab(const FileRows& train, gf::DataSplits& d) {
    if (s_.restored) {
      d.vocab = s_.vocab;
      d.vocab_size = d.vocab.size();
      return;
    }
    std::unordered_map<std::string, size_t> freq;
    for (const auto& r : train.rows) {
      for (const auto& w : r.words) ++freq[w];
    }
    std::vector<std::pair<std::string, size_t>> items;
    for (auto& kv : freq) {
      if (kv.second >= static_cast<size_t>(s_.min_freq)) items.emplace_back(kv.first, kv.second);
    }
    std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    if (s_.max_vocab > 0 && items.size() + 2 > static_cast<size_t>(s_.max_vocab)) {
      items.resize(static_cast<size_t>(std::max<int64_t>(s_.max_vocab - 2, 0)));
    }
    d.vocab = {"<pad>", "<unk>"};
    for (auto& it : items) d.vocab.push_back(it.first);
    d.vocab_size = d.vocab.size();
  }

  void emit(FileRows& f, std::vector<gf::Example>& out,
            const std::unordered_map<std::string, int32_t>& index, gf::DataSplits& d) {
    out.reserve(f.rows.size());
    for (auto& r : f.rows) {
      auto it = class_of_.find(r.label);
      if (it == class_of_.end()) {
        std::string known;
        for (const auto& l : labels_) known += (known.empty() ? "" : ", ") + l;
        gf::data_error(f.path, r.line,
                       "label `" + r.label + "` " +
                           (s_.restored ? "is not one of the checkpoint's classes (" + known + ")"
                                        : std::string("does not occur in the training split")));
      }
      gf::Example e;
      e.label = it->second;
      if (s_.tokenizer == "ids") {
        for (int32_t t : r.ids) {
          std::string bad = check_id(t, num_tokens_, !s_.restored && s_.num_tokens > 0);
          if (!bad.empty()) gf::data_error(f.path, r.line, bad);
        }
        e.tokens = std::move(r.ids);
      } else if (s_.tokenizer == "char") {
        e.tokens = std::move(r.ids);
      } else {
        e.tokens.reserve(r.words.size());
        for (const auto& w : r.words) {
          auto t = index.find(w);
          e.tokens.push_back(t == index.end() ? kUnk : t->second);
        }
        std::vector<std::string>().swap(r.words);
      }
      // an empty text still needs one position for the model to pool over
      if (e.tokens.empty()) e.tokens.push_back(kUnk);
      d.max_len = std::max(d.max_len, e.tokens.size());
      out.push_back(std::move(e));
    }
    std::vector<Row>().swap(f.rows);
  }
};

/// The choices of a string option that is read as it is written.
std::vector<std::pair<std::string, std::string>> words(std::initializer_list<const char*> names) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* n : names) out.emplace_back(n, n);
  return out;
}

const gf::OptionTable<Settings>& Settings::table() {
  using S = Settings;
  using gf_text::Format;
  static const auto t =
      gf::OptionTable<S>()
          .add("train", &S::train, "",
               "training file (TSV, CSV or JSON lines; plain or .gz), a header row first in TSV "
               "and CSV")
          .add("val", &S::val, "~", "validation file; absent = carve val_ratio from train")
          .add("test", &S::test, "~", "test file; absent = carve test_ratio from train")
          .choice(
              "format", &S::format, "auto",
              "auto: by the extension (.tsv, .csv, .jsonl; .txt inputs to predict are one text per "
              "line), else sniffed from the first line; tsv: tab-separated, no quoting; "
              "csv: RFC 4180 quoting (delimiter below, default comma); "
              "jsonl: one JSON object per line; lines: one text per line (inputs to predict only)",
              {{"auto", Format::Auto},
               {"tsv", Format::Tsv},
               {"csv", Format::Csv},
               {"jsonl", Format::Jsonl},
               {"lines", Format::Lines}})
          .add("delimiter", &S::delimiter, "~",
               "the field delimiter of a CSV file (one character; `tab` for a tab); set, an auto "
               "file is read as CSV with it; absent = the format's own, or sniffed from the header "
               "(tab , ; |)")
          .include(gf::SplitSettings::table("training rows", "the ratio split and subsample", true))
          .add("text_column", &S::text_column, "sentence",
               "header name (JSON key) of the text column")
          .add("label_column", &S::label_column, "label",
               "header name (JSON key) of the label column")
          .choice("label_type", &S::label_type, "auto",
                  "int: labels must be integers; string: any text; auto: int when the first label "
                  "is one",
                  words({"auto", "int", "string"}))
          .choice(
              "tokenizer", &S::tokenizer, "word",
              "char: UTF-8 bytes (ids 2..257); word: whitespace words, vocabulary from train; ids: "
              "the text is integer token ids separated by spaces (a JSON list in JSON lines), the "
              "padding id one past the largest",
              words({"char", "word", "ids"}))
          .add("num_tokens", &S::num_tokens, "0",
               "ids: how many token ids there are (ids 0..num_tokens-1; 0 = the training split's "
               "largest id + 1)",
               0, double(kMaxIds))
          .add("lowercase", &S::lowercase, "true", "lower-case ASCII letters before tokenising")
          .add("split_punct", &S::split_punct, "false",
               "word: ASCII punctuation marks become own tokens")
          .add("strip_html", &S::strip_html, "false",
               "replace short tags such as <br /> by a space")
          .add("min_freq", &S::min_freq, "1", "word: keep words seen at least this often in train",
               1)
          .add("max_vocab", &S::max_vocab, "0",
               "word: vocabulary size cap incl. <pad>,<unk> (0 = none)", 0)
          .add("max_len", &S::max_len, "512",
               "truncate each text to this many tokens (0 = no limit)", 0)
          .add("subsample", &S::subsample, "0",
               "keep a seeded random subset of this many rows per file (0 = all)", 0)
          .add("class_names", &S::class_names, "[]",
               "display names of the classes in label order (integers ascending, else sorted)");
  return t;
}

std::unique_ptr<gf::Dataset> make(const gf::Options& o, const gf::DatasetBuild& b) {
  Settings s;
  s.seed = b.seed;  // unless split_seed is given
  s = Settings::table().read(o, std::move(s));
  s.train = o.resolve_path(s.train);
  s.val = o.resolve_path(s.val);  // "" (not given) stays ""
  s.test = o.resolve_path(s.test);
  if (s.val.empty() && s.test.empty() && s.val_ratio + s.test_ratio >= 1.0) {
    o.fail("test_ratio", "val_ratio + test_ratio must leave training rows (sum < 1)");
  }
  if (o.has_value("delimiter")) {
    if (s.delimiter == "tab") s.delimiter = "\t";
    if (s.delimiter.size() != 1 || s.delimiter == "\"" || s.delimiter == "\n" ||
        s.delimiter == "\r")
      o.fail("delimiter",
             "is one character (`,`, `;`, `|`, or tab as \"\\t\" or `tab`), not a quote or "
             "a line break; got `" +
                 s.delimiter + "`");
    if (s.format == gf_text::Format::Tsv && s.delimiter != "\t")
      o.fail("delimiter",
             "format tsv is split at tabs; for another delimiter use format: csv (or auto)");
    if (s.format == gf_text::Format::Jsonl || s.format == gf_text::Format::Lines)
      o.fail("delimiter",
             std::string("format ") + gf_text::format_name(s.format) + " has no delimiter");
  }
  if (s.max_vocab > 0 && s.max_vocab < 3) o.fail("max_vocab", "must be 0 (no limit) or >= 3");
  if (s.text_column == s.label_column) o.fail("label_column", "must differ from text_column");
  if (s.num_tokens > 0 && s.tokenizer != "ids")
    o.fail("num_tokens", "is an option of tokenizer: ids");
  if (!b.tokenizer.empty()) {
    Settings::saved().load(b.tokenizer, s);
    s.restored = true;
    s.only = b.only;
  }
  return std::make_unique<TextTsv>(std::move(s));
}

void register_components(gf::Registry& r) {
  r.add_dataset({"text_tsv",
                 "text classification from TSV, CSV or JSON lines files (char, word or id tokens)",
                 Settings::table().specs()},
                make, gf_text::text_formats(Settings::table().specs()));
}

}  // namespace

GROWFORMER_PLUGIN("text_tsv", "0.1.0", register_components)
