// text_tsv's formats beyond its files (growformer/dataset.hpp's DataFormats): texts and token
// ids given in memory, written as JSON lines; a labelled file of any format it reads, evaluated
// as its test split.
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <growformer/dataset.hpp>
#include <growformer/json_text.hpp>

#include "text_table.hpp"

namespace gf_text {
namespace {

// ---- data given in memory, files to evaluate ----------------------------------------------
// Texts and token ids with labels are written as JSON lines, one {text_column: text or ids,
// label_column: label} object per row, read with format: jsonl; a labelled file of any format
// the dataset reads is evaluated as the test split.
class TextFormats : public gf::DataFormats {
 public:
  explicit TextFormats(gf::OptionSpecs specs) : specs_(std::move(specs)) {}

  std::vector<std::string> kinds() const override { return {"texts", "ids"}; }
  std::vector<std::string> default_for() const override { return {"texts", "ids"}; }
  std::vector<std::string> file_options() const override { return {"train", "val", "test"}; }

  gf::DataColumns columns(const gf::ConfigNode& section, gf::StagePurpose purpose) const override {
    gf::DataColumns c;
    c.input_option = "text_column";
    c.label_option = "label_column";
    if (purpose == gf::StagePurpose::train) {
      // a column the config names, else the usual names of a table's columns
      c.input_set = given(section, "text_column");
      c.label_set = given(section, "label_column");
      c.input = c.input_set ? std::vector<std::string>{option(section, "text_column")}
                            : std::vector<std::string>{"text", "sentence"};
      c.label = {option(section, "label_column")};
    } else {  // the model's columns, else the usual names
      c.input = {option(section, "text_column")};
      for (const char* n : {"text", "sentence"})
        if (c.input.front() != n) c.input.push_back(n);
      c.label = {option(section, "label_column")};
      if (c.label.front() != "label") c.label.push_back("label");
    }
    return c;
  }

  gf::StagedData stage(const gf::MemoryData& data, const gf::ConfigNode& section,
                       const std::string& folder, gf::StagePurpose purpose) const override {
    if (purpose == gf::StagePurpose::predict)
      throw gf::ConfigError("text_tsv: inputs to predict on are read as records (open_strings)");
    gf::StagedData out;
    const bool train = purpose == gf::StagePurpose::train;
    // training data in memory is written under the keys `text` and `label` unless the config
    // names others; data to evaluate under the model's
    const std::string text_key = train && !given(section, "text_column")
                                     ? std::string("text")
                                     : option(section, "text_column");
    const std::string label_key = option(section, "label_column");
    if (train) {
      if (!given(section, "text_column")) out.options.emplace_back("text_column", text_key);
      if (!given(section, "label_column")) out.options.emplace_back("label_column", label_key);
      if (data.kind == "ids") {
        if (given(section, "tokenizer") && option(section, "tokenizer") != "ids")
          throw gf::ConfigError("data: token ids are given, but the config's data.tokenizer is `" +
                                option(section, "tokenizer") +
                                "`; drop it (ids are read with tokenizer: ids)");
        if (!given(section, "tokenizer")) out.options.emplace_back("tokenizer", "ids");
      }
    }
    out.options.insert(out.options.begin(), {"format", "jsonl"});
    for (const gf::MemorySplit& split : data.splits) {
      const std::string name = split.name + ".jsonl";
      write_rows(folder + "/" + name, data, split, text_key, label_key);
      out.files.push_back({split.name, name, split.name, true});
    }
    return out;
  }

  std::vector<std::string> test_file_options(const std::string& path) const override {
    return {"format=auto", "test=" + nlohmann::json(path).dump()};
  }
  std::string test_file_kind() const override { return "a TSV, CSV or JSON lines file"; }

 private:
  static bool given(const gf::ConfigNode& section, const std::string& key) {
    return section.valid() && section.is_map() && section.has(key) &&
           section.child(key).is_scalar();
  }
  // The option KEY of SECTION, else its default.
  std::string option(const gf::ConfigNode& section, const std::string& key) const {
    if (given(section, key)) return section.child(key).as_string();
    for (const gf::OptionSpec& o : specs_)
      if (o.name == key) return o.default_value;
    return "";
  }
  static void write_rows(const std::string& path, const gf::MemoryData& data,
                         const gf::MemorySplit& split, const std::string& text_key,
                         const std::string& label_key) {
    std::ofstream f(path, std::ios::binary);
    for (size_t i = 0; i < split.size(); ++i) {
      nlohmann::ordered_json row;
      if (data.kind == "texts") {
        row[text_key] = split.texts[i];
      } else {
        std::vector<int64_t> ids(split.sequences[i].begin(), split.sequences[i].end());
        row[text_key] = ids;
      }
      if (data.int_labels)
        row[label_key] = std::stoll(split.labels[i]);
      else
        row[label_key] = split.labels[i];
      f << gf::dump_json(row) << "\n";
    }
    if (!f) throw gf::RuntimeError(path + ": cannot write the data given in memory");
  }

  gf::OptionSpecs specs_;  // text_tsv's options: their defaults
};

}  // namespace

std::shared_ptr<const gf::DataFormats> text_formats(gf::OptionSpecs specs) {
  return std::make_shared<TextFormats>(std::move(specs));
}

}  // namespace gf_text
