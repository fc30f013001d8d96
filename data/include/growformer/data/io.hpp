// File reading shared by the dataset plugins (library growformer_data): plain or gzip text
// line by line (a truncated or corrupt gzip stream is an error, never a silent short read),
// whole-file bytes and TSV headers with did-you-mean column lookup.
//
// Every error is a ConfigError (the user's input is wrong: exit 2) whose
// message starts with "file:line:" or names the file and record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "growformer/config.hpp"

namespace gf {

/// "path:line: msg" as a ConfigError.
[[noreturn]] void data_error(const std::string& path, size_t line, const std::string& msg);

/// True when `path` names an existing regular file.
bool file_exists(const std::string& path);

/// Why PATH cannot be read as a data file ("PATH: is a directory, expected a data file", "PATH:
/// cannot open data file: No such file or directory", ...), or "" when it can: a regular file or
/// a pipe (what LineReader opens).
std::string data_file_problem(const std::string& path);

/// Reads a text file line by line; gzip is detected by its magic bytes, plain
/// files are read as they are. Line endings "\n" and "\r\n" are stripped. A NUL byte
/// (binary data) and a line over kMaxLineBytes are errors naming the line, so memory stays
/// bounded whatever the file holds; devices are refused when opened, pipes are read.
class LineReader {
 public:
  static constexpr size_t kMaxLineBytes = size_t(64) << 20;
  /// Throws ConfigError naming the path when it cannot be opened.
  explicit LineReader(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  /// The next line into `line`; false at the proper end of the file. Throws
  /// ConfigError "path:line: truncated or corrupt gzip stream" when the
  /// compressed stream ends early or fails its checksum.
  bool next(std::string& line);
  /// 1-based number of the line last returned (0 before the first).
  size_t line_number() const { return line_no_; }
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  size_t line_no_ = 0;
};

/// The whole (decompressed) content of a plain or gzip file; errors as LineReader.
std::vector<uint8_t> read_file_bytes(const std::string& path);

/// Writes `text` to `path`, gzip-compressed when `gzip` (for generated data and tests).
void write_file(const std::string& path, const std::string& text, bool gzip = false);

/// Splits on a single-character separator, keeping empty fields.
std::vector<std::string> split_fields(const std::string& line, char sep = '\t');

/// The header row of a TSV file: column lookup by name with did-you-mean.
class TsvHeader {
 public:
  TsvHeader() = default;
  TsvHeader(std::vector<std::string> columns, std::string path);
  /// Index of column `name`; ConfigError "path:1: no column `x` (columns: ...; did you mean ...)".
  /// `option` (e.g. "label_column") is named in the message when given.
  size_t index(const std::string& name, const std::string& option = "") const;
  const std::vector<std::string>& columns() const { return columns_; }
  size_t size() const { return columns_.size(); }

 private:
  std::vector<std::string> columns_;
  std::string path_;
};

}  // namespace gf
