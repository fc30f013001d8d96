// Loading new plugin files in a child process first: a library whose static initialiser throws,
// crashes or hangs ends the child, not this process, and is refused with the child's reason.
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

#include "growformer/plugin.hpp"
#include "registry_impl.hpp"

namespace gf {
namespace registry_detail {

namespace {

bool g_probe_child = false;           // this process is a probe's child: load directly
constexpr int kStaticInitThrew = 86;  // a probe child's exit status: see StaticInitError

// The key a probe's result is kept under: the path, size and modification time of F.
std::string probe_key(const std::string& f) {
  struct stat st {};
  if (::stat(f.c_str(), &st) != 0) return f;
  return f + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// The probe child: loads FILES[NEXT ...] in turn (a scratch registry each) and writes one byte
// to PROGRESS_FD after each, its output going to ERR_FD; never returns. An exception out of a
// static initialiser ends it with kStaticInitThrew and the message.
[[noreturn]] void probe_child(const std::vector<std::string>& files, size_t next, int progress_fd,
                              int err_fd) {
  g_probe_child = true;
  // the process's own crash handlers (a test framework's) must not report the child's end
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);
  ::dup2(err_fd, 1);
  ::dup2(err_fd, 2);
  for (size_t i = next; i < files.size(); ++i) {
    try {
      Registry scratch;
      scratch.load_library(files[i]);
    } catch (const StaticInitError& e) {
      std::string msg = e.what();
      if (msg.rfind(files[i] + ": ", 0) == 0) msg.erase(0, files[i].size() + 2);
      std::fputs(msg.c_str(), stderr);
      std::fflush(stderr);
      ::_exit(kStaticInitThrew);
    } catch (...) {
    }
    char b = 1;
    if (::write(progress_fd, &b, 1) != 1) ::_exit(3);
  }
  ::_exit(0);
}

// What the parent saw of a probe child: the files it finished, its output since the last of
// them (the last 8 KiB), whether it was killed after 30 s without progress, and its wait status.
struct ProbeReport {
  size_t done = 0;
  std::string err_text;
  bool timed_out = false;
  int status = 0;
};

// Reads the child PID's progress and output pipes until both close (or 30 s pass without a
// file finished: the child is then killed), and reaps it.
ProbeReport watch_probe(pid_t pid, int progress_fd, int err_fd) {
  ProbeReport rep;
  bool open_p = true, open_e = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (open_p || open_e) {
    pollfd fds[2] = {{open_p ? progress_fd : -1, POLLIN, 0}, {open_e ? err_fd : -1, POLLIN, 0}};
    int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline - std::chrono::steady_clock::now())
                                       .count());
    if (wait_ms <= 0) {
      rep.timed_out = true;
      break;
    }
    int r = ::poll(fds, 2, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    if (open_p && (fds[0].revents & (POLLIN | POLLHUP))) {
      ssize_t n = ::read(progress_fd, buf, sizeof buf);
      if (n > 0) {
        rep.done += static_cast<size_t>(n);
        rep.err_text.clear();  // messages of the files loaded so far are not the next one's
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      } else if (n == 0 || errno != EINTR) {
        open_p = false;
      }
    }
    if (open_e && (fds[1].revents & (POLLIN | POLLHUP))) {
      ssize_t n = ::read(err_fd, buf, sizeof buf);
      if (n > 0)
        rep.err_text.append(buf, static_cast<size_t>(n));
      else if (n == 0 || errno != EINTR)
        open_e = false;
      if (rep.err_text.size() > 8192) rep.err_text.erase(0, rep.err_text.size() - 8192);
    }
  }
  if (rep.timed_out) ::kill(pid, SIGKILL);
  while (::waitpid(pid, &rep.status, 0) < 0 && errno == EINTR) {
  }
  return rep;
}

// Why the file a probe child was loading ended it, with the child's last message.
std::string probe_failure(ProbeReport rep) {
  std::string& err_text = rep.err_text;
  const int status = rep.status;
  while (!err_text.empty() && std::isspace(static_cast<unsigned char>(err_text.back())))
    err_text.pop_back();
  std::string why;
  if (rep.timed_out)
    why =
        "loading it did not finish within 30 s (a static initialiser or the register callback "
        "hangs?)";
  else if (WIFEXITED(status) && WEXITSTATUS(status) == kStaticInitThrew)
    why = printable(err_text.substr(0, 600)), err_text.clear();
  else if (WIFSIGNALED(status))
    why = std::string("loading it ends the process (signal ") + std::to_string(WTERMSIG(status)) +
          ", " + strsignal(WTERMSIG(status)) +
          "): a static initialiser or the register callback "
          "threw an exception nothing catches, or crashed";
  else
    why = "loading it ends the process (exit status " + std::to_string(WEXITSTATUS(status)) +
          "): a static initialiser or the register callback called exit";
  if (!err_text.empty()) {
    for (auto& ch : err_text)
      if (ch == '\n') ch = ' ';
    why += " [its message: " +
           printable(err_text.substr(err_text.size() > 600 ? err_text.size() - 600 : 0)) + "]";
  }
  return why + "; the library was not loaded (rebuild or remove it)";
}

}  // namespace

// Loads each of FILES in a child process (a scratch registry each) and returns, per file that
// ended the child (uncaught exception in a static initialiser, a crash, 30 s without finishing),
// the reason with the child's last message. A file that loads, or fails with an exception the
// loader catches, is not in the result: this process loads it and reports as usual. Results
// are kept for the process's lifetime, keyed by path, size and modification time, so a process
// forks at most once per set of new files.
std::map<std::string, std::string> probe_in_child(const std::vector<std::string>& files) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;  // key -> "" (fine) or the reason
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::string> todo;
  for (const auto& f : files)
    if (!cache.count(probe_key(f))) todo.push_back(f);
  size_t next = 0;
  std::set<size_t> retried;  // files whose child timed out once
  while (next < todo.size()) {
    int progress[2], errs[2];
    if (::pipe2(progress, O_CLOEXEC) != 0) break;
    if (::pipe2(errs, O_CLOEXEC) != 0) {
      ::close(progress[0]);
      ::close(progress[1]);
      break;
    }
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      for (int fd : {progress[0], progress[1], errs[0], errs[1]}) ::close(fd);
      break;  // no isolation possible: load in this process as before
    }
    if (pid == 0) probe_child(todo, next, progress[1], errs[1]);
    ::close(progress[1]);
    ::close(errs[1]);
    const ProbeReport rep = watch_probe(pid, progress[0], errs[0]);
    ::close(progress[0]);
    ::close(errs[0]);
    for (size_t i = next; i < next + rep.done && i < todo.size(); ++i)
      cache[probe_key(todo[i])] = "";
    next += rep.done;
    if (next >= todo.size()) break;
    // A child that stopped making progress is given one more try in a fresh child before its
    // file is refused: a forked child can stall on a lock another thread of the parent held at
    // the fork (seen under ASan on a loaded machine), which a second fork does not repeat.
    if (rep.timed_out && retried.insert(next).second) continue;
    cache[probe_key(todo[next])] = probe_failure(rep);  // todo[next] ended the child
    ++next;
  }
  std::map<std::string, std::string> out;
  for (const auto& f : files) {
    auto it = cache.find(probe_key(f));
    if (it != cache.end() && !it->second.empty()) out[f] = it->second;
  }
  return out;
}

bool in_probe_child() { return g_probe_child; }

}  // namespace registry_detail
}  // namespace gf
