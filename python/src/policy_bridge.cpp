// The policy bridge: a GrowthPolicy whose decisions a Python class makes.
//
// The class (see examples/python/grow_on_plateau.py):
//   __init__(self, **options)          the config's `options:` mapping as keyword arguments
//   check(self, view) -> list          edits: {"op": "add_head", "block": b, "reason": "..."},
//                                      {"op": "remove_head", "block": b, "head": id, ...},
//                                      {"op": "add_mlp_units", "block": b, "units": n, ...} or
//                                      {"op": "remove_mlp_units", "block": b, "units": [i, ...]}
//   optional: on_start(self, view), edited(self, edit, view) (edit["op"] also "add_mlp_units" /
//             "remove_mlp_units" for another policy's MLP edits), summary(self) -> {name: number},
//             save_state(self) -> str and load_state(self, str) (without them the instance's
//             attributes are saved as JSON), needs_probe (bool), validation_probe(self, step) ->
//             int, probe_ablations(self, view) -> [[(block, head), ...], ...] (head -1,
//             gf.WHOLE_BLOCK: the whole block left out),
//             muted_in_training(self, step) -> [(block, head), ...], muted_on_examples(self, step)
//             -> ([(block, head), ...], share), twin_without(self, step) -> [(block, head), ...],
//             on_trial(self, step) -> bool, summary_columns
//             (a class attribute: the summary() keys the sweep table shows)
// Every call takes the GIL; an exception or a malformed answer becomes one RuntimeError (a
// ConfigError for the class, its import and its options) naming the class, the method and the step;
// the Python exception is kept for the module, which raises it as the error's __cause__. Integers
// and numbers may be Python's or numpy's (a block index from numpy.argmax).
#include <pybind11/embed.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <growformer/errors.hpp>
#include <growformer/growth.hpp>
#include <growformer/rng.hpp>

#include "policy_args.hpp"
#include "policy_edits.hpp"
#include "policy_values.hpp"
#include "py_convert.hpp"

namespace gfpy {
namespace {

using namespace pybind11::literals;

// Starts the interpreter this build was made for: its executable as the program name (Python
// finds its standard library and site-packages from there, a virtual environment's too), not
// `python3` looked up on PATH, which could be another Python's (pyenv's, say) and give this
// libpython another version's standard library. When that executable is gone, its prefix as
// the home, unless PYTHONHOME says otherwise. Without Python's signal handlers.
void start_build_interpreter() {
#if PY_VERSION_HEX >= 0x03080000
  PyConfig config;  // as py::initialize_interpreter(false) makes it, with the program name
  PyConfig_InitIsolatedConfig(&config);
  config.isolated = 0;
  config.use_environment = 1;
  config.install_signal_handlers = 0;
  std::error_code ec;
  PyStatus st = PyStatus_Ok();
  if (std::filesystem::exists(GF_PYTHON_EXECUTABLE, ec))
    st = PyConfig_SetBytesString(&config, &config.program_name, GF_PYTHON_EXECUTABLE);
  else if (!std::getenv("PYTHONHOME") && *GF_PYTHON_HOME)
    st = PyConfig_SetBytesString(&config, &config.home, GF_PYTHON_HOME);
  if (PyStatus_Exception(st)) {
    PyConfig_Clear(&config);
    throw gf::RuntimeError("the `python` policy plugin cannot configure Python " +
                           std::string(GF_PYTHON_EXECUTABLE));
  }
  try {
    py::initialize_interpreter(&config);  // clears config
  } catch (const std::exception& e) {
    throw gf::RuntimeError("the `python` policy plugin cannot start Python " +
                           std::string(GF_PYTHON_EXECUTABLE) + ": " + e.what());
  }
#else
  py::initialize_interpreter(false);
#endif
}

// The growformer program has no interpreter: start one (start_build_interpreter) and release
// the GIL, which every call below takes. It is never finalised: the process ends with it.
void ensure_interpreter() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (Py_IsInitialized()) return;
    start_build_interpreter();
    PyEval_SaveThread();
  });
}

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Helpers written in Python: the instance's attributes as exact JSON, and the check that they
// come back equal (int keys and tuples would not).
const char* kHelpers = R"PY(
import json, math

