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

py::dict event_to_dict(const gf::Event& e) {
  py::dict d;
  d["type"] = e.type;
  if (e.block >= 0) d["block"] = e.block;
  if (e.head >= 0) d["head"] = e.head;
  for (const auto& [k, v] : e.numbers) d[py::str(k)] = number_or_none(v);
  for (const auto& [k, v] : e.strings) d[py::str(k)] = v;
  for (const auto& [k, v] : e.lists) {
    py::list l;
    for (double x : v) l.append(number_or_none(x));
    d[py::str(k)] = l;
  }
  return d;
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

}  // namespace gfpy
