// Private to the registry's translation units: the registry's table of components and
// libraries, and the calls between its parts (core/src/registry.cpp: registration, lookup and
// creation; registry_loader.cpp: reading, checking and loading plugin files and the search
// path; registry_elf.cpp: the ELF check before dlopen; registry_probe.cpp: loading new files in
// a child process first). Not installed.
#pragma once

#include <boost/dll/shared_library.hpp>

#include <any>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/errors.hpp"
#include "growformer/registry.hpp"

namespace gf {

struct Registry::Impl {
  struct Entry {
    // declared first so it is destroyed last, after the factories whose code it holds
    std::shared_ptr<boost::dll::shared_library> lib;  // null for built-ins
    ComponentInfo info;
    std::any factory;  // the kind's factory type (AttentionFactory, HeadFactory, ...)
  };
  std::vector<Entry> entries;
  std::vector<LoadedLibrary> loaded;
  std::vector<FailedLibrary> failed;
  std::set<std::string> loaded_names;          // file names already loaded (first on the path wins)
  std::set<std::string> tried;                 // canonical paths of the files tried
  std::vector<std::string> failed_components;  // of the last register callback that failed
  // while a library's register callback runs:
  std::shared_ptr<boost::dll::shared_library> current_lib;
  std::string current_plugin, current_path;

  Entry& add(Kind kind, ComponentSpec spec) {
    for (const auto& e : entries)
      if (e.info.kind == kind && e.info.spec.name == spec.name)
        throw RuntimeError(std::string(kind_name(kind)) + " component `" + spec.name +
                           "` registered twice: first by " +
                           (e.info.library.empty() ? "the core" : e.info.library) + ", again by " +
                           (current_path.empty() ? "the core" : current_path));
    Entry e;
    e.info.kind = kind;
    e.info.spec = std::move(spec);
    e.info.plugin = current_plugin;
    e.info.library = current_path;
    e.lib = current_lib;
    entries.push_back(std::move(e));
    return entries.back();
  }

  const Entry& lookup(Kind kind, const ConfigNode& node, std::string* name_out) const {
    ConfigNode p = node.child("plugin");
    if (!node.valid() || !p.valid()) {
      std::string where = node.valid() ? node.location() : node.path();
      throw ConfigError(where + ": `" + node.path() + "`: missing `plugin:` key naming the " +
                        kind_name(kind) + " component (known: " + known(kind) + ")");
    }
    std::string name = p.as_string();
    *name_out = name;
    for (const auto& e : entries)
      if (e.info.kind == kind && e.info.spec.name == name) return e;
    std::vector<std::string> names;
    for (const auto& e : entries)
      if (e.info.kind == kind) names.push_back(e.info.spec.name);
    std::string dym = did_you_mean(name, names);
    // the key's path too: a `plugin:` nested in an option (incrt_gate's `inner`) is named
    std::string msg = p.location() + ": `" + p.path() + "`: unknown " + kind_name(kind) +
                      " plugin `" + name + "`" +
                      (dym.empty() ? "" : "; did you mean `" + dym + "`?") + "\n  known " +
                      kind_name(kind) + " components: " + known(kind);
    if (!failed.empty()) {
      msg += "\n  libraries that failed to load:";
      for (const auto& f : failed) msg += "\n    " + f.path + ": " + f.error;
    }
    if (loaded.empty())
      msg +=
          "\n  no plugin library was found on the search path; set --plugin-path or "
          "GROWFORMER_PLUGIN_PATH";
    throw ConfigError(msg);
  }

  std::string known(Kind kind) const {
    std::string s;
    for (const auto& e : entries)
      if (e.info.kind == kind) {
        if (!s.empty()) s += ", ";
        s += e.info.spec.name + " (" + (e.info.library.empty() ? "core" : e.info.library) + ")";
      }
    return s.empty() ? "none" : s;
  }
};

namespace registry_detail {

// An exception a library's static initialiser threw out of dlopen: the loader's state is then
// not to be trusted (its lock is left held), so such a library is only ever met in a probe child.
struct StaticInitError : RuntimeError {
  using RuntimeError::RuntimeError;
};

/// True in a probe's child process: libraries are loaded directly there.
bool in_probe_child();

/// Loads FILES in a child process first; returns, for each file that would end this process,
/// the reason. Defined in registry_probe.cpp.
std::map<std::string, std::string> probe_in_child(const std::vector<std::string>& files);

}  // namespace registry_detail
}  // namespace gf
