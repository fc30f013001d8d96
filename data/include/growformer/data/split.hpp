// What the dataset plugins share about choosing their examples (library growformer_data): the
// region of a genome to read (1-based positions or a gene of a GFF file), the split options, a
// genome dataset's settings, tokenizer and empty splits, the seeded shuffle behind every split,
// how many examples a val/test ratio takes and which split each goes to, and the check that no
// split came out empty.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/data/sequences.hpp"
#include "growformer/dataset.hpp"
#include "growformer/fields.hpp"
#include "growformer/rng.hpp"

namespace gf {

/// A region of each sequence: 1-based inclusive [start, end] (end 0 = the whole sequence), or a
/// gene of a GFF annotation, looked up when the data are read.
struct RegionSpec {
  size_t start = 0, end = 0;
  std::string gene, gff;
  /// The options `region_start`, `region_end`, `gene`, `gff` (no defaults), declared once. WHAT
  /// names the sequence in the help ("the region on each record").
  static OptionTable<RegionSpec> table(const std::string& what);
};
/// Checks the region R read from O: both ends or none, end >= start, gene with its gff and never
/// with ends; a ConfigError naming the option otherwise. Resolves the gff path against the
/// config.
void check_region(const Options& o, RegionSpec& r);
/// 1-based inclusive [start, end] of REGION (the gene's, from its GFF file); {0, 0} = whole.
std::pair<size_t, size_t> resolve_region(const RegionSpec& region);

/// How a dataset holds out validation and test examples, the options every data plugin that
/// splits reads the same way: `val_ratio` and `test_ratio` (the share held out, 0.1 by default,
/// at most 0.9) and `split_seed` (read into `seed`; without it `seed` keeps its initial value,
/// the run seed a plugin starts from). A plugin's settings derive from it and its table includes
/// the ones it has, each where it lists it (OptionTable::include with their names).
struct SplitSettings {
  double val_ratio = 0.1, test_ratio = 0.1;
  uint64_t seed = 0;
  /// The split options with this dataset's help: a share is of HELD_OUT ("each class"), the seed
  /// draws SEEDED ("the stratified split"); with SPLIT_FILES a share applies only where no val
  /// (test) file is given.
  static OptionTable<SplitSettings> table(const std::string& held_out, const std::string& seeded,
                                          bool split_files = false);
};

/// What every genome dataset (FASTA records, generated genomes) reads the same way: the region,
/// the token limit, the held-out shares and the k-mer settings. A plugin's settings derive
/// from it.
struct GenomeSettings : SplitSettings, KmerSettings {
  RegionSpec region;
  size_t max_len = 0;  // tokens per sequence (0 = all)
  /// Their options: the region (RegionSpec::table(REGION)), `max_len` (tokens per UNIT),
  /// `val_ratio` / `test_ratio` (share of each GROUP held out), the k-mer options.
  static OptionTable<GenomeSettings> table(const std::string& region, const std::string& unit,
                                           const std::string& group);
};
/// Checks settings S read from O (the region, as check_region).
void check_genome_settings(const Options& o, GenomeSettings& s);
/// The k-mer tokenizer of S (k, stride, ambiguous), as training and prediction both build it.
KmerTokenizer genome_tokenizer(const GenomeSettings& s);
/// Empty splits of a genome dataset: TOK's vocabulary (pad id 0) and the classes CLASSES.
DataSplits genome_splits(const KmerTokenizer& tok, const std::vector<std::string>& classes);

/// How the N examples of one group (a class, a clade), in their drawn order, are split: the
/// first `test` go to the test split, the next `val` to validation, the rest to training.
struct HeldOut {
  size_t test = 0, val = 0;
  /// The split of D that example I of the group goes to.
  std::vector<Example>& split_of(DataSplits& d, size_t i) const {
    return i < test ? d.test : i < test + val ? d.val : d.train;
  }
};
/// The counts S's test and validation shares take of N (ratio_count of each).
HeldOut held_out(size_t n, const GenomeSettings& s);

/// Fisher-Yates over V with RNG (the order every split of the data plugins is drawn in).
template <class T>
void seeded_shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

/// Examples a ratio takes of N (rounded to nearest).
size_t ratio_count(size_t n, double ratio);

/// ConfigError "PLUGIN: split `NAME` is empty (HINT)" for the first empty split of D.
void require_nonempty_splits(const DataSplits& d, const std::string& plugin,
                             const std::string& hint);

}  // namespace gf
