// Resuming a run from its directory: the plugin folders its plugins.lock names, the resolved
// config checked against its checksum, and the loop restarted at the last checkpoint.
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "growformer/checkpoint.hpp"
#include "growformer/run_events.hpp"
#include "trainer_impl.hpp"

namespace gf {

namespace fs = std::filesystem;
using trainer_detail::config_dir_of;
using trainer_detail::kConfigDirLine;
using trainer_detail::read_resolved_config;

namespace {
std::string folder_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return (ec ? fs::path(path) : p).lexically_normal().string();
}

// A folder plugins.lock adds to the search path holds only the libraries the lock names, as they
// were when the run started: each checked against the lock's checksum before anything loads
// it (a library's static constructors run when it is loaded), any other libgf_*.so refused.
void check_locked_folder(const RunDir& dir, const std::string& folder,
                         const std::vector<PluginLock>& locked) {
  const std::string use_as_is =
      "; resume loads only the libraries the run used, as they were: put that build back, or "
      "give `--plugin-path " +
      printable(folder) + "` to load the folder as it is now";
  std::set<std::string> names;
  for (const PluginLock& l : locked) {
    names.insert(fs::path(l.path).filename().string());
    const std::string found = Registry::library_checksum(l.path);
    if (found != l.checksum)
      throw RuntimeError(dir.plugins_lock() + ": plugin `" + printable(l.plugin) + "` " +
                         printable(l.version) + " from " + printable(l.path) +
                         ": checksum expected " + printable(l.checksum) + ", found " + found +
                         " (the file changed since the run started)" + use_as_is);
  }
  std::error_code ec;
  for (const auto& ent : fs::directory_iterator(folder, ec)) {
    const std::string name = ent.path().filename().string();
    if (name.rfind("libgf_", 0) == 0 && ent.path().extension() == ".so" && !names.count(name))
      throw RuntimeError(dir.plugins_lock() + ": " + printable(ent.path().string()) +
                         " is a plugin library the run did not use (plugins.lock names in that "
                         "folder only " +
                         printable(fs::path(locked.front().path).filename().string()) +
                         (locked.size() > 1 ? " and others" : "") + ")" + use_as_is);
  }
}

// The plugin folders a resume searches: --plugin-path first, then the folders of the libraries
// the run's plugins.lock names (so a plugin found through --plugin-path when the run started
// needs no flag again), each checked by check_locked_folder unless it is searched anyway (given,
// GROWFORMER_PLUGIN_PATH, built in). Lock entries whose library is gone are returned in MISSING.
std::vector<std::string> resume_plugin_paths(const RunDir& dir, std::vector<std::string> paths,
                                             std::vector<PluginLock>* missing,
                                             std::vector<PluginLock>* checked) {
  std::error_code ec;
  if (!fs::exists(dir.plugins_lock(), ec)) return paths;
  std::set<std::string> searched;
  for (const std::string& d : Registry::search_path(paths)) searched.insert(folder_of(d));
  std::map<std::string, std::vector<PluginLock>> added;  // folder -> its locked libraries
  for (const PluginLock& l : read_plugin_lock(dir)) {
    if (!fs::is_regular_file(l.path, ec)) {
      missing->push_back(l);
      continue;
    }
    std::string folder = fs::path(l.path).parent_path().string();
    if (searched.count(folder_of(folder))) continue;
    added[folder].push_back(l);
    checked->push_back(l);
    if (std::find(paths.begin(), paths.end(), folder) == paths.end()) paths.push_back(folder);
  }
  for (const auto& [folder, locked] : added) check_locked_folder(dir, folder, locked);
  return paths;
}

// The version each checked library reports, once loaded, against the lock's (the checksums
// matched, so this holds unless the lock was edited).
void check_versions(const RunDir& dir, Registry& registry, const std::vector<PluginLock>& checked) {
  for (const PluginLock& l : checked)
    for (const LoadedLibrary& got : registry.libraries())
      if (folder_of(got.path) == folder_of(l.path) && got.version != l.version)
        throw RuntimeError(dir.plugins_lock() + ": plugin `" + printable(l.plugin) + "` from " +
                           printable(l.path) + ": version expected " + printable(l.version) +
                           ", found " + printable(got.version));
}

// A configuration error of a resume, with the lock's libraries that are missing now (a
// component the run used may have come from one of them).
[[noreturn]] void rethrow_with_missing(const ConfigError& e, const RunDir& dir,
                                       const std::vector<PluginLock>& missing) {
  if (missing.empty()) throw e;
  std::string msg = e.what();
  msg += "\n  " + dir.plugins_lock() + " names libraries that are missing now (moved or deleted?):";
  for (const PluginLock& l : missing)
    msg += "\n    plugin `" + l.plugin + "` " + l.version + " from " + l.path;
  msg += "\n  put the library back there, or give `--plugin-path DIR` with the folder it is in now";
  throw ConfigError(msg);
}
}  // namespace

int resume_run(const std::string& run_dir, const RunFlags& flags_in) {
  RunDir dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    throw RuntimeError(run_dir + (fs::exists(run_dir, ec)
                                      ? ": not a directory (a file); `resume` continues a run "
                                        "directory, e.g. runs/NAME, that `train` made"
                                      : ": no such run directory"));
  RunFlags flags = flags_in;
  std::vector<PluginLock> missing, checked;
  flags.plugin_paths = resume_plugin_paths(dir, flags.plugin_paths, &missing, &checked);
  // stopped between writing the best and the last checkpoint: continue from the best (rank 0
  // copies it; the others look for last after it)
  Communicator* comm = flags.comm;
  bool recovered = (!comm || comm->root()) && dir.recover_last_from_best();
  if (comm && comm->size() > 1) recovered = comm->broadcast(recovered);
  if (recovered && !flags.quiet && (!comm || comm->root()))
    std::cout
        << run_dir << ": no checkpoints/last.safetensors (the run stopped between writing its best "
        << "and its last checkpoint); continuing from a copy of checkpoints/best.safetensors\n";
  if (fs::exists(dir.last_checkpoint(), ec)) {
    std::unique_ptr<Experiment> ex;
    try {
      ex = experiment_from_checkpoint(dir.last_checkpoint(), flags.plugin_paths);
    } catch (const ConfigError& e) {
      rethrow_with_missing(e, dir, missing);
    }
    check_versions(dir, ex->registry(), checked);
    return ex->resume(run_dir, flags);
  }
  dir.refuse_restart_over_best();
  if (!fs::exists(dir.resolved_config(), ec))
    throw RuntimeError(
        run_dir +
        ": not a run directory, or a run stopped before writing its "
        "configuration (no checkpoints/last.safetensors and no config.resolved.yaml); "
        "start it with `growformer train CONFIG --run-dir " +
        run_dir + "`");
  // stopped before its first checkpoint: the same run again, from its resolved configuration
  std::string text = read_resolved_config(dir);
  std::string base_dir;
  std::istringstream lines(text);
  std::string line;
  for (int i = 0; i < 3 && std::getline(lines, line); ++i)
    if (line.rfind(kConfigDirLine, 0) == 0)
      base_dir = config_dir_of(line.substr(std::strlen(kConfigDirLine)));
  ConfigNode cfg = ConfigNode::load_string(text, dir.resolved_config(), base_dir);
  std::unique_ptr<Experiment> ex;
  try {
    ex = std::make_unique<Experiment>(cfg, flags.plugin_paths);
  } catch (const ConfigError& e) {
    rethrow_with_missing(e, dir, missing);
  }
  check_versions(dir, ex->registry(), checked);
  return ex->restart(run_dir, flags);
}

}  // namespace gf
