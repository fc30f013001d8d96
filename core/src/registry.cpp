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

namespace gf {

namespace fs = std::filesystem;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Attention: return "attention";
    case Kind::Head: return "head";
    case Kind::Growth: return "growth";
    case Kind::Pruning: return "pruning";
    case Kind::Dataset: return "dataset";
    case Kind::Optimizer: return "optimizer";
  }
  return "?";
}

namespace {

// Simple content checksum for plugins.lock (FNV-1a 64 over the file, hex).
std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 1469598103934665603ULL;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 1099511628211ULL;
    }
  }
  std::ostringstream o;
  o << "fnv1a64:" << std::hex << h;
  return o.str();
}

}  // namespace

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
  std::set<std::string> loaded_names;  // file names already loaded (first on the path wins)
  std::set<std::string> tried;         // canonical paths of the files tried
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
    std::string msg = p.location() + ": unknown " + kind_name(kind) + " plugin `" + name + "`" +
                      (dym.empty() ? "" : "; did you mean `" + dym + "`?") +
                      "\n  known " + kind_name(kind) + " components: " + known(kind);
    if (!failed.empty()) {
      msg += "\n  libraries that failed to load:";
      for (const auto& f : failed) msg += "\n    " + f.path + ": " + f.error;
    }
    if (loaded.empty())
      msg += "\n  no plugin library was found on the search path; set --plugin-path or "
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

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

void Registry::add_attention(ComponentSpec spec, AttentionFactory f) {
  add(Kind::Attention, std::move(spec), std::move(f));
}
void Registry::add_head(ComponentSpec spec, HeadFactory f) { add(Kind::Head, std::move(spec), std::move(f)); }
void Registry::add_growth(ComponentSpec spec, GrowthFactory f) {
  add(Kind::Growth, std::move(spec), std::move(f));
}
void Registry::add_pruning(ComponentSpec spec, GrowthFactory f) {
  add(Kind::Pruning, std::move(spec), std::move(f));
}
void Registry::add_dataset(ComponentSpec spec, DatasetFactory f) {
  add(Kind::Dataset, std::move(spec), std::move(f));
}
void Registry::add_optimizer(ComponentSpec spec, OptimizerFactory f) {
  // Every optimizer takes its peak learning rate (the schedule's peak) under `lr`.
  bool has_lr = false;
  for (const auto& o : spec.options) has_lr = has_lr || o.name == "lr";
  if (!has_lr)
    spec.options.insert(spec.options.begin(),
                        {"lr", OptType::Float, "0.001", "peak learning rate (the trainer's "
                         "schedule scales it)", 0, 100});
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
  if constexpr (std::is_same_v<T, Optimizer>) obj->peak_lr_ = opts.get_float("lr");
  return obj;
}

std::shared_ptr<AttentionBlock> Registry::create_attention(const ConfigNode& node,
                                                           const AttentionBuild& b) {
  return create<AttentionBlock>(Kind::Attention, node, b);
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

namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
constexpr uint16_t kHostMachine = 0;  // not checked
#endif

// [off, off + n) lies inside a file of `size` bytes (no overflow).
bool inside(uint64_t off, uint64_t n, size_t size) { return off <= size && n <= size - off; }

template <class T>
T read_at(const uint8_t* bytes, uint64_t off) {
  T v;
  std::memcpy(&v, bytes + off, sizeof v);
  return v;
}

}  // namespace

