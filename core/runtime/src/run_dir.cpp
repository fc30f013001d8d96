#include "growformer/run_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

RunDirInUse::RunDirInUse(const std::string& msg, std::string pid)
    : RuntimeError(msg), pid_(std::move(pid)) {}
RunDirInUse::~RunDirInUse() = default;

namespace {
// The pid the holder of the lock on FD wrote ("?" when none came). The holder writes it just
// after it took the lock, so a reader that lost a race waits a little for a whole line naming
// a live process (until then the file is empty, or names the holder before it).
std::string holder_pid(int fd) {
  for (int tries = 0; tries < 50; ++tries) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    size_t end = text.find('\n');
    if (end != std::string::npos && end > 0 && text.find_first_not_of("0123456789") == end) {
      const long pid = std::strtol(text.c_str(), nullptr, 10);
      if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM))
        return text.substr(0, end);
    }
    ::usleep(10000);
  }
  return "?";
}

// Whether the lock on FD is free (then it is taken: the caller keeps or closes FD).
bool take_lock(int fd) { return ::flock(fd, LOCK_EX | LOCK_NB) == 0; }
}  // namespace

std::string RunDir::lock_holder() const {
  int fd = ::open(file(".lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string pid = take_lock(fd) ? "" : holder_pid(fd);
  ::close(fd);  // releases the lock when it was free
  return pid;
}

namespace {
// Empty, or only what a run killed before writing its configuration leaves: a lock file, an
// empty checkpoints/ folder and temporaries; and a data/ folder, where the Python module writes
// data given in memory before the run starts (so the run's config names files inside the run).
// Such a directory is taken again by `train --run-dir`.
bool never_started(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (n == ".lock" && e.is_regular_file(ec)) continue;
    size_t at = n.rfind(".tmp-");  // a killed writer's temporary (removed under the lock)
    if (at != std::string::npos && n.size() == at + 11 && e.is_regular_file(ec)) continue;
    if (n == "checkpoints" && e.is_directory(ec) && fs::is_empty(e.path(), ec)) continue;
    if (n == "data" && e.is_directory(ec)) continue;
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
    for (int i = 2; fs::exists(dir); ++i)
      dir = (fs::path("runs") / name).string() + "-" + std::to_string(i);
  } else if (fs::exists(dir) && !fs::is_directory(dir)) {
    throw ConfigError(dir + ": --run-dir names a file, not a directory; choose another --run-dir");
  } else if (fs::exists(dir) && !never_started(dir)) {
    const std::string pid = RunDir(dir).lock_holder();
    if (!pid.empty())  // lost a race for the directory: another run writes it now
      throw RunDirInUse(dir + ": another growformer process (pid " + printable(pid, 20) +
                            ") is running in this run directory now; choose another --run-dir",
                        pid);
    throw ConfigError(dir +
                      ": the run directory exists and is not empty (choose another "
                      "--run-dir, or `growformer resume " +
                      dir + "`)");
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
std::string RunDir::decision_cost() const { return file("decision_cost.json"); }
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
                       "from the best checkpoint's step, copy it to " +
                       last_checkpoint() + " and resume; to start again, move it away first");
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
  if (fd < 0)
    throw RuntimeError(path + ": cannot create the run directory's lock: " + std::strerror(errno));
  if (!take_lock(fd)) {
    std::string pid = printable(holder_pid(fd), 20);
    ::close(fd);
    throw RunDirInUse(root_ + ": the run directory is in use by another growformer process (pid " +
                          pid + "); wait for it to finish or stop it first",
                      pid);
  }
  // the pid and its newline in one write over the old text (then cut to its length), so a
  // reader sees a whole line or waits for one
  std::string me = std::to_string(::getpid()) + "\n";
  if (::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size())) {
    int rc = ::ftruncate(fd, static_cast<off_t>(me.size()));
    (void)rc;
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
