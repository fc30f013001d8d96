// Summary of a loaded data set: what `growformer data stats CONFIG` prints.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "growformer/dataset.hpp"

namespace gf {

/// Sizes, class counts and sequence lengths of one split.
struct SplitStats {
  std::string name;                  // "train", "val" or "test"
  size_t size = 0;                   // examples
  std::vector<size_t> class_counts;  // num_classes entries
  size_t len_min = 0, len_p50 = 0, len_p90 = 0, len_p95 = 0, len_p99 = 0, len_max = 0;
  double len_mean = 0.0;
  size_t truncated = 0;  // sequences longer than DataStats::max_len (the model's limit)
  size_t tokens = 0;     // total tokens
};

struct DataStats {
  std::vector<SplitStats> splits;  // train, val, test
  size_t vocab_size = 0;
  size_t num_classes = 0;
  std::vector<std::string> class_names;  // num_classes entries ("0", "1", ... when unnamed)
  size_t max_len = 0;                    // the limit truncation is counted against (0 = none)
  size_t dataset_max_len = 0;            // DataSplits::max_len: longest sequence the data set emits
};

/// Percentiles use the nearest-rank rule: the smallest length with at least p% of
/// the sequences at or below it. `max_len` 0 counts no truncation.
DataStats compute_stats(const DataSplits& splits, size_t max_len);

/// A fixed-width text table of the statistics.
std::string format_stats_table(const DataStats& stats);

/// The statistics as a JSON document (keys as in the structs).
std::string stats_json(const DataStats& stats);

}  // namespace gf
