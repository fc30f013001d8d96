// Datasets produce tokenised train/validation/test splits and their vocabulary.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "growformer/config.hpp"

GROWFORMER_API_BEGIN

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
  /// What the plugin needs, beyond `vocab` and `class_names`, to tokenise new data exactly as
  /// this data was tokenised (a vocabulary built from the training split, label spellings,
  /// tokenizer options), as JSON text; "" when nothing. Saved in checkpoints and handed back
  /// through DatasetBuild::tokenizer by `eval` and `predict`.
  std::string tokenizer;
};

/// One unlabelled input read for prediction.
struct Record {
  std::string id;               // record id (FASTA id, id column, or the line number)
  std::vector<int32_t> tokens;  // as the training data was tokenised
  size_t line = 0;              // 1-based line (FASTA: header line) in the input
  std::string error;            // non-empty: the record is bad (tokens empty); reading continues
};

/// Streams the records of one input file.
class RecordReader {
 public:
  virtual ~RecordReader() = default;
  /// The next record into `r` (a bad one has `r.error` set); false at the end of the input.
  /// Throws ConfigError when the file itself cannot be read.
  virtual bool next(Record& r) = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Builds the splits; throws ConfigError (bad options/paths) or RuntimeError
  /// (bad data) naming the file and line or record.
  virtual DataSplits load() = 0;
  virtual std::string describe() const = 0;
  /// Opens an input of unlabelled records (`growformer predict`), tokenised with the tokenizer
  /// handed in through DatasetBuild::tokenizer. Datasets without a record format refuse.
  virtual std::unique_ptr<RecordReader> open_records(const std::string& path) {
    throw ConfigError(describe() + ": this dataset has no record format to predict on (" + path +
                      ")");
  }
};

struct DatasetBuild {
  uint64_t seed = 0;
  /// Non-empty: DataSplits::tokenizer of a checkpoint; the dataset tokenises with it (a saved
  /// vocabulary instead of one built from the training split) and maps labels to the saved
  /// classes, refusing labels the checkpoint does not know.
  std::string tokenizer;
  /// With a tokenizer: "train", "val" or "test" when only that split is wanted (`eval --split`);
  /// a dataset may then leave the other splits empty and skip reading their files. "" = all.
  std::string only;
};

}  // namespace gf

GROWFORMER_API_END
