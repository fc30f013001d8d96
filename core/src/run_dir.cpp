#include "growformer/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "growformer/checkpoint.hpp"
#include "growformer/config.hpp"
#include "growformer/errors.hpp"
#include "log_lines.hpp"

namespace gf {

namespace fs = std::filesystem;

RunDir::RunDir(std::string root) : root_(std::move(root)) {}

namespace {
// Empty, or only what a run killed before writing its configuration leaves: a lock file, an
// empty checkpoints/ folder and temporaries. Such a directory is taken again by `train --run-dir`.
bool never_started(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (n == ".lock" && e.is_regular_file(ec)) continue;
    size_t at = n.rfind(".tmp-");  // a killed writer's temporary (removed under the lock)
    if (at != std::string::npos && n.size() == at + 11 && e.is_regular_file(ec)) continue;
    if (n == "checkpoints" && e.is_directory(ec) && fs::is_empty(e.path(), ec)) continue;
    return false;
  }
  return !ec;
}
}  // namespace

RunDir RunDir::create(const std::string& requested, const std::string& name) {
  std::string dir = requested;
  if (dir.empty()) {
    bool plain = !name.empty() && name != "." && name != ".." && name.size() <= 200;
    for (char c : name) plain = plain && c != '/' && static_cast<unsigned char>(c) >= 0x20;
    if (!plain)
      throw ConfigError("`name: " + name.substr(0, 60) +
                        "` cannot name a run directory under runs/ (use letters, digits, `-`, `_`, "
                        "`.`; not `.` or `..`), or pass --run-dir");
    dir = (fs::path("runs") / name).string();
    for (int i = 2; fs::exists(dir); ++i) dir = (fs::path("runs") / name).string() + "-" + std::to_string(i);
  } else if (fs::exists(dir) && !never_started(dir)) {
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

void RunDir::refuse_restart_over_best() const {
  std::error_code ec;
  if (fs::exists(best_checkpoint(), ec))
    throw RuntimeError(root_ + ": has " + best_checkpoint() + " but no " + last_checkpoint() +
                       ": starting the run again from step 0 would overwrite it. To continue "
                       "from the best checkpoint's step, copy it to " + last_checkpoint() +
                       " and resume; to start again, move it away first");
}

bool RunDir::recover_last_from_best() const {
  std::error_code ec;
  if (fs::exists(last_checkpoint(), ec) || !fs::exists(best_checkpoint(), ec)) return false;
  RunDir locked(root_);
  locked.lock();  // no process runs this run now, so its best checkpoint stays as it is
  if (fs::exists(last_checkpoint(), ec)) return false;
  // through a load: a damaged best is refused (naming it), not copied
  save_checkpoint(last_checkpoint(), load_checkpoint(best_checkpoint()));
  return true;
}

void RunDir::reset_logs() const {
  write(metrics(), "");
  write(events(), "");
}

void RunDir::write(const std::string& path, const std::string& text) const {
  write_file_durably(path, {{text.data(), text.size()}});
}

void RunDir::lock() {
  std::string path = file(".lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(path + ": cannot create the run directory's lock: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw RuntimeError(root_ + ": the run directory is in use by another growformer process (pid " +
                       printable(pid, 20) + "); wait for it to finish or stop it first");
  }
  std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t w = ::pwrite(fd, me.data(), me.size(), 0);
    (void)w;
  }
  // temporaries of a writer killed mid-write (the lock says none is running now)
  for (const std::string& d : {root_, checkpoints()}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      std::string n = e.path().filename().string();
      size_t at = n.rfind(".tmp-");
      if (at != std::string::npos && n.size() == at + 11) fs::remove(e.path(), ec);
    }
  }
  // held until the process ends; kill -9 releases it with the process
  lock_fd_ = std::shared_ptr<int>(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
}

namespace {
void truncate_jsonl(const RunDir& dir, const std::string& path, long max_step) {
  std::string keep;
  bool exists = for_each_log_line(path, [&](size_t, const std::string& line) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", 0L) <= max_step && j.value("split", "") != "test") keep += line + "\n";
    } catch (...) {
      // a torn last line from a crash: drop it
    }
  });
  if (exists) dir.write(path, keep);
}
}  // namespace

void RunDir::rewind_logs(long step) const {
  truncate_jsonl(*this, metrics(), step);
  truncate_jsonl(*this, events(), step);
}

}  // namespace gf