def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b

def dump_vars(obj):
    v = vars(obj)
    s = json.dumps(v, allow_nan=True)
    if not _same(v, json.loads(s)):
        raise TypeError("its attributes do not come back equal from JSON (tuples, dict keys "
                        "that are not strings, or number subclasses)")
    return s

def load_vars(obj, s):
    obj.__dict__.update(json.loads(s))
)PY";

py::object helpers() {
  static py::object* mod = nullptr;  // leaked: lives as long as the interpreter
  if (!mod) {
    py::dict ns;
    ns["__builtins__"] = py::module_::import("builtins");
    py::exec(kHelpers, ns);
    auto* m = new py::object(py::module_::import("types").attr("SimpleNamespace")(**ns));
    mod = m;
  }
  return *mod;
}

// What a view's methods reach, valid only while the call that got the view runs.
struct ViewState {
  bool alive = true;
  gf::EventSink* events = nullptr;
  gf::Rng* rng = nullptr;
  std::string label;
  void check(const char* what) const {
    if (!alive)
      throw py::value_error(label + ": view." + what +
                            "() called after the call that got the "
                            "view returned (keep numbers, not the view)");
  }
};

// An event's extra fields from keyword arguments: numbers, strings, lists of numbers.
void add_fields(gf::Event& e, py::handle fields, const std::string& where) {
  for (auto kv : py::reinterpret_borrow<py::dict>(fields)) {
    std::string k = py::str(kv.first).cast<std::string>();
    py::handle v = kv.second;
    if (py::isinstance<py::bool_>(v)) {
      e.numbers.push_back({k, v.cast<bool>() ? 1.0 : 0.0});
    } else if (is_real(v)) {
      e.numbers.push_back({k, v.cast<double>()});
    } else if (py::isinstance<py::str>(v)) {
      e.strings.push_back({k, v.cast<std::string>()});
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      std::vector<double> xs;
      for (auto x : v) {
        if (!is_real(x))
          throw py::type_error(where + ": field `" + k + "`: a list holds numbers only, not " +
                               short_repr(x));
        xs.push_back(x.cast<double>());
      }
      e.lists.push_back({k, xs});
    } else {
      throw py::type_error(where + ": field `" + k + "` is " + short_repr(v) +
                           "; an event field is a number, a string or a list of numbers");
    }
  }
}

// The class A names (module.Class, the module imported with A's folders on sys.path); the GIL
// is held. ConfigError naming WHERE when it cannot be found.
py::object policy_class(const PolicyArgs& a, const std::string& where) {
  size_t dot = a.class_path.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == a.class_path.size())
    throw gf::ConfigError(where + "`" + a.class_path + "` is not module.Class");
  std::string mod_name = a.class_path.substr(0, dot), cls_name = a.class_path.substr(dot + 1);
  py::object cls;
  try {
    py::list path = py::module_::import("sys").attr("path");
    for (auto it = a.paths.rbegin(); it != a.paths.rend(); ++it)
      if (!path.contains(py::str(*it))) path.insert(0, py::str(*it));
    if (!a.python_dir.empty() && !path.contains(py::str(a.python_dir))) path.append(a.python_dir);
    py::module_ mod = py::module_::import(mod_name.c_str());
    if (mod_name == "__main__" && !py::hasattr(mod, cls_name.c_str()))
      throw gf::ConfigError(where + "`" + a.class_path + "` was defined in the script that " +
                            "started the run, which this process is not running; resume the " +
                            "run from that script (growformer.resume(run_dir)), or move the " +
                            "class into a module beside it and name it as module.Class");
    if (!py::hasattr(mod, cls_name.c_str()))
      throw gf::ConfigError(where + "module `" + mod_name + "` (" +
                            py::str(mod.attr("__file__")).cast<std::string>() + ") has no `" +
                            cls_name + "`");
    cls = mod.attr(cls_name.c_str());
  } catch (py::error_already_set& e) {
    std::string search;
    try {
      search = py::str(py::module_::import("sys").attr("path")).cast<std::string>();
    } catch (...) {
      PyErr_Clear();
    }
    std::string msg = where + "cannot import module `" + mod_name +
                      "`: " + describe_python_error(e) + "\n  sys.path: " + search +
                      "\n  (add its folder to `" + a.role + ".path` or PYTHONPATH)";
    remember_policy_error(msg, e);
    throw gf::ConfigError(msg);
  }
  return cls;
}

