// Dataset plugin `listops`: ListOps trees generated to the Long Range Arena rules (the core's
// gf::listops generator), or read from LRA / original-ListOps TSV files.
#include <algorithm>
#include <filesystem>
#include <growformer/config.hpp>
#include <growformer/data/io.hpp>
#include <growformer/data/listops.hpp>
#include <growformer/dataset.hpp>
#include <growformer/fields.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>
#include <growformer/rng.hpp>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace lo = gf::listops;

// generated trees per split when train_size / val_size / test_size are not given
const size_t kGeneratedSizes[3] = {20000, 2000, 2000};

/// The options of `listops`, each declared once; those of one source carry its mode.
struct ListOpsSettings {
  bool files = false;  // source: files (else generate)
  std::optional<size_t> train_size, val_size, test_size;
  size_t min_length = 128, max_length = 512;
  int max_depth = 10, max_args = 10;
  int64_t seed_offset = 0;
  std::optional<std::string> train_file, val_file, test_file;
  bool truncate = false;

  static const gf::OptionTable<ListOpsSettings>& table() {
    using S = ListOpsSettings;
    static const auto t =
        gf::OptionTable<S>()
            .choice("source", &S::files, "generate",
                    "generate: random trees by the LRA rules; files: read train/val/test TSV files",
                    {{"generate", false}, {"files", true}})
            .add("train_size", &S::train_size, "~",
                 "training trees to generate (default 20000); "
                 "files: keep the first N rows (default all)",
                 1)
            .add("val_size", &S::val_size, "~",
                 "validation trees to generate (default 2000); "
                 "files: keep the first N rows (default all)",
                 0)
            .add("test_size", &S::test_size, "~",
                 "test trees to generate (default 2000); "
                 "files: keep the first N rows (default all)",
                 0)
            .add("min_length", &S::min_length, "128",
                 "generate: keep trees longer than this many tokens "
                 "(LRA: 500 with max_length 2000)",
                 0)
            .mode("source=generate")
            .add("max_length", &S::max_length, "512",
                 "generate: keep trees shorter than this many tokens (strict, as LRA); "
                 "files: longest row kept (see truncate)",
                 2)
            .add("max_depth", &S::max_depth, "10", "generate: deepest level; the root is level 1",
                 1, 64)
            .mode("source=generate")
            .add("max_args", &S::max_args, "10",
                 "generate: operator arity is uniform in 2..max_args", 2, 1000)
            .mode("source=generate")
            .add("seed_offset", &S::seed_offset, "0",
                 "generate: data seed = run seed + seed_offset (stream \"listops\")")
            .mode("source=generate")
            .add("train_file", &S::train_file, "~",
                 "files: training TSV (LRA `Source<TAB>Target` or `label<TAB>expression`, .gz ok), "
                 "relative to the config")
            .mode("source=files")
            .add("val_file", &S::val_file, "~", "files: validation TSV")
            .mode("source=files")
            .add("test_file", &S::test_file, "~", "files: test TSV")
            .mode("source=files")
            .add("truncate", &S::truncate, "false",
                 "files: cut rows longer than max_length to max_length tokens "
                 "(LRA's input pipeline) instead of dropping them")
            .mode("source=files");
    return t;
  }
};

// The tokens of one record LINE into R (an error into R.error): the expression, or of a
// tab-separated row the column that holds brackets or more than a digit.
void read_record(const std::string& line, gf::Record& r) {
  std::string expr = line;
  size_t tab = line.find('\t');
  if (tab != std::string::npos) {
    std::string a = line.substr(0, tab), b = line.substr(tab + 1);
    expr = a.find('[') != std::string::npos || a.size() > 2 ? a : b;
  }
  try {
    r.tokens = lo::tokenize(expr);
  } catch (const gf::RuntimeError& err) {
    r.error = err.what();
    return;
  }
  if (r.tokens.empty()) r.error = "empty expression";
}

