// Conversions between growformer's records and Python objects, shared by the module and the
// policy bridge (each compiles its own copy). The caller holds the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include <growformer/config.hpp>
#include <growformer/growth.hpp>

namespace gfpy {

namespace py = pybind11;

/// A config subtree as Python: mappings as dicts, sequences as lists, scalars as int, float,
/// bool, None (`~` or empty) or str, tried in that order (YAML quoting is not kept: '3' is 3).
py::object config_to_py(const gf::ConfigNode& node);

/// NaN as None, else the float.
py::object number_or_none(double v);

/// An event's fields as one dict: type, block and head (when >= 0), then its numbers (NaN as
/// None), strings and lists by name, as events.jsonl spells them.
py::dict event_to_dict(const gf::Event& e);

/// "ExceptionType: message", then the traceback of the Python error E, for a C++ message.
std::string describe_python_error(py::error_already_set& e);

}  // namespace gfpy