class PythonPolicy : public gf::GrowthPolicy {
 public:
  explicit PythonPolicy(const PolicyArgs& a) : role_(a.role), class_path_(a.class_path) {
    label_ = a.role + " `python` (" + a.class_path + ")";
    ensure_interpreter();
    py::gil_scoped_acquire gil;
    const std::string where = a.class_where + ": `" + a.role + ".class`: ";
    py::object cls = policy_class(a, where);
    if (!PyCallable_Check(cls.ptr()))
      throw gf::ConfigError(where + "`" + a.class_path + "` is " + short_repr(cls) +
                            ", not a class");
    py::object opts = config_to_py(a.options);
    if (opts.is_none()) opts = py::dict();
    if (!py::isinstance<py::dict>(opts))
      throw gf::ConfigError(a.options_where + ": `" + a.role +
                            ".options`: expected a mapping of "
                            "keyword arguments for " +
                            a.class_path + ", got " + short_repr(opts));
    py::object obj;
    try {
      obj = cls(**py::reinterpret_borrow<py::dict>(opts));
    } catch (py::error_already_set& e) {
      // A TypeError before any line of the class ran (no traceback): the options do not fit
      // its constructor's keyword arguments. Anything else the constructor itself raised.
      const bool options_misfit = e.matches(PyExc_TypeError) && (!e.trace() || e.trace().is_none());
      std::string msg = options_misfit
                            ? a.options_where + ": `" + a.role + ".options`: " + a.class_path +
                                  "(**options) with options " + short_repr(opts) + " raised " +
                                  describe_python_error(e)
                            : where + a.class_path +
                                  " raised in its constructor (called with options " +
                                  short_repr(opts) + "; see `" + a.role +
                                  ".options` and the class): " + describe_python_error(e);
      remember_policy_error(msg, e);
      if (e.matches(PyExc_TypeError) || e.matches(PyExc_ValueError)) throw gf::ConfigError(msg);
      throw gf::RuntimeError(msg);
    }
    if (!py::hasattr(obj, "check") || !PyCallable_Check(obj.attr("check").ptr()))
      throw gf::ConfigError(where + a.class_path + " has no check(self, view) method");
    needs_probe_ = call("needs_probe", -1, [&] {
      if (!py::hasattr(obj, "needs_probe")) return false;
      py::object v = obj.attr("needs_probe");
      if (PyCallable_Check(v.ptr())) v = v();
      if (!py::isinstance<py::bool_>(v))
        throw gf::RuntimeError(label_ + ": needs_probe is " + short_repr(v) +
                               ", not True or False");
      return v.cast<bool>();
    });
    has_muted_ = py::hasattr(obj, "muted_in_training") &&
                 PyCallable_Check(obj.attr("muted_in_training").ptr());
    has_part_ = py::hasattr(obj, "muted_on_examples") &&
                PyCallable_Check(obj.attr("muted_on_examples").ptr());
    has_on_trial_ = py::hasattr(obj, "on_trial") && PyCallable_Check(obj.attr("on_trial").ptr());
    has_twin_ =
        py::hasattr(obj, "twin_without") && PyCallable_Check(obj.attr("twin_without").ptr());
    obj_ = std::move(obj);  // last: a member destroyed by a throw here would lack the GIL
  }

  ~PythonPolicy() override {
    if (python_alive()) {
      py::gil_scoped_acquire gil;
      obj_ = py::object();
    } else {
      obj_.release();  // the interpreter is gone: nothing to give back
    }
  }

