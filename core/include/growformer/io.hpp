// File reading shared by the dataset plugins: plain or gzip text line by line
// (a truncated or corrupt gzip stream is an error, never a silent short read),
// whole-file bytes, TSV headers with did-you-mean column lookup, FASTA, GFF gene
// lookup and k-mer tokenisation of nucleotide sequences.
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

/// Reads a text file line by line; gzip is detected by its magic bytes, plain
/// files are read as they are. Line endings "\n" and "\r\n" are stripped.
class LineReader {
 public:
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

// ---------------------------------------------------------------- sequences

/// One FASTA record: id is the header up to the first whitespace.
struct FastaRecord {
  std::string id;
  std::string seq;  // upper-case, as in the file
  size_t line = 0;  // line of the '>' header
};

/// Reads every record of a plain or gzip FASTA file. Errors: sequence before
/// the first header, a header with no id, a record without sequence.
std::vector<FastaRecord> read_fasta(const std::string& path);

/// 1-based inclusive [start, end] of gene `gene` in a GFF file (attribute
/// gene_name=, Name= or gene=); ConfigError listing the genes when absent.
std::pair<size_t, size_t> gff_gene_region(const std::string& path, const std::string& gene);

/// What to do with an ambiguous IUPAC base (N, R, Y, ...) in a k-mer.
enum class Ambiguous {
  Token,    // the k-mer becomes the single <amb> token
  Skip,     // the k-mer is dropped
  Error,    // ConfigError naming the record and position
  Resolve,  // replaced by a compatible base drawn from the seed
};
Ambiguous parse_ambiguous(const std::string& s);

/// Turns nucleotide strings into k-mer token ids. Id 0 is <pad>, 1 is <amb>
/// (a k-mer with an ambiguous base), 2 + (base-4 code of the k-mer) otherwise,
/// so vocab_size() = 2 + 4^k. Bases A C G T (U reads as T, lower case as upper).
class KmerTokenizer {
 public:
  KmerTokenizer(int k, int stride, Ambiguous ambiguous);
  /// The options every k-mer dataset declares: `k`, `stride`, `ambiguous`.
  static OptionSpecs options();
  size_t vocab_size() const;
  /// Token text per id (for DataSplits::vocab).
  std::vector<std::string> vocab() const;
  /// Tokens of seq[start, end) (0-based, end exclusive), at most max_tokens
  /// (0 = no limit). `where` (e.g. "file.fasta record `id` (line 12)") names the
  /// record in errors; `rng_seed` drives Ambiguous::Resolve. A character that is
  /// no IUPAC code is always an error.
  std::vector<int32_t> tokenize(const std::string& seq, size_t start, size_t end, size_t max_tokens,
                                const std::string& where, uint64_t rng_seed = 0) const;

 private:
  int k_, stride_;
  Ambiguous ambiguous_;
};

}  // namespace gf
