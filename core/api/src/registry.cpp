// The registry: components registered by the core and by plugins, looked up and created by
// kind and name. Loading plugin files: registry_loader.cpp.
#include "growformer/registry.hpp"

#include <boost/dll/shared_library.hpp>

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <any>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "growformer/fields.hpp"
#include "growformer/plugin.hpp"
#include "registry_impl.hpp"

namespace gf {

namespace {
/// `lr`: the peak learning rate (the schedule's peak), declared here once for every optimizer
/// that does not declare it itself.
struct LrSettings {
  double lr = 1e-3;
  static const OptionTable<LrSettings>& table() {
    static const auto t = OptionTable<LrSettings>().add(
        "lr", &LrSettings::lr, "0.001", "peak learning rate (the trainer's schedule scales it)", 0,
        100);
    return t;
  }
};
}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Attention:
      return "attention";
    case Kind::Head:
      return "head";
    case Kind::Growth:
      return "growth";
    case Kind::Pruning:
      return "pruning";
    case Kind::Dataset:
      return "dataset";
    case Kind::Optimizer:
      return "optimizer";
  }
  return "?";
}

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

void Registry::add_attention(ComponentSpec spec, AttentionFactory f) {
  add(Kind::Attention, std::move(spec), std::move(f));
}
void Registry::add_head(ComponentSpec spec, HeadFactory f) {
  add(Kind::Head, std::move(spec), std::move(f));
}
void Registry::add_growth(ComponentSpec spec, GrowthFactory f) {
  add(Kind::Growth, std::move(spec), std::move(f));
}
void Registry::add_pruning(ComponentSpec spec, GrowthFactory f) {
  add(Kind::Pruning, std::move(spec), std::move(f));
}
void Registry::add_dataset(ComponentSpec spec, DatasetFactory f) {
  add(Kind::Dataset, std::move(spec), std::move(f));
}
void Registry::add_dataset(ComponentSpec spec, DatasetFactory f,
                           std::shared_ptr<const DataFormats> formats) {
  // the formats' code is the library's: every copy of the pointer holds the library too, which
  // is released after the formats
  struct Held {
    std::shared_ptr<boost::dll::shared_library> lib;
    std::shared_ptr<const DataFormats> formats;
  };
  auto held = std::make_shared<Held>(Held{impl_->current_lib, std::move(formats)});
  auto& e = impl_->add(Kind::Dataset, std::move(spec));
  e.factory = std::move(f);
  if (held->formats) e.info.formats = std::shared_ptr<const DataFormats>(held, held->formats.get());
}
void Registry::add_optimizer(ComponentSpec spec, OptimizerFactory f) {
  // Every optimizer takes its peak learning rate (the schedule's peak) under `lr`.
  const OptionSpec lr = LrSettings::table().specs().front();
  bool has_lr = false;
  for (const auto& o : spec.options) has_lr = has_lr || o.name == lr.name;
  if (!has_lr) spec.options.insert(spec.options.begin(), lr);
  add(Kind::Optimizer, std::move(spec), std::move(f));
}

template <class Factory>
void Registry::add(Kind kind, ComponentSpec spec, Factory f) {
  impl_->add(kind, std::move(spec)).factory = std::move(f);
}

namespace {
// The object's deleter holds the library: code is never unloaded under a live object.
template <class T>
std::shared_ptr<T> hold(std::unique_ptr<T> obj, std::shared_ptr<boost::dll::shared_library> lib,
                        const std::string& what) {
  if (!obj) throw RuntimeError(what + ": the factory returned nothing");
  T* raw = obj.release();
  return std::shared_ptr<T>(raw, [lib](T* p) { delete p; });
}

template <class F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigError&) {
    throw;
  } catch (const RuntimeError&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeError(what + " failed: " + e.what());
  }
}
}  // namespace

template <class T, class... Build>
std::shared_ptr<T> Registry::create(Kind kind, const ConfigNode& node, const Build&... build) {
  using Factory = std::function<std::unique_ptr<T>(const Options&, const Build&...)>;
  std::string name;
  const auto& e = impl_->lookup(kind, node, &name);
  std::string label = std::string(kind_name(kind)) + " `" + name + "`";
  Options opts(node, e.info.spec.options, label);
  std::string what = "creating " + label + " at " + node.location();
  const auto& factory = std::any_cast<const Factory&>(e.factory);
  auto obj = guarded(what, [&] { return hold(factory(opts, build...), e.lib, what); });
  if constexpr (std::is_same_v<T, Optimizer>) obj->peak_lr_ = LrSettings::table().read(opts).lr;
  return obj;
}

std::shared_ptr<AttentionBlock> Registry::create_attention(const ConfigNode& node,
                                                           const AttentionBuild& b) {
  auto block = create<AttentionBlock>(Kind::Attention, node, b);
  // A block whose heads can be edited is built with its starting heads (MultiHeadBlock's
  // constructor creates them); one without any would train as no attention at all.
  if (block->can_edit_heads() && block->num_heads() == 0)
    throw RuntimeError("creating attention `" + node.child("plugin").as_string() + "` at " +
                       node.location() + ": the block was built without heads (" +
                       block->describe() +
                       "); a block whose heads can be edited starts with at "
                       "least one");
  return block;
}
std::shared_ptr<Head> Registry::create_head(const ConfigNode& node, const HeadBuild& b) {
  return create<Head>(Kind::Head, node, b);
}
std::shared_ptr<GrowthPolicy> Registry::create_growth(const ConfigNode& node) {
  return create<GrowthPolicy>(Kind::Growth, node);
}
std::shared_ptr<GrowthPolicy> Registry::create_pruning(const ConfigNode& node) {
  return create<GrowthPolicy>(Kind::Pruning, node);
}
std::shared_ptr<Dataset> Registry::create_dataset(const ConfigNode& node, const DatasetBuild& b) {
  return create<Dataset>(Kind::Dataset, node, b);
}
std::shared_ptr<Optimizer> Registry::create_optimizer(const ConfigNode& node) {
  return create<Optimizer>(Kind::Optimizer, node);
}

std::vector<ComponentInfo> Registry::components() const {
  std::vector<ComponentInfo> out;
  for (const auto& e : impl_->entries) out.push_back(e.info);
  return out;
}

const ComponentInfo* Registry::find(Kind kind, const std::string& name) const {
  for (const auto& e : impl_->entries)
    if (e.info.kind == kind && e.info.spec.name == name) return &e.info;
  return nullptr;
}

const DataFormats* Registry::data_formats(const std::string& name) const {
  const ComponentInfo* info = find(Kind::Dataset, name);
  return info ? info->formats.get() : nullptr;
}

std::vector<std::string> Registry::datasets_for(const std::string& kind, bool default_only) const {
  std::vector<std::string> out;
  for (const auto& e : impl_->entries) {
    if (e.info.kind != Kind::Dataset || !e.info.formats) continue;
    const std::vector<std::string> kinds =
        default_only ? e.info.formats->default_for() : e.info.formats->kinds();
    if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) out.push_back(e.info.spec.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<LoadedLibrary>& Registry::libraries() const { return impl_->loaded; }
const std::vector<FailedLibrary>& Registry::failures() const { return impl_->failed; }

}  // namespace gf
