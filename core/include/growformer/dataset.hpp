// Datasets produce tokenised train/validation/test splits and their vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gf {

struct Example {
  std::vector<int32_t> tokens;  // ids in [0, vocab_size); never the pad id
  int32_t label = 0;            // in [0, num_classes)
};

struct DataSplits {
  std::vector<Example> train, val, test;
  size_t vocab_size = 0;  // including the pad id
  int32_t pad_id = 0;
  size_t num_classes = 0;
  std::vector<std::string> class_names;  // optional, num_classes entries
  std::vector<std::string> vocab;        // optional, id -> token text
  size_t max_len = 0;                    // longest sequence the dataset emits
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Builds the splits; throws ConfigError (bad options/paths) or RuntimeError
  /// (bad data) naming the file and line or record.
  virtual DataSplits load() = 0;
  virtual std::string describe() const = 0;
};

struct DatasetBuild {
  uint64_t seed = 0;
};

}  // namespace gf