  bool needs_probe() const override { return needs_probe_; }

  size_t validation_probe(size_t step) const override {
    py::gil_scoped_acquire gil;
    return call("validation_probe", long(step), [&]() -> size_t {
      if (!py::hasattr(obj_, "validation_probe")) return 0;
      py::object v = obj_.attr("validation_probe");
      if (PyCallable_Check(v.ptr())) v = v(step);
      auto n = integer_value(v);
      if (!n || *n < 0)
        throw gf::RuntimeError(label_ + ".validation_probe at step " + std::to_string(step) +
                               " returned " + short_repr(v) +
                               "; expected a count of examples >= 0");
      return static_cast<size_t>(*n);
    });
  }

  std::vector<std::vector<gf::HeadRef>> probe_ablations(const gf::TrainView& view) const override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(obj_, "probe_ablations")) return {};
    const std::string where = label_ + ".probe_ablations at step " + std::to_string(view.step);
    auto st = std::make_shared<ViewState>();
    py::object pv = make_view(view, st, false);
    py::object ret =
        call("probe_ablations", long(view.step), [&] { return obj_.attr("probe_ablations")(pv); });
    st->alive = false;
    std::vector<std::vector<gf::HeadRef>> out;
    if (!py::isinstance<py::list>(ret) && !py::isinstance<py::tuple>(ret))
      throw gf::RuntimeError(where + " returned " + short_repr(ret) +
                             "; expected a list of head sets, each a list of (block, head) pairs");
    for (auto set : ret) out.push_back(head_set(set, view.blocks.size(), where, true));
    return out;
  }

  // muted_in_training(self, step) -> [(block, head), ...]: asked before every training step,
  // so the method is looked up once
  std::vector<gf::HeadRef> muted_in_training(size_t step) const override {
    if (!has_muted_) return {};
    py::gil_scoped_acquire gil;
    const std::string where = label_ + ".muted_in_training at step " + std::to_string(step);
    py::object ret = call("muted_in_training", long(step),
                          [&] { return obj_.attr("muted_in_training")(long(step)); });
    return head_set(ret, std::numeric_limits<size_t>::max(), where);
  }

  // muted_on_examples(self, step) -> ([(block, head), ...], share) or None: asked before every
  // training step
  ExampleMute muted_on_examples(size_t step) const override {
    if (!has_part_) return {};
    py::gil_scoped_acquire gil;
    const std::string where = label_ + ".muted_on_examples at step " + std::to_string(step);
    py::object ret = call("muted_on_examples", long(step),
                          [&] { return obj_.attr("muted_on_examples")(long(step)); });
    if (ret.is_none()) return {};
    if (!py::isinstance<py::tuple>(ret) || py::len(ret) != 2 ||
        !(py::isinstance<py::float_>(ret[py::int_(1)]) ||
          py::isinstance<py::int_>(ret[py::int_(1)])))
      throw gf::RuntimeError(where + " returned " + short_repr(ret) +
                             "; expected ([(block, head), ...], share) or None");
    ExampleMute m;
    m.heads = head_set(ret[py::int_(0)], std::numeric_limits<size_t>::max(), where);
    m.share = ret[py::int_(1)].cast<double>();
    return m;
  }

  // twin_without(self, step) -> [(block, head), ...]: asked after every check
  std::vector<gf::HeadRef> twin_without(size_t step) const override {
    if (!has_twin_) return {};
    py::gil_scoped_acquire gil;
    const std::string where = label_ + ".twin_without at step " + std::to_string(step);
    py::object ret =
        call("twin_without", long(step), [&] { return obj_.attr("twin_without")(long(step)); });
    return head_set(ret, std::numeric_limits<size_t>::max(), where);
  }

  // on_trial(self, step) -> bool: asked at each validation
  bool on_trial(size_t step) const override {
    if (!has_on_trial_) return false;
    py::gil_scoped_acquire gil;
    py::object ret =
        call("on_trial", long(step), [&] { return obj_.attr("on_trial")(long(step)); });
    if (!py::isinstance<py::bool_>(ret))
      throw gf::RuntimeError(label_ + ".on_trial at step " + std::to_string(step) + " returned " +
                             short_repr(ret) + "; expected True or False");
    return ret.cast<bool>();
  }

  // A list of (block, head) pairs, blocks under BLOCKS (with WHOLE_BLOCKS, head -1 names the
  // whole block: gf.WHOLE_BLOCK); else one RuntimeError naming WHERE.
  static std::vector<gf::HeadRef> head_set(py::handle set, size_t blocks, const std::string& where,
                                           bool whole_blocks = false) {
    std::vector<gf::HeadRef> s;
    bool ok = py::isinstance<py::list>(set) || py::isinstance<py::tuple>(set);
    for (auto pair : ok ? py::reinterpret_borrow<py::object>(set) : py::list()) {
      py::sequence p = py::isinstance<py::sequence>(pair) && !py::isinstance<py::str>(pair)
                           ? py::reinterpret_borrow<py::sequence>(pair)
                           : py::sequence(py::list());
      long long b = -1, h = -2;  // -1, -2: not an integer pair
      if (p.size() == 2) {
        auto pb = integer_value(p[0]), ph = integer_value(p[1]);
        if (pb && ph) b = *pb, h = *ph;
      }
      const long long least = whole_blocks ? gf::HeadRef::kWholeBlock : 0;
      if (b < 0 || static_cast<size_t>(b) >= blocks || h < least ||
          h > std::numeric_limits<int>::max()) {
        ok = false;
        break;
      }
      s.push_back({static_cast<size_t>(b), static_cast<int>(h)});
    }
    if (!ok)
      throw gf::RuntimeError(where + ": the head set " +
                             short_repr(py::reinterpret_borrow<py::object>(set)) +
                             " is not a list of (block, head) pairs" +
                             (blocks == std::numeric_limits<size_t>::max()
                                  ? std::string()
                                  : " of this model's " + std::to_string(blocks) + " block(s)"));
    return s;
  }

  void on_start(const gf::TrainView& view) override {
    py::gil_scoped_acquire gil;
    if (!has("on_start")) return;
    auto st = std::make_shared<ViewState>();
    py::object pv = make_view(view, st, true);
    call("on_start", long(view.step), [&] { obj_.attr("on_start")(pv); });
    st->alive = false;
  }

  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    py::gil_scoped_acquire gil;
    auto st = std::make_shared<ViewState>();
    py::object pv = make_view(view, st, true);
    py::object ret = call("check", long(view.step), [&] { return obj_.attr("check")(pv); });
    st->alive = false;
    return call("check", long(view.step), [&] { return parse_edits(ret, view); });
  }

  void edited(const gf::Edit& e, int new_head_id, const gf::TrainView& view) override {
    py::gil_scoped_acquire gil;
    if (!has("edited")) return;
    py::dict d;
    using K = gf::Edit::Kind;
    d["op"] = e.kind == K::AddHead          ? "add_head"
              : e.kind == K::RemoveHead     ? "remove_head"
              : e.kind == K::AddMlpUnits    ? "add_mlp_units"
              : e.kind == K::RemoveMlpUnits ? "remove_mlp_units"
              : e.kind == K::InsertBlock    ? "insert_block"
                                            : "remove_block";
    d["block"] = e.block;
    if (e.edits_heads()) d["head"] = e.kind == K::AddHead ? new_head_id : e.head_id;
    if (e.kind == K::AddMlpUnits) d["first_unit"] = new_head_id, d["units"] = e.units;
    if (e.kind == K::RemoveMlpUnits) d["units"] = e.unit_indices;
    d["cause"] = event_to_dict(e.cause);
    auto st = std::make_shared<ViewState>();
    py::object pv = make_view(view, st, true);
    call("edited", long(view.step), [&] { obj_.attr("edited")(d, pv); });
    st->alive = false;
  }

  std::map<std::string, double> summary(const gf::TrainView& view) const override {
    (void)view;  // a Python policy's summary() takes no arguments
    py::gil_scoped_acquire gil;
    if (!py::hasattr(obj_, "summary")) return {};
    return call("summary", -1, [&] {
      py::object r = obj_.attr("summary")();
      std::map<std::string, double> out;
      if (!py::isinstance<py::dict>(r))
        throw gf::RuntimeError(label_ + ".summary returned " + short_repr(r) +
                               "; expected a dict of name -> number");
      for (auto kv : py::reinterpret_borrow<py::dict>(r)) {
        if (!py::isinstance<py::str>(kv.first) || !is_real(kv.second))
          throw gf::RuntimeError(label_ + ".summary: entry " + short_repr(kv.first) + ": " +
                                 short_repr(kv.second) + " is not a name and a number");
        out[kv.first.cast<std::string>()] = kv.second.cast<double>();
      }
      return out;
    });
  }

  // The class's `summary_columns` (a list of names of summary() keys for the sweep table).
  std::vector<std::string> summary_columns() const override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(obj_, "summary_columns")) return {};
    return call("summary_columns", -1, [&] {
      py::object r = obj_.attr("summary_columns");
      std::vector<std::string> out;
      if (!py::isinstance<py::list>(r) && !py::isinstance<py::tuple>(r))
        throw gf::RuntimeError(label_ + ".summary_columns is " + short_repr(r) +
                               "; expected a list of names of summary() keys");
      for (auto k : r) {
        if (!py::isinstance<py::str>(k))
          throw gf::RuntimeError(label_ + ".summary_columns: " + short_repr(k) + " is not a name");
        out.push_back(k.cast<std::string>());
      }
      return out;
    });
  }

  // The state in checkpoints: JSON {"class", "format": "user" | "attributes", "state"}.
  std::string save_state() const override {
    py::gil_scoped_acquire gil;
    return call("save_state", -1, [&] {
      bool user = py::hasattr(obj_, "save_state");
      py::object s;
      if (user) {
        s = obj_.attr("save_state")();
        if (!py::isinstance<py::str>(s))
          throw gf::RuntimeError(label_ + ".save_state returned " + short_repr(s) +
                                 "; expected a str");
      } else {
        try {
          s = helpers().attr("dump_vars")(obj_);
        } catch (py::error_already_set& e) {
          std::string msg =
              label_ + ": its state cannot be saved for resuming: " + describe_python_error(e) +
              "\n  define save_state(self) -> str and load_state(self, text)";
          remember_policy_error(msg, e);
          throw gf::RuntimeError(msg);
        }
      }
      py::dict rec;
      rec["class"] = class_path_;
      rec["format"] = user ? "user" : "attributes";
      rec["state"] = s;
      return py::module_::import("json").attr("dumps")(rec).cast<std::string>();
    });
  }

  void load_state(const std::string& text) override {
    if (text.empty()) return;
    py::gil_scoped_acquire gil;
    call("load_state", -1, [&] {
      py::dict rec;
      try {
        rec = py::module_::import("json").attr("loads")(text);
      } catch (py::error_already_set&) {
        throw gf::RuntimeError(label_ +
                               ": the checkpoint's policy state is not this bridge's JSON");
      }
      std::string cls = rec.contains("class") ? py::str(rec["class"]).cast<std::string>() : "";
      if (cls != class_path_)
        throw gf::RuntimeError(label_ + ": the checkpoint's policy state is of class `" + cls +
                               "`, not `" + class_path_ + "`");
      std::string format = rec.contains("format") ? py::str(rec["format"]).cast<std::string>() : "";
      py::object s = rec.contains("state") ? py::object(rec["state"]) : py::object(py::none());
      if (format == "user") {
        if (!has("load_state"))
          throw gf::RuntimeError(label_ +
                                 ": the checkpoint holds the state its save_state wrote, "
                                 "but the class has no load_state(self, text)");
        obj_.attr("load_state")(s);
      } else if (format == "attributes") {
        helpers().attr("load_vars")(obj_, s);
      } else {
        throw gf::RuntimeError(label_ + ": unknown policy state format `" + format + "`");
      }
    });
  }

 private:
  bool has(const char* name) const {
    return py::hasattr(obj_, name) && PyCallable_Check(obj_.attr(name).ptr());
  }

  // Runs F (GIL held); a Python exception becomes a RuntimeError naming the method and the step.
  template <class F>
  auto call(const char* method, long step, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (py::error_already_set& e) {
      std::string msg = label_ + "." + method +
                        (step >= 0 ? " at step " + std::to_string(step) : std::string()) +
                        " raised " + describe_python_error(e);
      remember_policy_error(msg, e);
      throw gf::RuntimeError(msg);
    } catch (const py::builtin_exception& e) {  // a conversion of what the method gave
      throw gf::RuntimeError(label_ + "." + method +
                             (step >= 0 ? " at step " + std::to_string(step) : std::string()) +
                             ": " + e.what());
    }
  }

  // The view a Python method gets: plain attributes and numpy copies; its methods (emit,
  // uniform, randint, normal) work while the call runs.
  py::object make_view(const gf::TrainView& v, const std::shared_ptr<ViewState>& st,
                       bool with_metrics) const {
    py::object ns = py::module_::import("types").attr("SimpleNamespace");
    st->events = v.events;
    st->rng = v.rng;
    st->label = label_;
    const py::list blocks = block_views(v, ns);
    const py::object metrics = with_metrics ? metrics_view(v.metrics, ns) : py::object(py::none());
    std::shared_ptr<ViewState> s = st;
    py::cpp_function emit(
        [s](const std::string& type, long block, long head, py::kwargs fields) {
          s->check("emit");
          if (type.empty())
            throw py::value_error(s->label + ": view.emit: the event type is empty");
          gf::Event e;
          e.type = type;
          e.block = block;
          e.head = head;
          add_fields(e, fields, s->label + ": view.emit(\"" + type + "\")");
          if (s->events) s->events->emit(e);
        },
        py::arg("type"), py::arg("block") = -1, py::arg("head") = -1);
    py::cpp_function uniform([s] {
      s->check("uniform");
      return s->rng ? s->rng->uniform() : 0.0;
    });
    py::cpp_function normal([s] {
      s->check("normal");
      return s->rng ? s->rng->normal() : 0.0;
    });
    py::cpp_function randint(
        [s](long long n) {
          s->check("randint");
          if (n <= 0) throw py::value_error(s->label + ": view.randint(n) needs n > 0");
          return s->rng ? static_cast<long long>(s->rng->below(static_cast<uint64_t>(n))) : 0LL;
        },
        py::arg("n"));
    return ns("step"_a = v.step, "total_steps"_a = v.total_steps, "role"_a = role_,
              "blocks"_a = blocks, "metrics"_a = metrics, "emit"_a = emit, "uniform"_a = uniform,
              "normal"_a = normal, "randint"_a = randint);
  }

  // view.blocks: per block its index, head ids and births, head counts and the probe copies.
  static py::list block_views(const gf::TrainView& v, const py::object& ns) {
    py::list blocks;
    for (const gf::BlockView& bv : v.blocks) {
      py::list ids, born;
      size_t n = 0, cap = 0;
      bool editable = false;
      if (bv.block) {
        for (const gf::HeadInfo& h : bv.block->heads()) {
          ids.append(h.id);
          born.append(h.born_step);
        }
        n = bv.block->num_heads();
        cap = bv.block->max_heads();
        editable = bv.block->can_edit_heads();
      }
      py::object probe = py::none(), valid = py::none();
      if (bv.probe && bv.probe->input.defined()) {
        const gf::Tensor& t = bv.probe->input;
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
        py::array_t<float> a(shape);
        std::copy(t.data(), t.data() + t.size(), a.mutable_data());
        probe = a;
        if (!bv.probe->valid.empty() && t.ndim() == 3) {
          py::array_t<uint8_t> m({py::ssize_t(t.dim(0)), py::ssize_t(t.dim(1))});
          std::copy(bv.probe->valid.begin(), bv.probe->valid.end(), m.mutable_data());
          valid = m;
        }
      }
      blocks.append(ns(
          "index"_a = bv.index, "heads"_a = ids, "born"_a = born, "num_heads"_a = n,
          "max_heads"_a =
              cap == static_cast<size_t>(-1) ? py::object(py::none()) : py::object(py::int_(cap)),
          "can_edit"_a = editable, "probe"_a = probe, "valid"_a = valid,
          "mlp_width"_a = bv.mlp ? py::object(py::int_(bv.mlp->width())) : py::object(py::none())));
    }
    return blocks;
  }

  // view.metrics: the training window, the latest validation, the probe, its ablations and the
  // twin's probe (None without a twin).
  static py::object metrics_view(const gf::RunMetrics& m, const py::object& ns) {
    py::object twin = py::none();
    if (!m.twin.heads.empty()) {
      py::list heads;
      for (const gf::HeadRef& h : m.twin.heads) heads.append(py::make_tuple(h.block, h.head));
      twin = ns("heads"_a = heads, "since"_a = m.twin.since, "loss"_a = number_or_none(m.twin.loss),
                "accuracy"_a = number_or_none(m.twin.accuracy),
                "diff_sd"_a = number_or_none(m.twin.diff_sd));
    }
    py::list abl;
    for (const gf::Ablation& a : m.ablations) {
      py::list heads;
      for (const gf::HeadRef& h : a.heads) heads.append(py::make_tuple(h.block, h.head));
      abl.append(ns("heads"_a = heads, "loss"_a = number_or_none(a.loss),
                    "diff_sd"_a = number_or_none(a.diff_sd),
                    "accuracy"_a = number_or_none(a.accuracy)));
    }
    return ns(
        "train_loss"_a = number_or_none(m.train_loss),
        "train_accuracy"_a = number_or_none(m.train_accuracy), "train_steps"_a = m.train_steps,
        "val_step"_a = m.val_step >= 0 ? py::object(py::int_(m.val_step)) : py::object(py::none()),
        "val_loss"_a = number_or_none(m.val_loss),
        "val_accuracy"_a = number_or_none(m.val_accuracy), "probe_examples"_a = m.probe_examples,
        "probe_loss"_a = number_or_none(m.probe_loss),
        "probe_accuracy"_a = number_or_none(m.probe_accuracy), "ablations"_a = abl,
        "twin"_a = twin);
  }

  // The edits a check returned, checked against the blocks as they will be when each applies
  // (policy_edits.hpp).
  std::vector<gf::Edit> parse_edits(const py::object& ret, const gf::TrainView& view) const {
    std::vector<BlockShape> blocks(view.blocks.size());
    for (size_t b = 0; b < view.blocks.size(); ++b) {
      const gf::AttentionBlock* block = view.blocks[b].block;
      if (view.blocks[b].mlp) blocks[b].mlp_width = view.blocks[b].mlp->width();
      if (!block) continue;
      blocks[b].present = true;
      blocks[b].editable = block->can_edit_heads();
      blocks[b].describe = block->describe();
      blocks[b].max_heads = block->max_heads();
      for (const gf::HeadInfo& h : block->heads()) blocks[b].heads.push_back(h.id);
    }
    return parse_policy_edits(policy_value(ret, 0), blocks,
                              label_ + ".check at step " + std::to_string(view.step), class_path_);
  }

  std::string role_, class_path_, label_;
  py::object obj_;
  bool needs_probe_ = false;
  bool has_muted_ = false;     // the class defines muted_in_training
  bool has_part_ = false;      // the class defines muted_on_examples
  bool has_on_trial_ = false;  // the class defines on_trial
  bool has_twin_ = false;      // the class defines twin_without
};

}  // namespace
}  // namespace gfpy

extern "C" __attribute__((visibility("default"))) gf::GrowthPolicy* growformer_python_policy(
    const gfpy::PolicyArgs& args) {
  return new gfpy::PythonPolicy(args);
}
