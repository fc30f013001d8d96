// Strict configuration: a view over YAML that records which keys were read.
// A key nobody consumed, a wrong type, an out-of-range value or a duplicate key
// is a ConfigError naming the dotted path, file:line:column, the valid keys and
// a did-you-mean.
#pragma once
#include "growformer/export.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "growformer/errors.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// Closest candidate by edit distance, or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

/// `s` made safe to print in a message: control bytes and invalid UTF-8 as \xNN (newlines and
/// tabs kept), and every line longer than `max_line` bytes cut with "... (N more bytes)".
std::string printable(const std::string& s, size_t max_line = 1000);

/// What `read_file_capped` found.
enum class CappedRead { ok, too_large, unreadable };
/// Reads the file at PATH whole into TEXT, counting the bytes as they are read: a device or a
/// pipe reports a size of 0, so the size the file system gives is never trusted. `too_large`
/// (TEXT then holds the first MAX_BYTES) when the file has more than MAX_BYTES; `unreadable`
/// (errno set) when it cannot be opened or a read fails.
CappedRead read_file_capped(const std::string& path, size_t max_bytes, std::string& text);

/// A node of a loaded configuration document.
class ConfigNode {
 public:
  ConfigNode();
  /// Loads a file (throws ConfigError with file:line:column on malformed YAML
  /// or a duplicate key).
  static ConfigNode load_file(const std::string& path);
  static ConfigNode load_string(const std::string& text, const std::string& name = "<string>",
                                const std::string& base_dir = "");
  /// Applies "a.b.c=value" (value parsed as YAML) before anything is read.
  void apply_override(const std::string& assignment);

  bool valid() const;
  bool is_map() const;
  bool is_scalar() const;
  bool is_sequence() const;
  bool has(const std::string& key) const;
  /// The child under key (an invalid node when absent).
  ConfigNode child(const std::string& key) const;
  std::vector<std::string> keys() const;
  std::vector<ConfigNode> items() const;  // sequence elements

  std::string path() const;      // dotted path from the root, e.g. "model.attention.heads"
  std::string location() const;  // "file:line:col"
  /// Adds key: value (YAML text) to this mapping when absent (defaults made explicit);
  /// returns the new child, or an invalid node when nothing was added.
  ConfigNode insert_default(const std::string& key, const std::string& yaml_text,
                            bool consumed) const;
  /// Removes KEY from this mapping (nothing when absent or not a mapping).
  void remove(const std::string& key) const;
  /// Location of a key of this mapping (where the key itself is written).
  std::string key_location(const std::string& key) const;
  /// "file:line:col: `path`: msg" as a ConfigError.
  [[noreturn]] void fail(const std::string& msg) const;

  // Scalar access marks the node consumed; conversions check the type.
  std::string as_string() const;
  int64_t as_int() const;
  double as_float() const;
  bool as_bool() const;
  void mark_consumed() const;  // marks this node and everything below it

  /// Errors on the first key nobody consumed (listing valid keys of its parent).
  void check_all_consumed() const;
  /// The whole document back as YAML text (for config.resolved.yaml).
  std::string dump() const;
  /// Directory of the file this node came from ("" for strings).
  std::string base_dir() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  explicit ConfigNode(std::shared_ptr<Impl> impl);
};

enum class OptType { Int, Float, Bool, String, IntList, FloatList, StringList, Component, Any };
const char* opt_type_name(OptType t);

/// One declared option of a plugin: name, type, default (YAML text, "" = required), doc.
struct OptionSpec {
  std::string name;
  OptType type = OptType::String;
  std::string default_value;  // YAML text; "~" means "no value" (optional, unset)
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // for strings; empty = any
  bool required = false;
  /// "KEY=VALUE" when the option belongs to one mode of its component (listops' `min_length`:
  /// "source=generate"); "" = every mode. `eval --set data.KEY=...` that switches the mode drops
  /// the other mode's options from a checkpoint's embedded config.
  std::string mode;
};
using OptionSpecs = std::vector<OptionSpec>;

/// One declared option; an empty default makes it required.
OptionSpec make_option(std::string name, OptType type, std::string default_value, std::string doc,
                       double min = -std::numeric_limits<double>::infinity(),
                       double max = std::numeric_limits<double>::infinity(),
                       std::vector<std::string> choices = {});

/// Validated options of one component instance.
class Options {
 public:
  Options() = default;
  /// Reads every key of `node` against `specs` (unknown key -> ConfigError).
  Options(const ConfigNode& node, const OptionSpecs& specs, const std::string& component);

  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;
  std::vector<double> get_float_list(const std::string& name) const;
  std::vector<std::string> get_string_list(const std::string& name) const;
  /// The config sub-tree of a Component option (e.g. attention.head).
  ConfigNode get_node(const std::string& name) const;
  /// True when the document gives the key (even with its default value).
  bool is_set(const std::string& name) const;
  /// True when the document gives the key with a value other than its declared default. Resolved
  /// configs (run directories, checkpoints) spell out every default, so "an option of another
  /// mode was used" checks must ask this, not is_set.
  bool differs_from_default(const std::string& name) const;
  bool has_value(const std::string& name) const;
  /// Location of the option for error messages: FILE:LINE:COL (or `--set KEY`) where it is
  /// given; where it is not, the component's location and "(`KEY` not set: its default)".
  std::string where(const std::string& name) const;
  [[noreturn]] void fail(const std::string& name, const std::string& msg) const;
  const std::string& component() const { return component_; }
  /// Directory relative paths in options are resolved against.
  std::string resolve_path(const std::string& p) const;

 private:
  struct Value {
    ConfigNode node;  // invalid when defaulted
    std::string text;
    bool given = false;
    bool defaulted_in_doc = false;  // the default was written into the document
    OptType type = OptType::String;
  };
  std::map<std::string, Value> values_;
  std::map<std::string, std::string> defaults_;
  std::string component_;
  std::string base_dir_;
  std::string path_;
  std::string node_where_;  // where the component's mapping is written ("" for a default one)
  const Value& find(const std::string& name) const;
};

}  // namespace gf

GROWFORMER_API_END
