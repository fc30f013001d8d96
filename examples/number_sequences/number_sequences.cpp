// number_sequences: an out-of-tree dataset plugin. Classification of sequences of real numbers
// (sensor traces, spectra, any numeric features) from CSV files of numbers, one example per line:
//
//   label,x1,x2,...,xn        (n may differ from line to line; lines starting with # are skipped)
//
// Each number becomes a token: its bin among `bins` equal bins between the smallest and the
// largest number of the training split (token = 1 + bin; 0 pads). Splits come from separate files
// or are carved from the training file by ratio and seed.
//
// Besides its files it tells the front ends (growformer/dataset.hpp's DataFormats) what else it
// reads, so nothing outside this folder names it:
//   - number sequences given in memory (Python lists, 2-D arrays, a DataFrame of number columns
//     with a label column) are written as its CSV files (gf.train(data=...), evaluate(data=...));
//   - a labelled CSV file is its test split (`growformer eval CK --data FILE`, evaluate(FILE));
//   - records to predict on are lines of numbers without a label (`growformer predict CK FILE`,
//     and the module's predict of numbers).
// Its saved tokenizer (the bins and the classes) is declared once (TokenizerFields).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <growformer/config.hpp>
#include <growformer/dataset.hpp>
#include <growformer/fields.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>
#include <growformer/rng.hpp>
#include <growformer/tokenizer_fields.hpp>

namespace {

struct Settings {
  std::string train, val, test;
  int64_t bins = 16, max_len = 0;
  double val_ratio = 0.1, test_ratio = 0.1;
  std::string label_column;
  uint64_t seed = 0;
  // the saved tokenizer: the bins' range and the classes
  double lo = 0, hi = 0;
  std::vector<std::string> classes;
  bool restored = false;
  std::string only;  // with a saved tokenizer: the one split wanted

  static const gf::OptionTable<Settings>& table() {
    using S = Settings;
    static const auto t =
        gf::OptionTable<S>()
            .add("train", &S::train, "", "training CSV: label,x1,x2,... per line")
            .add("val", &S::val, "~", "validation CSV; absent = carve val_ratio from train")
            .add("test", &S::test, "~", "test CSV; absent = carve test_ratio from train")
            .add("bins", &S::bins, "16", "equal bins over the training split's range (tokens)", 2,
                 65535)
            .add("max_len", &S::max_len, "0", "numbers kept per row (0 = all)", 0)
            .add("val_ratio", &S::val_ratio, "0.1", "share of train carved as val", 0, 0.9)
            .add("test_ratio", &S::test_ratio, "0.1", "share of train carved as test", 0, 0.9)
            .add("label_column", &S::label_column, "label",
                 "the label column of a DataFrame given in memory (the other columns are the "
                 "numbers)");
    return t;
  }
  static const gf::TokenizerFields<Settings>& saved() {
    using S = Settings;
    static const auto t = gf::TokenizerFields<S>("number_sequences")
                              .add("bins", &S::bins)
                              .add("lo", &S::lo)
                              .add("hi", &S::hi)
                              .add("max_len", &S::max_len)
                              .add("classes", &S::classes);
    return t;
  }
};

struct Row {
  std::string label;
  std::vector<double> values;
  std::string file;  // the file and line it was read from
  size_t line = 0;
};

[[noreturn]] void bad_line(const std::string& path, size_t line, const std::string& what) {
  throw gf::ConfigError(path + ":" + std::to_string(line) + ": " + what);
}

// The numbers of FIELDS from FIRST on; "" or what is wrong.
std::string parse_numbers(const std::vector<std::string>& fields, size_t first,
                          std::vector<double>& out) {
  for (size_t i = first; i < fields.size(); ++i) {
    const char* s = fields[i].c_str();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s, &end);
    while (end && (*end == ' ' || *end == '\t')) ++end;
    if (end == s || *end != '\0' || errno == ERANGE || !std::isfinite(v))
      return "field " + std::to_string(i + 1) + " `" + fields[i].substr(0, 40) +
             "` is not a finite number";
    out.push_back(v);
  }
  if (out.empty()) return "no numbers (a row needs at least one)";
  return "";
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  std::string x;
  while (std::getline(ss, x, ',')) f.push_back(x);
  if (!line.empty() && line.back() == ',') f.emplace_back();
  return f;
}

// The lines of PATH that hold data (not empty, not # comments), with their numbers.
template <class F>
void for_each_line(const std::string& path, F&& f) {
  std::ifstream in(path);
  if (!in) throw gf::ConfigError(path + ": cannot open the file");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line[0] == '#') continue;
    f(line, n);
  }
}

