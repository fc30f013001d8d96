// The files text_tsv reads, row by row: delimited text with a header row (TSV as it is, CSV with
// RFC 4180 quoting), JSON lines (one object per line) and, for prediction, plain text (one text
// per line). The format is the `format` option, else the `delimiter` option's CSV, else the
// file's extension (.tsv, .csv, .jsonl, .txt for prediction), else sniffed from the first line.
// Errors name the file and line and, for delimited files, the delimiter and why it was chosen.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <growformer/data/io.hpp>
#include <growformer/dataset.hpp>

namespace gf_text {

enum class Format { Auto, Tsv, Csv, Jsonl, Lines };

/// "auto", "tsv", "csv", "jsonl", "lines".
const char* format_name(Format f);

/// What names the columns and how a file is split.
struct TableSpec {
  Format format = Format::Auto;
  std::string delimiter;  // one character, or "" (the format's own, or sniffed)
  std::string text_column = "sentence", label_column = "label", id_column = "id";
  /// the text field of a JSON line may be an array of integers (token ids): given as the
  /// integers separated by spaces
  bool ids_as_text = false;
};

/// One record of a file.
struct TextRow {
  size_t line = 0;  // 1-based line where the record starts
  std::string text, label, id;
  bool has_id = false;
  std::string error;  // non-empty: the record is bad (what is wrong, without file and line)
};

/// The delimiter DELIM in words: "tab", "comma", "semicolon", else "`c`".
std::string delimiter_name(char delim);

/// Reads the records of one file. WANT_LABEL: the label column must be there (training data);
/// without it the file is an input to predict on, which may also be plain text.
class TextTable {
 public:
  TextTable(const std::string& path, const TableSpec& spec, bool want_label);
  ~TextTable();
  TextTable(const TextTable&) = delete;
  TextTable& operator=(const TextTable&) = delete;

  /// The next record into R (a bad one has R.error set; reading goes on with the next line);
  /// false at the end. Throws ConfigError for what ends the reading (a quote never closed).
  bool next(TextRow& r);
  Format format() const { return format_; }
  char delimiter() const { return delim_; }
  /// How the format was chosen, for messages: "comma-separated, from the .csv extension".
  const std::string& how() const { return how_; }
  const std::string& path() const { return path_; }

 private:
  void choose_format(const std::string& first_line, bool want_label);
  void read_header(const std::string& line);
  bool next_delimited(TextRow& r);
  bool next_jsonl(TextRow& r);
  bool next_line(TextRow& r);
  /// The next line (a line put back first) that is not empty, or with SKIP_WHITESPACE_ONLY not
  /// only blanks; false at the end.
  bool next_kept_line(std::string& line, bool skip_whitespace_only);
  /// The fields of one record of a delimited file starting with LINE (more lines are read
  /// while a quoted field spans them); error set in R for a malformed record.
  std::vector<std::string> split_record(std::string line, TextRow& r);
  std::string fields_message(size_t found) const;

  std::string path_;
  TableSpec spec_;
  gf::LineReader in_;
  Format format_ = Format::Tsv;
  char delim_ = '\t';
  std::string how_;
  std::string pending_;  // the first line when it is a record (JSON lines, plain text)
  bool has_pending_ = false;
  std::vector<std::string> columns_;
  size_t text_col_ = 0, label_col_ = 0;
  long id_col_ = -1;
  bool want_label_ = false;
};

/// The format option's value ("auto", "tsv", ...); ConfigError naming the option otherwise.
Format parse_format(const std::string& name);

/// text_tsv's DataFormats (text_formats.cpp); SPECS: its options, whose defaults name the columns.
std::shared_ptr<const gf::DataFormats> text_formats(gf::OptionSpecs specs);

}  // namespace gf_text
