// Nucleotide sequences for the dataset plugins (library growformer_data): FASTA records, GFF
// gene lookup and k-mer tokenisation. Errors as in data/io.hpp: ConfigError naming the file
// and line or record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/data/io.hpp"
#include "growformer/fields.hpp"

namespace gf {

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
/// The option value that stands for A: "token", "skip", "error" or "resolve".
const char* ambiguous_name(Ambiguous a);

/// The k-mer settings every k-mer dataset reads the same way, each declared once (`table()`):
/// `k`, `stride`, `ambiguous`.
struct KmerSettings {
  int k = 1, stride = 1;
  Ambiguous ambiguous = Ambiguous::Token;
  static const OptionTable<KmerSettings>& table();
};

/// Turns nucleotide strings into k-mer token ids. Id 0 is <pad>, 1 is <amb>
/// (a k-mer with an ambiguous base), 2 + (base-4 code of the k-mer) otherwise,
/// so vocab_size() = 2 + 4^k. Bases A C G T (U reads as T, lower case as upper).
class KmerTokenizer {
 public:
  KmerTokenizer(int k, int stride, Ambiguous ambiguous);
  /// The specs of KmerSettings::table().
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
