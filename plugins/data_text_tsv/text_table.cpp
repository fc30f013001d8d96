// Delimited text, JSON lines and plain text for text_tsv (see text_table.hpp).
#include "text_table.hpp"

#include <growformer/config.hpp>
#include <growformer/errors.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>

namespace gf_text {

const char* format_name(Format f) {
  switch (f) {
    case Format::Auto:
      return "auto";
    case Format::Tsv:
      return "tsv";
    case Format::Csv:
      return "csv";
    case Format::Jsonl:
      return "jsonl";
    case Format::Lines:
      return "lines";
  }
  return "?";
}

Format parse_format(const std::string& name) {
  for (Format f : {Format::Auto, Format::Tsv, Format::Csv, Format::Jsonl, Format::Lines})
    if (name == format_name(f)) return f;
  throw gf::ConfigError("text_tsv: format `" + name + "` is none of auto, tsv, csv, jsonl, lines");
}

std::string delimiter_name(char delim) {
  switch (delim) {
    case '\t':
      return "tab";
    case ',':
      return "comma";
    case ';':
      return "semicolon";
    default:
      return std::string("`") + delim + "`";
  }
}

namespace {

// The file's extension in lower case, a trailing .gz left out ("train.CSV.gz" -> ".csv").
std::string extension(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? "" : name.substr(dot);
}

// One record of a delimited file with RFC 4180 quoting, fed line by line: a field that starts
// with `"` runs to the next lone `"` (`""` is a quote inside it) and may hold the delimiter and
// line breaks; a quote inside an unquoted field is a plain character.
class QuotedSplitter {
 public:
  explicit QuotedSplitter(char delim) : delim_(delim) {}
  /// Feeds one line; true when the record is complete (FIELDS then holds it), false while a
  /// quoted field is still open. ERROR set when a closing quote is followed by other text.
  bool feed(const std::string& line, std::vector<std::string>& fields, std::string& error) {
    for (char c : line) {
      switch (state_) {
        case State::Start:
          if (c == '"')
            state_ = State::Quoted;
          else if (c == delim_)
            fields.push_back(std::move(cur_)), cur_.clear();
          else
            cur_.push_back(c), state_ = State::Plain;
          break;
        case State::Plain:
          if (c == delim_)
            fields.push_back(std::move(cur_)), cur_.clear(), state_ = State::Start;
          else
            cur_.push_back(c);
          break;
        case State::Quoted:
          if (c == '"')
            state_ = State::QuoteSeen;
          else
            cur_.push_back(c);
          break;
        case State::QuoteSeen:
          if (c == '"') {
            cur_.push_back('"'), state_ = State::Quoted;
          } else if (c == delim_) {
            fields.push_back(std::move(cur_)), cur_.clear(), state_ = State::Start;
          } else if (error.empty()) {
            error = "field " + std::to_string(fields.size() + 1) +
                    ": the closing quote is followed by `" + std::string(1, c) +
                    "`, not by the delimiter (" + delimiter_name(delim_) +
                    ") or the line's end (a quote inside a quoted field is written \"\")";
          }
          break;
      }
    }
    if (state_ == State::Quoted) {
      cur_.push_back('\n');  // a line break inside the quoted field
      return false;
    }
    fields.push_back(std::move(cur_));
    cur_.clear();
    state_ = State::Start;
    return true;
  }
  size_t open_bytes() const { return cur_.size(); }

 private:
  enum class State { Start, Plain, Quoted, QuoteSeen };
  char delim_;
  State state_ = State::Start;
  std::string cur_;
};

// The fields of one line split at DELIM (quoted as in CSV unless the delimiter is a tab with
// the TSV format); for sniffing and headers.
std::vector<std::string> split_line(const std::string& line, char delim, bool quoted) {
  if (!quoted) return gf::split_fields(line, delim);
  QuotedSplitter s(delim);
  std::vector<std::string> fields;
  std::string error;
  s.feed(line, fields, error);
  return fields;
}

bool has_column(const std::vector<std::string>& cols, const std::string& name) {
  return std::find(cols.begin(), cols.end(), name) != cols.end();
}

// A JSON value of a JSON line as the text of a label or id; "" with WHY set when it is none.
std::string scalar_text(const nlohmann::json& v, std::string& why) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer())
    return v.is_number_unsigned() ? std::to_string(v.get<unsigned long long>())
                                  : std::to_string(v.get<long long>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      return std::to_string(static_cast<long long>(d));
  }
  why = v.is_null() ? "null" : v.dump();
  return "";
}

std::string json_keys(const nlohmann::json& obj) {
  std::string out;
  for (auto it = obj.begin(); it != obj.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out.empty() ? "none" : out;
}

// The message of nlohmann's parse error without its "[json.exception.parse_error.101] " tag.
std::string parse_message(const char* what) {
  std::string_view s(what);
  if (!s.empty() && s[0] == '[') s.remove_prefix(std::min(s.size(), s.find("] ") + 2));
  return std::string(s);
}

}  // namespace

