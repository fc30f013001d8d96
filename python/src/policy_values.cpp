// A Python policy's answers as plain C++ values (policy_values.hpp).
#include "policy_values.hpp"

#include "py_convert.hpp"

namespace gfpy {

std::string short_repr(py::handle h) {
  std::string s;
  try {
    s = py::repr(h).cast<std::string>();
  } catch (...) {
    PyErr_Clear();
    s = "<unprintable>";
  }
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// H as the edit checks see it. Containers DEPTH 4 and deeper are opaque: the checks look at
// the list (0), an edit (1), its info or init (2), a list in info (3) and its numbers (4).
PolicyValue policy_value(py::handle h, int depth) {
  using K = PolicyValue::Kind;
  PolicyValue v;
  v.repr = short_repr(h);
  if (h.is_none()) {
    v.kind = K::None;
  } else if (PyBool_Check(h.ptr())) {
    v.kind = K::Bool;
    v.flag = h.ptr() == Py_True;
  } else if (is_real(h)) {
    v.kind = is_integer(h) ? K::Integer : K::Real;
    if (v.kind == K::Integer) v.integer = integer_value(h);
    double x = PyFloat_AsDouble(h.ptr());  // an int beyond a float's range: none
    if (x == -1.0 && PyErr_Occurred())
      PyErr_Clear();
    else
      v.number = x;
  } else if (py::isinstance<py::str>(h)) {
    v.kind = K::Str;
    v.text = str_text(h);
  } else if (depth < 4 && (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h))) {
    v.kind = K::List;
    for (auto x : h) v.items.push_back(policy_value(x, depth + 1));
  } else if (depth < 4 && py::isinstance<py::dict>(h)) {
    v.kind = K::Dict;
    for (auto kv : py::reinterpret_borrow<py::dict>(h)) {
      PolicyValue key = policy_value(kv.first, 4);
      if (!key.is_str()) {  // str(key), the name an info field gets
        PyObject* s = PyObject_Str(kv.first.ptr());
        if (s) {
          key.text = str_text(s);
          Py_DECREF(s);
        } else {
          PyErr_Clear();
          key.text = key.repr;
        }
      }
      v.entries.emplace_back(std::move(key), policy_value(kv.second, depth + 1));
    }
  }
  return v;
}

// A str's UTF-8 text; lone surrogates (which UTF-8 cannot hold) as \udcxx escapes.
std::string str_text(py::handle h) {
  Py_ssize_t n = 0;
  if (const char* s = PyUnicode_AsUTF8AndSize(h.ptr(), &n))
    return std::string(s, static_cast<size_t>(n));
  PyErr_Clear();
  PyObject* b = PyUnicode_AsEncodedString(h.ptr(), "utf-8", "backslashreplace");
  if (!b) {
    PyErr_Clear();
    return short_repr(h);
  }
  std::string out(PyBytes_AS_STRING(b), static_cast<size_t>(PyBytes_GET_SIZE(b)));
  Py_DECREF(b);
  return out;
}

}  // namespace gfpy
