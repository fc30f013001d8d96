// Reading, checking and loading plugin files (one library, a folder of them, the search path).
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

namespace fs = std::filesystem;

namespace {

using registry_detail::StaticInitError;

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
    throw StaticInitError(path +
                          ": a static initialiser threw something that is not a std::exception");
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

void Registry::load_library(const std::string& path) {
  if (!registry_detail::in_probe_child()) {  // a library that would end this process is refused
                                             // instead
    auto fatal = registry_detail::probe_in_child({path});
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
    for (size_t i = before; i < impl_->entries.size(); ++i)
      names.push_back(impl_->entries[i].info.spec.name);
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
    std::map<std::string, std::string> fatal = registry_detail::probe_in_child(full_paths);
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

std::string Registry::library_checksum(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw RuntimeError(path + ": cannot read plugin library");
  return file_checksum(path);
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
    if (fs::is_directory(beside, ec))
      out.push_back(fs::absolute(beside, ec).lexically_normal().string());
  }
  out.push_back(GROWFORMER_BUILD_PLUGIN_DIR);
  out.push_back(GROWFORMER_INSTALL_PLUGIN_DIR);
  return out;
}

}  // namespace gf