TextTable::TextTable(const std::string& path, const TableSpec& spec, bool want_label)
    : path_(path), spec_(spec), in_(path), want_label_(want_label) {
  std::string first;
  bool any = in_.next(first);
  if (any && first.compare(0, 3, "\xEF\xBB\xBF") == 0)
    first.erase(0, 3);  // a UTF-8 byte order mark
  if (!any && (spec.format == Format::Jsonl || spec.format == Format::Lines)) {
    format_ = spec.format;
    return;  // no records
  }
  if (!any) gf::data_error(path, 1, "empty file: expected a header row (or JSON lines)");
  choose_format(first, want_label);
  if (format_ == Format::Tsv || format_ == Format::Csv) {
    read_header(first);
  } else {
    pending_ = std::move(first);
    has_pending_ = true;
  }
}

TextTable::~TextTable() = default;

void TextTable::choose_format(const std::string& first, bool want_label) {
  auto set = [&](Format f, char d, const std::string& reason) {
    format_ = f;
    delim_ = d;
    how_ = (f == Format::Tsv || f == Format::Csv)
               ? delimiter_name(d) + " as the delimiter, " + reason
               : std::string(format_name(f)) + ", " + reason;
  };
  if (spec_.format == Format::Lines && want_label)
    throw gf::ConfigError(path_ +
                          ": format `lines` (one text per line) has no labels: it is for "
                          "inputs to predict on; labelled data is tsv, csv or jsonl");
  const bool has_delim = !spec_.delimiter.empty();
  const char csv_delim = has_delim ? spec_.delimiter[0] : ',';
  // by the extension: an input to predict on by its own name first (the options describe the
  // training files); a .csv keeps the delimiter option
  const std::string ext = extension(path_);
  auto by_extension = [&]() {
    const std::string from = "from the " + ext + " extension";
    if (ext == ".csv")
      set(Format::Csv, csv_delim, has_delim ? "the delimiter option, a .csv file" : from);
    else if (ext == ".tsv" || ext == ".tab")
      set(Format::Tsv, '\t', from);
    else if (ext == ".jsonl" || ext == ".ndjson" || ext == ".json")
      set(Format::Jsonl, '\t', from);
    else if (ext == ".txt" && !want_label)
      set(Format::Lines, '\t', from);
    else
      return false;
    return true;
  };
  if (!want_label && by_extension()) return;
  if (spec_.format == Format::Csv)
    return set(Format::Csv, csv_delim, has_delim ? "the delimiter option" : "format: csv");
  if (spec_.format != Format::Auto)
    return set(spec_.format, '\t', std::string("format: ") + format_name(spec_.format));
  if (has_delim) return set(Format::Csv, csv_delim, "the delimiter option");
  if (by_extension()) return;
  // sniffed: a JSON object, else the delimiter whose split of the header names the columns
  size_t lead = first.find_first_not_of(" \t");
  if (lead != std::string::npos && first[lead] == '{')
    return set(Format::Jsonl, '\t', "sniffed: the first line is a JSON object");
  const char candidates[] = {'\t', ',', ';', '|'};
  for (char c : candidates) {
    if (first.find(c) == std::string::npos) continue;
    auto cols = split_line(first, c, c != '\t');
    if (has_column(cols, spec_.text_column) &&
        (!want_label || has_column(cols, spec_.label_column)))
      return set(c == '\t' ? Format::Tsv : Format::Csv, c, "sniffed from the header line");
  }
  char best = '\t';
  long most = 0;
  for (char c : candidates) {
    long n = static_cast<long>(std::count(first.begin(), first.end(), c));
    if (n > most) most = n, best = c;
  }
  set(best == '\t' ? Format::Tsv : Format::Csv, best,
      most ? "sniffed from the header line (the most frequent of tab , ; |)"
           : "the header line holds none of tab , ; | (one column)");
}

void TextTable::read_header(const std::string& line) {
  columns_ = split_line(line, delim_, format_ == Format::Csv);
  gf::TsvHeader header(columns_, path_);
  auto find = [&](const std::string& name, const char* option) {
    try {
      return header.index(name, option);
    } catch (const gf::ConfigError& e) {
      std::string hint = std::string(e.what()) + " (the header was split with " + how_ +
                         "; set data.delimiter or data.format when the file is split otherwise";
      if (!want_label_ && columns_.size() == 1)
        hint +=
            "; a file of one text per line is read as such when named .txt or with "
            "data.format: lines";
      throw gf::ConfigError(hint + ")");
    }
  };
  text_col_ = find(spec_.text_column, "text_column");
  if (want_label_) label_col_ = find(spec_.label_column, "label_column");
  for (size_t i = 0; i < columns_.size(); ++i)
    if (columns_[i] == spec_.id_column && i != text_col_) id_col_ = static_cast<long>(i);
}

