// The `python` growth and pruning components: a policy class written in Python, named in the
// config (`growth: {plugin: python, class: mymod.MyPolicy, options: {...}}`).
//
// This library holds no Python code: the policy lives in the bridge library
// (libgrowformer_pypolicy.so, policy_bridge.cpp), whose Python symbols are those of the process.
// Inside python3 (the growformer module) they are the interpreter's own; in the `growformer`
// program there is none yet, so the first policy made loads libpython globally, then the
// bridge, which starts the interpreter.
#include <dlfcn.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include <growformer/errors.hpp>
#include <growformer/fields.hpp>
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include "policy_args.hpp"

namespace {

namespace fs = std::filesystem;

// The bridge beside this plugin's folder (lib/growformer/plugins -> lib/), where the build
// tree and an install tree put it; else the build tree's path.
std::string bridge_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&bridge_path), &info) && info.dli_fname) {
    fs::path p = fs::path(info.dli_fname).parent_path().parent_path().parent_path() /
                 fs::path(GF_PYPOLICY_BUILD).filename();
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
  }
  return GF_PYPOLICY_BUILD;
}

// The folder holding the package growformer, which a policy may import: where an install puts
// it relative to this plugin (PREFIX/lib/python3.X/site-packages, or the site-packages of a
// wheel whose package folder holds the plugins), else the build tree's.
std::string python_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&python_dir), &info) && info.dli_fname) {
    for (const char* rel : {GF_PYTHON_FROM_PLUGINS, GF_PYTHON_FROM_PLUGINS_WHEEL}) {
      fs::path site = (fs::path(info.dli_fname).parent_path() / rel).lexically_normal();
      std::error_code ec;
      if (fs::exists(site / "growformer" / "__init__.py", ec)) return site.string();
    }
  }
  return GF_PYTHON_BUILD_DIR;
}

gfpy::MakePolicyFn load_bridge() {
  static std::mutex m;
  static gfpy::MakePolicyFn fn = nullptr;
  std::lock_guard<std::mutex> lock(m);
  if (fn) return fn;
  // Python symbols in the process already: we run inside python3 (or a program embedding it)
  if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized")) {
    if (!dlopen(GF_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL)) {
      const char* e = dlerror();
      throw gf::RuntimeError(
          std::string("the `python` policy plugin cannot load the Python runtime " GF_LIBPYTHON
                      ": ") +
          (e ? e : "unknown error") +
          " (install the libpython package of the Python it was built for)");
    }
  }
  std::string path = bridge_path();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    throw gf::RuntimeError("the `python` policy plugin cannot load its bridge " + path + ": " +
                           (e ? e : "unknown error"));
  }
  fn = reinterpret_cast<gfpy::MakePolicyFn>(dlsym(h, gfpy::kMakePolicySymbol));
  if (!fn)
    throw gf::RuntimeError(path + ": no `" + std::string(gfpy::kMakePolicySymbol) +
                           "` entry point (a bridge of another build?)");
  return fn;
}

/// The python policy's options, each declared once (`table()`).
struct PythonSettings {
  std::string class_path;
  std::vector<std::string> path;
  gf::AnyNode options;
  static const gf::OptionTable<PythonSettings>& table() {
    using S = PythonSettings;
    static const auto t =
        gf::OptionTable<S>()
            .add("class", &S::class_path, "",
                 "the policy class, module.Class (the module on sys.path, `path` or PYTHONPATH)")
            .add("path", &S::path, "[]",
                 "folders put in front of sys.path, relative to the config's folder")
            .add("options", &S::options, "{}",
                 "a mapping passed to the class as keyword arguments");
    return t;
  }
};

std::unique_ptr<gf::GrowthPolicy> make(const gf::Options& o, const std::string& role) {
  const PythonSettings s = PythonSettings::table().read(o);
  gfpy::PolicyArgs a;
  a.role = role;
  a.class_path = s.class_path;
  a.class_where = o.where("class");
  for (const std::string& p : s.path) {
    std::string r = o.resolve_path(p);
    std::error_code ec;
    a.paths.push_back(fs::absolute(r, ec).lexically_normal().string());
  }
  a.options = s.options.node;
  a.options_where = o.where("options");
  a.python_dir = python_dir();
  return std::unique_ptr<gf::GrowthPolicy>(load_bridge()(a));
}

// The second line of each component's documentation (the first is its summary, the line of
// docs/OPTIONS.md): the interpreter a policy runs in, this build's.
const std::string kInterpreter =
    "\n  interpreter: " GF_PYTHON_EXECUTABLE " (Python " GF_PYTHON_VERSION ", " GF_LIBPYTHON
    "), the one the growformer program starts whatever python3 is first on PATH (inside a "
    "python3 process, the policy runs in that process's Python)";

void register_python(gf::Registry& r) {
  r.add_growth(
      {"python", "a growth policy class written in Python (class: module.Class)" + kInterpreter,
       PythonSettings::table().specs()},
      [](const gf::Options& o) { return make(o, "growth"); });
  r.add_pruning(
      {"python", "a pruning rule class written in Python (class: module.Class)" + kInterpreter,
       PythonSettings::table().specs()},
      [](const gf::Options& o) { return make(o, "pruning"); });
}

}  // namespace

GROWFORMER_PLUGIN("growth_python", "0.1.0", register_python)