std::string Registry::check_library_image(const uint8_t* bytes, size_t size) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(bytes, ELFMAG, SELFMAG) != 0)
    return "not an ELF shared library (" + std::to_string(size) + " bytes, no ELF header)";
  auto eh = read_at<Elf64_Ehdr>(bytes, 0);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "not a 64-bit ELF library";
  if (eh.e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB))
    return "ELF byte order differs from this machine's";
  if (eh.e_type != ET_DYN) return "an ELF file but not a shared library (e_type " +
                                  std::to_string(eh.e_type) + ")";
  if (kHostMachine != 0 && eh.e_machine != kHostMachine)
    return "built for another processor (ELF machine " + std::to_string(eh.e_machine) + ")";
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
      !inside(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), size))
    return "program headers lie outside the file (truncated?)";
  bool dynamic = false;
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    auto ph = read_at<Elf64_Phdr>(bytes, eh.e_phoff + i * sizeof(Elf64_Phdr));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (!inside(ph.p_offset, ph.p_filesz, size))
      return "segment " + std::to_string(i) + " ends at byte " +
             std::to_string(ph.p_offset + ph.p_filesz) + " but the file has " +
             std::to_string(size) + " (truncated?)";
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz)
      return "segment " + std::to_string(i) + " is larger in the file than in memory";
    dynamic = dynamic || ph.p_type == PT_DYNAMIC;
  }
  if (!dynamic) return "no dynamic segment (not a shared library)";
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      !inside(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), size))
    return "section headers lie outside the file (truncated?)";
  auto section = [&](uint64_t i) {
    return read_at<Elf64_Shdr>(bytes, eh.e_shoff + i * sizeof(Elf64_Shdr));
  };
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    auto sh = section(i);
    if (sh.sh_type != SHT_NOBITS && !inside(sh.sh_offset, sh.sh_size, size))
      return "section " + std::to_string(i) + " lies outside the file (truncated?)";
  }
  // the entry point: a defined function in the dynamic symbol table
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    auto sh = section(i);
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum)
      return "malformed dynamic symbol table";
    auto str = section(sh.sh_link);
    if (str.sh_type != SHT_STRTAB) return "malformed dynamic symbol table";
    const char* want = GROWFORMER_ENTRY_POINT_NAME;
    size_t want_len = std::strlen(want);
    for (uint64_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
      auto sym = read_at<Elf64_Sym>(bytes, sh.sh_offset + k * sizeof(Elf64_Sym));
      if (sym.st_name >= str.sh_size || str.sh_size - sym.st_name <= want_len) continue;
      const uint8_t* name = bytes + str.sh_offset + sym.st_name;
      if (std::memcmp(name, want, want_len + 1) != 0) continue;
      if (sym.st_shndx == SHN_UNDEF) continue;
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC)
        return std::string("the entry point `") + want + "` is not a function (declare it with "
               "GROWFORMER_PLUGIN(...))";
      return "";
    }
  }
  return "not a growformer plugin: no `" GROWFORMER_ENTRY_POINT_NAME
         "` entry point (declare one with GROWFORMER_PLUGIN(...))";
}

namespace {

// An exception a library's static initialiser threw out of dlopen: the loader's state is then
// not to be trusted (its lock is left held), so such a library is only ever met in a probe child.
struct StaticInitError : RuntimeError {
  using RuntimeError::RuntimeError;
};

// Checks the file before dlopen: a truncated or foreign file can crash the loader itself.
void check_library_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(path + ": cannot open plugin library: " + std::strerror(errno));
  struct stat st {};
  std::vector<uint8_t> bytes;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (int64_t{1} << 32);
  if (ok) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (ok && got < bytes.size()) {
      ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      ok = r > 0;
      if (ok) got += static_cast<size_t>(r);
    }
  }
  ::close(fd);
  if (!ok) throw RuntimeError(path + ": cannot read plugin library (not a regular file?)");
  std::string why = Registry::check_library_image(bytes.data(), bytes.size());
  if (!why.empty()) throw RuntimeError(path + ": cannot load plugin library: " + why);
}