std::string TextTable::fields_message(size_t found) const {
  std::string sep = delimiter_name(delim_);
  if (sep[0] == '`') sep = "`" + std::string(1, delim_) + "`";
  return "expected " + std::to_string(columns_.size()) + " " + sep +
         "-separated fields (as the header), found " + std::to_string(found) + " (" + how_ + ")";
}

bool TextTable::next(TextRow& r) {
  r = TextRow();
  switch (format_) {
    case Format::Jsonl:
      return next_jsonl(r);
    case Format::Lines:
      return next_line(r);
    default:
      return next_delimited(r);
  }
}

std::vector<std::string> TextTable::split_record(std::string line, TextRow& r) {
  if (format_ == Format::Tsv) return gf::split_fields(line, '\t');
  QuotedSplitter s(delim_);
  std::vector<std::string> fields;
  while (!s.feed(line, fields, r.error)) {
    if (s.open_bytes() > gf::LineReader::kMaxLineBytes)
      gf::data_error(path_, r.line,
                     "a quoted field opened on this line is still open after 64 MiB (a "
                     "closing quote is missing)");
    if (!in_.next(line)) {
      r.error =
          "a quoted field opened on this line never closes (the file ends inside it; a quote "
          "inside a quoted field is written \"\")";
      return fields;
    }
  }
  return fields;
}

bool TextTable::next_delimited(TextRow& r) {
  std::string line;
  do {
    if (!in_.next(line)) return false;
  } while (line.empty());
  r.line = in_.line_number();
  std::vector<std::string> fields = split_record(std::move(line), r);
  if (!r.error.empty()) return true;
  if (id_col_ >= 0 && static_cast<size_t>(id_col_) < fields.size()) {
    r.id = fields[static_cast<size_t>(id_col_)];
    r.has_id = true;
  }
  if (fields.size() != columns_.size()) {
    r.error = fields_message(fields.size());
    return true;
  }
  r.text = std::move(fields[text_col_]);
  if (want_label_) r.label = std::move(fields[label_col_]);
  return true;
}

bool TextTable::next_kept_line(std::string& line, bool skip_whitespace_only) {
  do {
    if (has_pending_) {
      line = std::move(pending_);
      has_pending_ = false;
    } else if (!in_.next(line)) {
      return false;
    }
  } while (skip_whitespace_only ? line.find_first_not_of(" \t\r") == std::string::npos
                                : line.empty());
  return true;
}

bool TextTable::next_line(TextRow& r) {
  std::string line;
  if (!next_kept_line(line, false)) return false;
  r.line = in_.line_number();
  r.text = std::move(line);
  return true;
}

bool TextTable::next_jsonl(TextRow& r) {
  std::string line;
  if (!next_kept_line(line, true)) return false;
  r.line = in_.line_number();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    r.error = "not a JSON line: " + parse_message(e.what());
    return true;
  }
  if (!j.is_object()) {
    r.error = "a JSON line holds one object ({\"" + spec_.text_column + "\": ..., ...}), not " +
              j.dump().substr(0, 40);
    return true;
  }
  auto key = [&](const std::string& name, const char* option) -> const nlohmann::json* {
    auto it = j.find(name);
    if (it != j.end()) return &*it;
    std::vector<std::string> keys;
    for (auto k = j.begin(); k != j.end(); ++k) keys.push_back(k.key());
    std::string guess = gf::did_you_mean(name, keys);
    r.error = "no key `" + name + "` (option " + option + "); keys: " + json_keys(j) +
              (guess.empty() ? "" : "; did you mean `" + guess + "`?");
    return nullptr;
  };
  const nlohmann::json* text = key(spec_.text_column, "text_column");
  if (!text) return true;
  if (text->is_string()) {
    r.text = text->get<std::string>();
  } else if (spec_.ids_as_text && text->is_array()) {
    for (const auto& t : *text) {
      if (!t.is_number_integer()) {
        r.error = "key `" + spec_.text_column + "`: token ids are integers, not " +
                  t.dump().substr(0, 40);
        return true;
      }
      r.text += (r.text.empty() ? "" : " ") + t.dump();
    }
  } else {
    r.error = "key `" + spec_.text_column + "` holds " + text->dump().substr(0, 40) +
              ", not a string" + (spec_.ids_as_text ? " or a list of token ids" : "");
    return true;
  }
  if (want_label_) {
    const nlohmann::json* label = key(spec_.label_column, "label_column");
    if (!label) return true;
    std::string why;
    r.label = scalar_text(*label, why);
    if (!why.empty()) {
      r.error = "key `" + spec_.label_column + "` holds " + why.substr(0, 40) +
                "; a label is a string or an integer";
      return true;
    }
  }
  if (auto it = j.find(spec_.id_column); it != j.end() && spec_.id_column != spec_.text_column) {
    std::string why;
    r.id = scalar_text(*it, why);
    r.has_id = why.empty();
  }
  return true;
}

}  // namespace gf_text