class ListOpsDataset : public gf::Dataset {
 public:
  ListOpsDataset(const gf::Options& o, const gf::DatasetBuild& b)
      : ListOpsDataset(o, b, ListOpsSettings::table().read(o)) {}
  ListOpsDataset(const gf::Options& o, const gf::DatasetBuild& b, const ListOpsSettings& s)
      : opts_(o), files_(s.files), max_length_(s.max_length) {
    const std::string mode = files_ ? "source=files" : "source=generate";
    for (const auto& spec : ListOpsSettings::table().specs())
      if (!spec.mode.empty() && spec.mode != mode && o.differs_from_default(spec.name))
        o.fail(spec.name,
               std::string("is only used with source: ") + (files_ ? "generate" : "files"));
    const std::optional<size_t>* sizes[3] = {&s.train_size, &s.val_size, &s.test_size};
    if (files_) {
      truncate_ = s.truncate;
      const char* names[3] = {"train_file", "val_file", "test_file"};
      const std::optional<std::string>* files[3] = {&s.train_file, &s.val_file, &s.test_file};
      // reading for a checkpoint (eval --split S): only split S's file is needed
      std::string only = b.tokenizer.empty() ? "" : b.only;
      const char* splits[3] = {"train", "val", "test"};
      for (int i = 0; i < 3; ++i) {
        read_[i] = only.empty() || only == splits[i];
        if (!read_[i]) {  // read as given, never opened
          if (*files[i]) paths_[i] = o.resolve_path(**files[i]);
          continue;
        }
        if (!*files[i]) o.fail(names[i], "is required with source: files");
        paths_[i] = o.resolve_path(**files[i]);
        if (std::string problem = gf::data_file_problem(paths_[i]); !problem.empty()) {
          std::error_code ec;  // a directory or a device is named as such, not as missing
          const bool there = std::filesystem::exists(paths_[i], ec) || ec;
          o.fail(names[i], there ? problem : "file not found: " + paths_[i]);
        }
        limits_[i] = sizes[i]->value_or(0);
      }
    } else {
      cfg_.min_length = s.min_length;
      cfg_.max_length = max_length_;
      if (cfg_.max_length < cfg_.min_length + 2)
        o.fail("max_length", "no tree length lies strictly between min_length " +
                                 std::to_string(cfg_.min_length) + " and max_length " +
                                 std::to_string(cfg_.max_length));
      cfg_.max_depth = s.max_depth;
      cfg_.max_args = s.max_args;
      if (cfg_.max_depth == 1 && cfg_.min_length >= 1)
        o.fail("max_depth", "1 makes single digits only (length 1), none longer than min_length");
      for (int i = 0; i < 3; ++i) sizes_[i] = sizes[i]->value_or(kGeneratedSizes[i]);
      seed_ = b.seed + static_cast<uint64_t>(s.seed_offset);
    }
  }

  gf::DataSplits load() override {
    gf::DataSplits d;
    d.vocab_size = lo::kVocabSize;
    d.pad_id = lo::kPad;
    d.num_classes = lo::kNumClasses;
    for (size_t c = 0; c < lo::kNumClasses; ++c) d.class_names.push_back(std::to_string(c));
    d.vocab = lo::vocabulary();
    std::vector<gf::Example>* splits[3] = {&d.train, &d.val, &d.test};
    if (files_) {
      for (int i = 0; i < 3; ++i)
        if (read_[i]) *splits[i] = read_split(i);
    } else {
      generate(splits);
    }
    for (auto* s : splits)
      for (const auto& e : *s) d.max_len = std::max(d.max_len, e.tokens.size());
    d.tokenizer = "{\"plugin\":\"listops\"}";  // the vocabulary is fixed
    return d;
  }

  // Prediction input: one expression per line, or the TSV forms the dataset reads (`Source<TAB>
  // Target` with that header, or `label<TAB>expression`); the id is the line number.
  std::unique_ptr<gf::RecordReader> open_records(const std::string& path) override {
    class Reader : public gf::RecordReader {
     public:
      explicit Reader(const std::string& path) : in_(path) {}
      bool next(gf::Record& r) override {
        std::string line;
        do {
          if (!in_.next(line)) return false;
          if (in_.line_number() == 1 && line == "Source\tTarget") line.clear();
        } while (line.find_first_not_of(" \t") == std::string::npos);
        r = gf::Record();
        r.line = in_.line_number();
        r.id = std::to_string(r.line);
        read_record(line, r);
        return true;
      }

     private:
      gf::LineReader in_;
    };
    return std::make_unique<Reader>(path);
  }