// Loads LIB from PATH and returns its plugin info once the entry point, ABI version, struct
// size and build fingerprint match this growformer.
const PluginInfo* open_plugin(boost::dll::shared_library& lib, const std::string& path) {
  try {
    lib.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::system_error& e) {  // the loader's own failure (dlerror)
    throw RuntimeError(path + ": cannot load plugin library: " + e.what());
  } catch (const std::exception& e) {  // thrown by the library's code while it was mapped
    throw StaticInitError(path + ": a static initialiser threw: " + e.what());
  } catch (...) {
    throw StaticInitError(path + ": a static initialiser threw something that is not a std::exception");
  }
  if (!lib.has(GROWFORMER_ENTRY_POINT_NAME))
    throw RuntimeError(path + ": not a growformer plugin: no `" GROWFORMER_ENTRY_POINT_NAME
                              "` entry point (declare one with GROWFORMER_PLUGIN(...))");
  using EntryFn = const PluginInfo*();
  const PluginInfo* info = lib.get<EntryFn>(GROWFORMER_ENTRY_POINT_NAME)();
  if (!info) throw RuntimeError(path + ": the plugin entry point returned null");
  // Version and size first: nothing else in the struct may be read before they match.
  if (info->abi_version != GROWFORMER_ABI_VERSION)
    throw RuntimeError(path + ": plugin ABI version " + std::to_string(info->abi_version) +
                       " but this growformer has ABI version " +
                       std::to_string(GROWFORMER_ABI_VERSION) +
                       "; rebuild the plugin against this growformer (" GROWFORMER_VERSION ")");
  if (info->struct_size != sizeof(PluginInfo))
    throw RuntimeError(path + ": plugin info struct is " + std::to_string(info->struct_size) +
                       " bytes, expected " + std::to_string(sizeof(PluginInfo)) +
                       "; rebuild the plugin against this growformer");
  std::string fp = info->fingerprint ? info->fingerprint : "";
  if (fp != GROWFORMER_FINGERPRINT)
    throw RuntimeError(path + ": plugin built for `" + fp + "` but this growformer is `" +
                       GROWFORMER_FINGERPRINT +
                       "`; rebuild the plugin with the same compiler and growformer version");
  if (!info->register_components) throw RuntimeError(path + ": plugin has no register callback");
  return info;
}

}  // namespace

namespace {

bool g_probe_child = false;  // this process is a probe's child: load directly
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
                                       deadline - std::chrono::steady_clock::now()).count());
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
      if (n > 0) rep.err_text.append(buf, static_cast<size_t>(n));
      else if (n == 0 || errno != EINTR) open_e = false;
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
  while (!err_text.empty() && std::isspace(static_cast<unsigned char>(err_text.back()))) err_text.pop_back();
  std::string why;
  if (rep.timed_out)
    why = "loading it did not finish within 30 s (a static initialiser or the register callback hangs?)";
  else if (WIFEXITED(status) && WEXITSTATUS(status) == kStaticInitThrew)
    why = printable(err_text.substr(0, 600)), err_text.clear();
  else if (WIFSIGNALED(status))
    why = std::string("loading it ends the process (signal ") + std::to_string(WTERMSIG(status)) +
          ", " + strsignal(WTERMSIG(status)) + "): a static initialiser or the register callback "
          "threw an exception nothing catches, or crashed";
  else
    why = "loading it ends the process (exit status " + std::to_string(WEXITSTATUS(status)) +
          "): a static initialiser or the register callback called exit";
  if (!err_text.empty()) {
    for (auto& ch : err_text)
      if (ch == '\n') ch = ' ';
    why += " [its message: " + printable(err_text.substr(err_text.size() > 600 ? err_text.size() - 600 : 0)) + "]";
  }
  return why + "; the library was not loaded (rebuild or remove it)";
}

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
    for (size_t i = next; i < next + rep.done && i < todo.size(); ++i) cache[probe_key(todo[i])] = "";
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

}  // namespace

void Registry::load_library(const std::string& path) {
  if (!g_probe_child) {  // a library that would end this process is refused instead
    auto fatal = probe_in_child({path});
    if (!fatal.empty()) throw RuntimeError(path + ": " + fatal.begin()->second);
  }
  check_library_file(path);
  auto lib = std::make_shared<boost::dll::shared_library>();
  const PluginInfo* info = open_plugin(*lib, path);
  std::string name = info->name ? info->name : "";
  for (const auto& l : impl_->loaded)
    if (l.plugin == name)
      throw RuntimeError(path + ": plugin `" + name + "` is already loaded from " + l.path);

  size_t before = impl_->entries.size();
  impl_->current_lib = lib;
  impl_->current_plugin = name;
  impl_->current_path = path;
  auto done = [&] {
    impl_->current_lib.reset();
    impl_->current_plugin.clear();
    impl_->current_path.clear();
  };
  auto fail = [&](const std::string& why) {
    std::vector<std::string> names;
    for (size_t i = before; i < impl_->entries.size(); ++i) names.push_back(impl_->entries[i].info.spec.name);
    impl_->entries.resize(before);  // all or nothing
    done();
    impl_->failed_components = names;
    throw RuntimeError(path + ": registering plugin `" + name + "` failed: " + why);
  };
  try {
    info->register_components(*this);
  } catch (const std::exception& e) {
    fail(e.what());
  } catch (...) {
    fail("it threw something that is not a std::exception");
  }
  done();
  impl_->loaded.push_back({path, name, info->version ? info->version : "", file_checksum(path)});
  // Loaded libraries stay mapped until the process exits: an exception or a static object
  // made by plugin code may outlive every registry and object that came from it.
  static auto* keep = new std::vector<std::shared_ptr<boost::dll::shared_library>>();
  keep->push_back(lib);
}

