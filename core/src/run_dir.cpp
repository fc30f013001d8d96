#include "growformer/run_dir.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "growformer/errors.hpp"

namespace gf {

namespace fs = std::filesystem;

RunDir::RunDir(std::string root) : root_(std::move(root)) {}

RunDir RunDir::create(const std::string& requested, const std::string& name) {
  std::string dir = requested;
  if (dir.empty()) {
    dir = (fs::path("runs") / name).string();
    for (int i = 2; fs::exists(dir); ++i) dir = (fs::path("runs") / name).string() + "-" + std::to_string(i);
  } else if (fs::exists(dir) && !fs::is_empty(dir)) {
    throw ConfigError(dir + ": the run directory exists and is not empty (choose another "
                      "--run-dir, or `growformer resume " + dir + "`)");
  }
  RunDir r(dir);
  fs::create_directories(r.checkpoints());
  return r;
}

RunDir RunDir::of_checkpoint(const std::string& checkpoint_path) {
  return RunDir(fs::path(checkpoint_path).parent_path().parent_path().string());
}

std::string RunDir::file(const char* name) const { return (fs::path(root_) / name).string(); }
std::string RunDir::resolved_config() const { return file("config.resolved.yaml"); }
std::string RunDir::plugins_lock() const { return file("plugins.lock"); }
std::string RunDir::metrics() const { return file("metrics.jsonl"); }
std::string RunDir::events() const { return file("events.jsonl"); }
std::string RunDir::checkpoints() const { return file("checkpoints"); }
std::string RunDir::last_checkpoint() const {
  return (fs::path(checkpoints()) / "last.safetensors").string();
}
std::string RunDir::best_checkpoint() const {
  return (fs::path(checkpoints()) / "best.safetensors").string();
}

void RunDir::reset_logs() const {
  std::ofstream(metrics(), std::ios::trunc);
  std::ofstream(events(), std::ios::trunc);
}

namespace {
void truncate_jsonl(const std::string& path, long max_step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", 0L) <= max_step && j.value("split", "") != "test") keep.push_back(line);
    } catch (...) {
      // a torn last line from a crash: drop it
    }
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (auto& l : keep) out << l << "\n";
}
}  // namespace

void RunDir::rewind_logs(long step) const {
  truncate_jsonl(metrics(), step);
  truncate_jsonl(events(), step);
}

}  // namespace gf