  // Strings to predict on: each one line as a file of records holds it.
  std::unique_ptr<gf::RecordReader> open_strings(const std::vector<std::string>& inputs) override {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].find_first_of("\n\r") != std::string::npos)
        throw gf::ConfigError("input " + std::to_string(i) +
                              " holds a line break; a listops record is one line");
    class Reader : public gf::RecordReader {
     public:
      explicit Reader(const std::vector<std::string>& inputs) : inputs_(inputs) {}
      bool next(gf::Record& r) override {
        if (at_ >= inputs_.size()) return false;
        r = gf::Record();
        r.line = at_ + 1;
        r.id = std::to_string(at_);
        read_record(inputs_[at_++], r);
        return true;
      }

     private:
      const std::vector<std::string>& inputs_;
      size_t at_ = 0;
    };
    return std::make_unique<Reader>(inputs);
  }

  std::string describe() const override {
    std::ostringstream os;
    if (files_) {
      os << "listops from files: train " << paths_[0] << ", val " << paths_[1] << ", test "
         << paths_[2] << "; rows longer than " << max_length_ << " tokens "
         << (truncate_ ? "truncated" : "dropped");
      if (loaded_) os << " (" << changed_[0] << "/" << changed_[1] << "/" << changed_[2] << ")";
    } else {
      os << "listops generated by the LRA rules: " << sizes_[0] << "/" << sizes_[1] << "/"
         << sizes_[2] << " distinct trees, " << cfg_.min_length << " < length < " << cfg_.max_length
         << ", max_depth " << cfg_.max_depth << ", max_args " << cfg_.max_args << ", data seed "
         << seed_;
    }
    return os.str();
  }

 private:
  void generate(std::vector<gf::Example>* splits[3]) {
    cfg_.count = sizes_[0] + sizes_[1] + sizes_[2];
    gf::Rng rng(seed_, "listops");
    std::vector<lo::Generated> trees;
    try {
      trees = lo::generate(cfg_, rng);
    } catch (const gf::RuntimeError& e) {
      opts_.fail("train_size", e.what());  // settings that cannot yield enough distinct trees
    }
    size_t k = 0;
    for (int i = 0; i < 3; ++i) {
      splits[i]->reserve(sizes_[i]);
      for (size_t j = 0; j < sizes_[i]; ++j, ++k) {
        gf::Example e;
        e.tokens = std::move(trees[k].tokens);
        e.label = trees[k].label;
        splits[i]->push_back(std::move(e));
      }
    }
    loaded_ = true;
  }

  std::vector<gf::Example> read_split(int i) {
    const std::string& path = paths_[i];
    std::vector<lo::Row> rows = lo::read_tsv(path);
    if (limits_[i] > 0 && rows.size() > limits_[i]) rows.resize(limits_[i]);
    std::vector<gf::Example> out;
    out.reserve(rows.size());
    for (const lo::Row& r : rows) {
      gf::Example e;
      try {
        e.tokens = lo::tokenize(r.expression);
      } catch (const gf::RuntimeError& err) {
        gf::data_error(path, r.line, err.what());
      }
      if (e.tokens.empty()) gf::data_error(path, r.line, "empty expression");
      if (e.tokens.size() > max_length_) {
        ++changed_[i];
        if (!truncate_) continue;
        e.tokens.resize(max_length_);
      }
      e.label = r.label;
      out.push_back(std::move(e));
    }
    if (out.empty())
      gf::data_error(path, 0,
                     rows.empty()
                         ? "no rows"
                         : "every row is longer than max_length " + std::to_string(max_length_) +
                               " tokens; raise max_length or set truncate: true");
    loaded_ = true;
    return out;
  }

  gf::Options opts_;
  bool files_ = false;
  size_t max_length_ = 0;
  // generate
  lo::GeneratorConfig cfg_;
  size_t sizes_[3] = {0, 0, 0};
  uint64_t seed_ = 0;
  // files
  bool truncate_ = false;
  std::string paths_[3];
  size_t limits_[3] = {0, 0, 0};
  bool read_[3] = {true, true, true};  // files mode: the splits whose file is read
  size_t changed_[3] = {0, 0, 0};      // rows dropped or truncated per split
  bool loaded_ = false;
};

void register_listops(gf::Registry& r) {
  r.add_dataset(
      {"listops",
       "ListOps expression trees (MIN MAX MED SM over digits): generated by the LRA "
       "rules or read from TSV; 16 tokens, 10 classes",
       ListOpsSettings::table().specs()},
      [](const gf::Options& o, const gf::DatasetBuild& b) -> std::unique_ptr<gf::Dataset> {
        return std::make_unique<ListOpsDataset>(o, b);
      });
}

}  // namespace

GROWFORMER_PLUGIN("listops", "0.1.0", register_listops)