void Registry::load_directories(const std::vector<std::string>& dirs) {
  std::set<std::string> seen_dirs;
  for (const auto& d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    // the same folder reached twice on the path (build tree, beside the program) is read once
    fs::path canon = fs::canonical(d, ec);
    if (!ec && !seen_dirs.insert(canon.string()).second) continue;
    std::vector<fs::path> files;
    for (const auto& ent : fs::directory_iterator(d, ec)) {
      auto p = ent.path();
      if (p.extension() == ".so" && p.filename().string().rfind("libgf_", 0) == 0)
        files.push_back(p);
    }
    std::sort(files.begin(), files.end());
    std::vector<std::pair<fs::path, std::string>> wanted;  // (as found, absolute)
    for (const auto& p : files) {
      std::string fname = p.filename().string();
      if (impl_->loaded_names.count(fname)) continue;
      std::string canon_file = fs::weakly_canonical(p, ec).string();
      if (!impl_->tried.insert(canon_file).second) continue;  // each file tried (and failed) once
      wanted.emplace_back(p, fs::absolute(p).lexically_normal().string());
    }
    std::vector<std::string> full_paths;
    for (auto& w : wanted) full_paths.push_back(w.second);
    // a library that would end this process is isolated first: unrelated commands go on
    std::map<std::string, std::string> fatal = probe_in_child(full_paths);
    for (const auto& [p, full] : wanted) {
      std::string fname = p.filename().string();
      if (impl_->loaded_names.count(fname)) continue;
      auto bad = fatal.find(full);
      if (bad != fatal.end()) {
        impl_->failed.push_back({p.string(), bad->second, {}});
        continue;
      }
      try {
        impl_->failed_components.clear();
        load_library(full);
        impl_->loaded_names.insert(fname);
      } catch (const std::exception& e) {
        // the list names the file once: drop the path the message starts with
        std::string msg = e.what();
        if (msg.rfind(full + ": ", 0) == 0) msg.erase(0, full.size() + 2);
        impl_->failed.push_back({p.string(), msg, impl_->failed_components});
      }
    }
  }
}

std::vector<std::string> Registry::search_path(const std::vector<std::string>& cli_paths) {
  std::vector<std::string> out;
  auto split = [&](const std::string& s) {
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, ':'))
      if (!part.empty()) out.push_back(part);
  };
  for (const auto& p : cli_paths) split(p);
  if (const char* env = std::getenv("GROWFORMER_PLUGIN_PATH")) split(env);
  // The build tree's plugins sit beside the program (build/bin -> build/lib/growformer/plugins).
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build tree: build/bin/growformer -> build/lib/growformer/plugins;
    // relocated install: PREFIX/bin/growformer -> PREFIX/<libdir>/growformer/plugins
    for (fs::path rel : {fs::path("lib/growformer/plugins"), fs::path(GROWFORMER_PLUGIN_REL_DIR)}) {
      fs::path beside = exe.parent_path().parent_path() / rel;
      if (fs::is_directory(beside, ec)) out.push_back(beside.lexically_normal().string());
    }
  }
  // beside this library (LIBDIR/libgrowformer.so -> LIBDIR/growformer/plugins), in the build
  // tree as in an install: what a process that is not the program (python3) finds
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&kind_name), &self) && self.dli_fname) {
    fs::path beside = fs::path(self.dli_fname).parent_path() / "growformer" / "plugins";
    if (fs::is_directory(beside, ec)) out.push_back(fs::absolute(beside, ec).lexically_normal().string());
  }
  out.push_back(GROWFORMER_BUILD_PLUGIN_DIR);
  out.push_back(GROWFORMER_INSTALL_PLUGIN_DIR);
  return out;
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

const std::vector<LoadedLibrary>& Registry::libraries() const { return impl_->loaded; }
const std::vector<FailedLibrary>& Registry::failures() const { return impl_->failed; }

}  // namespace gf
