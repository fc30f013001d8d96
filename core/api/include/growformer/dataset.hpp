// Datasets produce tokenised train/validation/test splits and their vocabulary.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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

/// Data a front end holds in memory (Python lists, numpy arrays, DataFrames), one split: inputs
/// of one kind (MemoryData::kind) and, except for inputs to predict on, one label each.
struct MemorySplit {
  std::string name;                            // "train", "val" or "test"
  std::vector<std::string> texts;              // kind "texts"
  std::vector<std::vector<double>> sequences;  // kinds "ids" (whole numbers >= 0) and "numbers"
  std::vector<uint8_t> pixels;                 // kind "images": size() x height x width
  size_t height = 0, width = 0;
  std::vector<std::string> labels;  // ints as their decimal text; empty: no labels (predict)
  size_t size() const {
    return !texts.empty()       ? texts.size()
           : !sequences.empty() ? sequences.size()
           : height && width    ? pixels.size() / (height * width)
                                : 0;
  }
};

struct MemoryData {
  /// "texts", "ids" (token id sequences), "numbers" (sequences of real numbers) or "images"
  /// (grey levels 0..255, every image of one size).
  std::string kind;
  bool int_labels = false;  // the labels were given as ints (else as strings)
  std::vector<MemorySplit> splits;
};

/// What a dataset does with data in memory: stage it for training, evaluate it, or predict on it.
enum class StagePurpose { train, evaluate, predict };

/// Where a table (a pandas DataFrame) holds a dataset's inputs and labels.
struct DataColumns {
  /// The input column: the first of these the table has; "*" = every column but the label's, in
  /// order, as one sequence of numbers per row. `input_option` names the option that sets it.
  std::vector<std::string> input, label;
  std::string input_option, label_option;
  /// The data section names the column (a table without it is an error naming the option).
  bool input_set = false, label_set = false;
};

/// A file staging wrote into its folder.
struct StagedFile {
  std::string option;  // the data option that names it (the front end writes the folder's path)
  std::string name;    // its name in the folder
  std::string split;   // the split of the data it holds
  /// Line N of the file holds row N-1 of the split: an error naming FILE:N names that row.
  bool line_per_row = false;
};

/// What staging wrote into its folder and the data options that read it.
struct StagedData {
  std::vector<StagedFile> files;
  /// Other data options KEY -> YAML value (a format, the columns, a tokenizer).
  std::vector<std::pair<std::string, std::string>> options;
  /// For StagePurpose::predict, instead of a test split: a file of records in the folder, which
  /// the front end reads with Dataset::open_records.
  std::string records;
};

/// What a dataset plugin tells the front ends about the data it reads besides the files its
/// options name, so that `growformer eval --data FILE`, the Python module's in-memory data,
/// evaluate(data=...) and predict(...) work for it without naming it. Registered with the
/// dataset (Registry::add_dataset) and used without building one: a config with data in memory
/// names no files yet. Every method may be left as it is (the dataset takes none of it).
class DataFormats {
 public:
  virtual ~DataFormats() = default;
  /// The kinds of inputs it takes in memory (MemoryData::kind); empty: none.
  virtual std::vector<std::string> kinds() const { return {}; }
  /// The kinds it is the dataset for when a config with data in memory names no data plugin.
  virtual std::vector<std::string> default_for() const { return {}; }
  /// The columns of a table for the data section SECTION (the config's, for PURPOSE train; a
  /// checkpoint's resolved one otherwise).
  virtual DataColumns columns(const ConfigNode& section, StagePurpose purpose) const {
    (void)section;
    (void)purpose;
    return {};
  }
  /// The data options that name data files: a config that sets one and gives data in memory
  /// gives the data twice.
  virtual std::vector<std::string> file_options() const { return {}; }
  /// Checks one split of data in memory before it is staged (a rule of the dataset's files the
  /// front end cannot know); ConfigError naming WHERE (`data['train']`) and the row.
  virtual void check_split(const MemoryData& data, const MemorySplit& split,
                           const std::string& where) const {
    (void)data;
    (void)split;
    (void)where;
  }
  /// Writes DATA into FOLDER as the dataset's own files for PURPOSE: train (the splits given;
  /// the dataset carves those missing as its options say), evaluate (one labelled split,
  /// "test") or predict (one split "test" without labels, read back as its test split, or
  /// written as a file of records, StagedData::records).
  /// SECTION is the data section (as for columns()). ConfigError for data it cannot take.
  virtual StagedData stage(const MemoryData& data, const ConfigNode& section,
                           const std::string& folder, StagePurpose purpose) const {
    (void)data;
    (void)section;
    (void)folder;
    (void)purpose;
    throw ConfigError("this dataset takes no data in memory");
  }
  /// The data options ("KEY=VALUE") that read the labelled file PATH as the test split
  /// (`growformer eval CHECKPOINT --data FILE`, the module's evaluate(data=PATH)), or none when
  /// the dataset reads no single labelled file. PATH is absolute.
  virtual std::vector<std::string> test_file_options(const std::string& path) const {
    (void)path;
    return {};
  }
  /// What kind of files test_file_options reads, for messages ("a TSV, CSV or JSON lines file").
  virtual std::string test_file_kind() const { return ""; }
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
  /// The records of strings given to predict (the Python module's predict and tokenize), one
  /// record per string, its id the string's index, tokenised as open_records tokenises a file's;
  /// null when the dataset reads no strings as records. A record that is bad has Record::error
  /// set; a string that can be no record at all is a ConfigError naming `input I`.
  virtual std::unique_ptr<RecordReader> open_strings(const std::vector<std::string>& inputs) {
    (void)inputs;
    return nullptr;
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
