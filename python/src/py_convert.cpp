#include "py_convert.hpp"

#include <cmath>
#include <stdexcept>

namespace gfpy {

py::object config_to_py(const gf::ConfigNode& node) {
  if (!node.valid()) return py::none();
  if (node.is_map()) {
    py::dict d;
    for (const std::string& k : node.keys()) d[py::str(k)] = config_to_py(node.child(k));
    return std::move(d);
  }
  if (node.is_sequence()) {
    py::list l;
    for (const gf::ConfigNode& it : node.items()) l.append(config_to_py(it));
    return std::move(l);
  }
  std::string s = node.as_string();
  if (s.empty() || s == "~" || s == "null") return py::none();
  try {
    return py::int_(node.as_int());
  } catch (const std::exception&) {
  }
  try {
    return py::float_(node.as_float());
  } catch (const std::exception&) {
  }
  if (s == "true" || s == "false") return py::bool_(s == "true");
  return py::str(s);
}

py::object number_or_none(double v) {
  if (std::isnan(v)) return py::none();
  return py::float_(v);
}

py::object whole_or_float(double v) {
  if (std::isnan(v)) return py::none();
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 9007199254740992.0)  // 2^53
    return py::int_(static_cast<long long>(v));
  return py::float_(v);
}

py::dict event_to_dict(const gf::Event& e) {
  py::dict d;
  d["type"] = e.type;
  if (e.block >= 0) d["block"] = e.block;
  if (e.head >= 0) d["head"] = e.head;
  for (const auto& [k, v] : e.numbers) d[py::str(k)] = whole_or_float(v);
  for (const auto& [k, v] : e.strings) d[py::str(k)] = v;
  for (const auto& [k, v] : e.lists) {
    py::list l;
    for (double x : v) l.append(whole_or_float(x));
    d[py::str(k)] = l;
  }
  return d;
}

namespace {
// numbers.Integral / numbers.Real, looked up once (the interpreter outlives every caller)
bool is_instance_of(py::handle h, const char* abc) {
  py::object cls = py::module_::import("numbers").attr(abc);
  int r = PyObject_IsInstance(h.ptr(), cls.ptr());
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  return r == 1;
}
}  // namespace

bool is_integer(py::handle h) {
  if (PyBool_Check(h.ptr())) return false;
  if (PyLong_Check(h.ptr())) return true;
  return !PyFloat_Check(h.ptr()) && is_instance_of(h, "Integral");
}

bool is_real(py::handle h) {
  if (PyBool_Check(h.ptr())) return false;
  if (PyLong_Check(h.ptr()) || PyFloat_Check(h.ptr())) return true;
  return is_instance_of(h, "Real");
}

std::optional<long long> integer_value(py::handle h) {
  if (!is_integer(h)) return std::nullopt;
  PyObject* i = PyNumber_Index(h.ptr());
  if (!i) {
    PyErr_Clear();
    return std::nullopt;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return std::nullopt;
  }
  return v;
}

std::string describe_python_error(py::error_already_set& e) {
  std::string head, frames;
  try {
    py::module_ tb = py::module_::import("traceback");
    for (auto l : tb.attr("format_exception_only")(e.type(), e.value()))
      head += py::str(l).cast<std::string>();
    if (e.trace())
      for (auto l : tb.attr("format_tb")(e.trace())) frames += py::str(l).cast<std::string>();
  } catch (...) {
    PyErr_Clear();
    head = e.what();
  }
  while (!head.empty() && head.back() == '\n') head.pop_back();
  while (!frames.empty() && frames.back() == '\n') frames.pop_back();
  return frames.empty() ? head : head + "\n  Traceback (most recent call last):\n" + frames;
}

namespace {
constexpr const char* kPolicyErrorKey = "growformer.policy_error";

// The interpreter's dict for extension state (borrowed), or null.
PyObject* state_dict() {
#if PY_VERSION_HEX >= 0x03090000
  return PyInterpreterState_GetDict(PyInterpreterState_Get());
#elif PY_VERSION_HEX >= 0x03080000
  return PyInterpreterState_GetDict(PyThreadState_Get()->interp);
#else
  return PyThreadState_GetDict();
#endif
}
}  // namespace

void remember_policy_error(const std::string& message, py::error_already_set& e) {
  PyObject* d = state_dict();
  if (!d) return;
  py::object value = e.value();
  if (value.is_none() || !PyExceptionInstance_Check(value.ptr())) return;
  if (e.trace() && !e.trace().is_none()) PyException_SetTraceback(value.ptr(), e.trace().ptr());
  py::tuple kept = py::make_tuple(message, value);
  if (PyDict_SetItemString(d, kPolicyErrorKey, kept.ptr()) != 0) PyErr_Clear();
}

py::object take_policy_error(const std::string& what) {
  PyObject* d = state_dict();
  if (!d) return py::none();
  PyObject* kept = PyDict_GetItemString(d, kPolicyErrorKey);  // borrowed
  if (!kept || !PyTuple_Check(kept) || PyTuple_Size(kept) != 2) return py::none();
  py::tuple t = py::reinterpret_borrow<py::tuple>(kept);
  std::string message = t[0].cast<std::string>();
  if (message.empty() || what.find(message) == std::string::npos) return py::none();
  py::object cause = t[1];
  if (PyDict_DelItemString(d, kPolicyErrorKey) != 0) PyErr_Clear();
  return cause;
}

void forget_policy_error() {
  PyObject* d = state_dict();
  if (d && PyDict_GetItemString(d, kPolicyErrorKey) &&
      PyDict_DelItemString(d, kPolicyErrorKey) != 0)
    PyErr_Clear();
}

}  // namespace gfpy
