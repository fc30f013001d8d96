// The registry of components by kind and name, and the plugin loader.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "growformer/attention.hpp"
#include "growformer/config.hpp"
#include "growformer/dataset.hpp"
#include "growformer/growth.hpp"
#include "growformer/optimizer.hpp"

GROWFORMER_API_BEGIN

namespace gf {

enum class Kind { Attention, Head, Growth, Pruning, Dataset, Optimizer };
const char* kind_name(Kind k);

/// What a component declares about itself.
struct ComponentSpec {
  std::string name;
  std::string doc;  // one line (more lines: details `plugins describe` prints, not the lists)
  OptionSpecs options;
};

using AttentionFactory =
    std::function<std::unique_ptr<AttentionBlock>(const Options&, const AttentionBuild&)>;
using HeadFactory = std::function<std::unique_ptr<Head>(const Options&, const HeadBuild&)>;
using GrowthFactory = std::function<std::unique_ptr<GrowthPolicy>(const Options&)>;
using DatasetFactory = std::function<std::unique_ptr<Dataset>(const Options&, const DatasetBuild&)>;
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(const Options&)>;

struct ComponentInfo {
  Kind kind;
  ComponentSpec spec;
  std::string plugin;   // library's plugin name
  std::string library;  // file it came from
  /// A dataset's formats (data in memory, files to evaluate); null: it reads only its files.
  std::shared_ptr<const DataFormats> formats;
};

struct LoadedLibrary {
  std::string path, plugin, version;
  std::string sha256;  // the file's checksum: Registry::library_checksum (FNV-1a 64, not SHA-256)
};
struct FailedLibrary {
  std::string path, error;
  /// the components its register callback had registered before it failed (none kept)
  std::vector<std::string> components;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // ---- registration (called from a plugin's register callback) ----
  void add_attention(ComponentSpec spec, AttentionFactory f);
  void add_head(ComponentSpec spec, HeadFactory f);
  void add_growth(ComponentSpec spec, GrowthFactory f);
  void add_pruning(ComponentSpec spec, GrowthFactory f);
  void add_dataset(ComponentSpec spec, DatasetFactory f);
  /// A dataset with FORMATS: the data it takes in memory and the files it evaluates
  /// (DataFormats in dataset.hpp).
  void add_dataset(ComponentSpec spec, DatasetFactory f,
                   std::shared_ptr<const DataFormats> formats);
  void add_optimizer(ComponentSpec spec, OptimizerFactory f);

  // ---- creation from a config node with a `plugin:` key ----
  // Objects keep the library that made them loaded for as long as they live. A block is
  // complete when returned: one whose heads can be edited has its starting heads (a block
  // built without any is refused, naming the plugin).
  std::shared_ptr<AttentionBlock> create_attention(const ConfigNode& node, const AttentionBuild& b);
  std::shared_ptr<Head> create_head(const ConfigNode& node, const HeadBuild& b);
  std::shared_ptr<GrowthPolicy> create_growth(const ConfigNode& node);
  std::shared_ptr<GrowthPolicy> create_pruning(const ConfigNode& node);
  std::shared_ptr<Dataset> create_dataset(const ConfigNode& node, const DatasetBuild& b);
  std::shared_ptr<Optimizer> create_optimizer(const ConfigNode& node);

  // ---- loading ----
  /// Loads one library; throws RuntimeError (load failure, ABI or fingerprint
  /// mismatch, missing entry point, duplicate component, throwing callback).
  void load_library(const std::string& path);
  /// Checks that `bytes` is a shared library this process can map (ELF class, byte order,
  /// machine and type; program and section headers and every segment inside the file) and that
  /// it defines the plugin entry point as a function. Empty when it is, else the reason.
  static std::string check_library_image(const uint8_t* bytes, size_t size);
  /// Loads every library in the given directories (first occurrence of a file name wins);
  /// failures are kept in failures() and reported when a component is not found. Each file is
  /// first loaded in a child process (once per process and file): a library whose static
  /// initialiser or register callback throws uncaught, crashes or hangs (30 s) is recorded as
  /// failed with the child's message instead of ending this process.
  void load_directories(const std::vector<std::string>& dirs);
  /// The checksum plugins.lock records of the library file PATH ("fnv1a64:HEX", FNV-1a 64 of
  /// its bytes: a check that the file is the one a run used, not a signature); read, never
  /// loaded. RuntimeError when it cannot be read.
  static std::string library_checksum(const std::string& path);
  /// --plugin-path entries, then GROWFORMER_PLUGIN_PATH, then the build tree, then the install
  /// tree.
  static std::vector<std::string> search_path(const std::vector<std::string>& cli_paths);

  std::vector<ComponentInfo> components() const;
  const ComponentInfo* find(Kind kind, const std::string& name) const;
  /// The formats of dataset NAME (null: unknown, or it has none).
  const DataFormats* data_formats(const std::string& name) const;
  /// The datasets that take data of KIND in memory (DataFormats::kinds), in name order; with
  /// DEFAULT_ONLY those that are the dataset for it when a config names none.
  std::vector<std::string> datasets_for(const std::string& kind, bool default_only) const;
  const std::vector<LoadedLibrary>& libraries() const;
  const std::vector<FailedLibrary>& failures() const;

  struct Impl;

 private:
  // The one registration and creation path every kind goes through.
  template <class Factory>
  void add(Kind kind, ComponentSpec spec, Factory f);
  template <class T, class... Build>
  std::shared_ptr<T> create(Kind kind, const ConfigNode& node, const Build&... build);

  std::unique_ptr<Impl> impl_;
};

}  // namespace gf

GROWFORMER_API_END
