// Resuming a run from its directory: the plugin folders its plugins.lock names, the resolved
// config checked against its checksum, and the loop restarted at the last checkpoint.
#include <cstring>
#include <filesystem>
#include <iostream>
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
// The plugin folders a resume searches: --plugin-path first, then the folders of the libraries
// the run's plugins.lock names (so a plugin found through --plugin-path when the run started
// needs no flag again). Lock entries whose library is gone are returned in MISSING.
std::vector<std::string> resume_plugin_paths(const RunDir& dir, std::vector<std::string> paths,
                                             std::vector<PluginLock>* missing) {
  std::error_code ec;
  if (!fs::exists(dir.plugins_lock(), ec)) return paths;
  for (const PluginLock& l : read_plugin_lock(dir)) {
    if (!fs::is_regular_file(l.path, ec)) {
      missing->push_back(l);
      continue;
    }
    std::string folder = fs::path(l.path).parent_path().string();
    if (std::find(paths.begin(), paths.end(), folder) == paths.end()) paths.push_back(folder);
  }
  return paths;
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
  std::vector<PluginLock> missing;
  flags.plugin_paths = resume_plugin_paths(dir, flags.plugin_paths, &missing);
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
  return ex->restart(run_dir, flags);
}

}  // namespace gf