std::vector<Row> read_rows(const std::string& path) {
  std::vector<Row> rows;
  for_each_line(path, [&](const std::string& line, size_t n) {
    Row r;
    r.file = path;
    r.line = n;
    const std::vector<std::string> fields = split_csv(line);
    r.label = fields.empty() ? "" : fields[0];
    if (r.label.empty()) bad_line(path, n, "empty label (a row is label,x1,x2,...)");
    const std::string e = parse_numbers(fields, 1, r.values);
    if (!e.empty()) bad_line(path, n, e);
    rows.push_back(std::move(r));
  });
  return rows;
}

bool is_int(const std::string& s) {
  char* end = nullptr;
  std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && *end == '\0';
}

class NumberSequences : public gf::Dataset {
 public:
  explicit NumberSequences(Settings s) : s_(std::move(s)) {}

  std::string describe() const override {
    return "number_sequences(train=" + s_.train + ", bins=" + std::to_string(s_.bins) + ")";
  }

  gf::DataSplits load() override {
    auto wanted = [&](const std::string& split) {
      return !s_.restored || s_.only.empty() || s_.only == split;
    };
    const bool carve_val = s_.val.empty(), carve_test = s_.test.empty();
    const bool read_train =
        wanted("train") || (s_.only == "val" && carve_val) || (s_.only == "test" && carve_test);
    std::vector<Row> train, val, test;
    if (read_train) train = read_rows(s_.train);
    if (!carve_val && wanted("val")) val = read_rows(s_.val);
    if (!carve_test && wanted("test")) test = read_rows(s_.test);
    if (read_train) carve(train, carve_val ? &val : nullptr, carve_test ? &test : nullptr);
    if (!s_.restored) fit(train);
    gf::DataSplits d;
    d.pad_id = 0;
    d.vocab_size = static_cast<size_t>(s_.bins) + 1;
    d.num_classes = s_.classes.size();
    d.class_names = s_.classes;
    const std::pair<std::vector<Row>*, std::vector<gf::Example>*> parts[] = {
        {&train, &d.train}, {&val, &d.val}, {&test, &d.test}};
    for (const auto& [rows, out] : parts)
      for (const Row& r : *rows) {
        gf::Example e;
        e.label = class_of(r);
        e.tokens = tokens(r.values);
        d.max_len = std::max(d.max_len, e.tokens.size());
        out->push_back(std::move(e));
      }
    for (const char* split : {"train", "val", "test"}) {
      const auto& rows = std::string(split) == "train" ? d.train
                         : std::string(split) == "val" ? d.val
                                                       : d.test;
      if (wanted(split) && rows.empty())
        throw gf::ConfigError("number_sequences: split `" + std::string(split) +
                              "` is empty; give a file or a ratio that leaves rows");
    }
    d.tokenizer = Settings::saved().save(s_);
    return d;
  }

  // Records to predict on: lines of numbers (x1,x2,...) without a label; the id is the line.
  std::unique_ptr<gf::RecordReader> open_records(const std::string& path) override {
    class Reader : public gf::RecordReader {
     public:
      Reader(const NumberSequences& ds, const std::string& path) : ds_(ds) {
        for_each_line(path, [&](const std::string& line, size_t n) {
          gf::Record r;
          r.line = n;
          r.id = std::to_string(n);
          std::vector<double> values;
          r.error = parse_numbers(split_csv(line), 0, values);
          if (r.error.empty()) r.tokens = ds_.tokens(values);
          records_.push_back(std::move(r));
        });
      }
      bool next(gf::Record& r) override {
        if (at_ >= records_.size()) return false;
        r = std::move(records_[at_++]);
        return true;
      }

     private:
      const NumberSequences& ds_;
      std::vector<gf::Record> records_;
      size_t at_ = 0;
    };
    return std::make_unique<Reader>(*this, path);
  }

 private:
  Settings s_;

  // The range of the training numbers and the classes (integers in numeric order, else sorted).
  void fit(const std::vector<Row>& train) {
    s_.lo = s_.hi = train.front().values.front();
    std::vector<std::string> labels;
    bool ints = true;
    for (const Row& r : train) {
      for (double v : r.values) {
        s_.lo = std::min(s_.lo, v);
        s_.hi = std::max(s_.hi, v);
      }
      labels.push_back(r.label);
      ints = ints && is_int(r.label);
    }
    std::sort(labels.begin(), labels.end(), [&](const std::string& a, const std::string& b) {
      return ints ? std::stoll(a) < std::stoll(b) : a < b;
    });
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
    if (labels.size() < 2)
      throw gf::ConfigError("number_sequences: " + s_.train + ": the training split has " +
                            std::to_string(labels.size()) + " class; a classifier needs two");
    s_.classes = labels;
  }

  int32_t class_of(const Row& r) const {
    for (size_t c = 0; c < s_.classes.size(); ++c)
      if (s_.classes[c] == r.label) return static_cast<int32_t>(c);
    std::string known;
    for (const std::string& c : s_.classes) known += (known.empty() ? "" : ", ") + c;
    bad_line(
        r.file, r.line,
        "label `" + r.label + "` is not one of the classes of the training split (" + known + ")");
  }

  std::vector<int32_t> tokens(const std::vector<double>& values) const {
    const size_t n = s_.max_len > 0 ? std::min<size_t>(values.size(), s_.max_len) : values.size();
    std::vector<int32_t> out(n);
    const double width = s_.hi > s_.lo ? (s_.hi - s_.lo) / static_cast<double>(s_.bins) : 1.0;
    for (size_t i = 0; i < n; ++i) {
      const double b = std::floor((values[i] - s_.lo) / width);
      out[i] = 1 + static_cast<int32_t>(std::clamp(b, 0.0, double(s_.bins - 1)));
    }
    return out;
  }

  // Carves VAL and TEST (when asked for) from the end of a seeded shuffle of TRAIN.
  void carve(std::vector<Row>& train, std::vector<Row>* val, std::vector<Row>* test) {
    if (!val && !test) return;
    gf::Rng rng(s_.seed, "number_sequences.split");
    for (size_t i = train.size(); i > 1; --i) std::swap(train[i - 1], train[rng.below(i)]);
    const double total = static_cast<double>(train.size());
    auto take = [&](std::vector<Row>* dst, double ratio) {
      if (!dst) return;
      const size_t n = std::min(train.size(), static_cast<size_t>(std::llround(ratio * total)));
      dst->assign(train.end() - static_cast<long>(n), train.end());
      train.resize(train.size() - n);
    };
    take(test, s_.test_ratio);
    take(val, s_.val_ratio);
    std::sort(train.begin(), train.end(),
              [](const Row& a, const Row& b) { return a.line < b.line; });
  }
};

// ---- what it reads besides its files ------------------------------------------------------
class Formats : public gf::DataFormats {
 public:
  std::vector<std::string> kinds() const override { return {"numbers"}; }
  std::vector<std::string> file_options() const override { return {"train", "val", "test"}; }

  gf::DataColumns columns(const gf::ConfigNode& section, gf::StagePurpose) const override {
    gf::DataColumns c;
    c.input = {"*"};  // every column but the label's
    const bool set = section.valid() && section.is_map() && section.has("label_column");
    c.label = {set ? section.child("label_column").as_string() : std::string("label")};
    c.label_option = "label_column";
    c.label_set = set;
    return c;
  }

  // Rows as `label,x1,...` lines (for predict: `x1,...` records, read by open_records).
  gf::StagedData stage(const gf::MemoryData& data, const gf::ConfigNode&, const std::string& folder,
                       gf::StagePurpose purpose) const override {
    gf::StagedData out;
    const bool records = purpose == gf::StagePurpose::predict;
    for (const gf::MemorySplit& split : data.splits) {
      const std::string name = split.name + (records ? ".records.csv" : ".csv");
      std::ofstream f(folder + "/" + name);
      for (size_t i = 0; i < split.sequences.size(); ++i) {
        if (!records) f << split.labels.at(i);
        for (size_t k = 0; k < split.sequences[i].size(); ++k) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.17g", split.sequences[i][k]);
          f << (records && k == 0 ? "" : ",") << buf;
        }
        f << "\n";
      }
      if (!f) throw gf::RuntimeError(folder + "/" + name + ": cannot write");
      if (records)
        out.records = name;
      else
        out.files.push_back({split.name, name, split.name, true});
    }
    return out;
  }

  std::vector<std::string> test_file_options(const std::string& path) const override {
    return {"test=" + nlohmann::json(path).dump()};
  }
  std::string test_file_kind() const override { return "a CSV file of label,x1,x2,... rows"; }
};

std::unique_ptr<gf::Dataset> make(const gf::Options& o, const gf::DatasetBuild& b) {
  Settings s = Settings::table().read(o);
  s.seed = b.seed;
  s.train = o.resolve_path(s.train);
  s.val = o.resolve_path(s.val);
  s.test = o.resolve_path(s.test);
  if (s.val_ratio + s.test_ratio >= 1.0)
    o.fail("test_ratio", "val_ratio + test_ratio must leave training rows (sum < 1)");
  if (!b.tokenizer.empty()) {
    Settings::saved().load(b.tokenizer, s);
    s.restored = true;
    s.only = b.only;
  }
  return std::make_unique<NumberSequences>(std::move(s));
}

void register_components(gf::Registry& r) {
  r.add_dataset({"number_sequences",
                 "sequences of numbers from CSV files (label,x1,x2,...), tokens = equal bins",
                 Settings::table().specs()},
                make, std::make_shared<Formats>());
}

}  // namespace

GROWFORMER_PLUGIN("number_sequences", "0.1.0", register_components)
