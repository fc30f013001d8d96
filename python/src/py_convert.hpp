// Conversions between growformer's records and Python objects, shared by the module and the
// policy bridge (each compiles its own copy). The caller holds the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
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

/// NaN as None, a whole number (a count stored as a double: events, policy summaries) as an
/// int, else the float.
py::object whole_or_float(double v);

/// An event's fields as one dict: type, block and head (when >= 0), then its numbers and lists
/// of numbers (whole numbers as ints, NaN as None) and strings by name.
py::dict event_to_dict(const gf::Event& e);

/// Whether H is an integer: an int or a numpy integer (numbers.Integral), not a bool.
bool is_integer(py::handle h);
/// Whether H is a real number: an int, a float or a numpy number (numbers.Real), not a bool.
bool is_real(py::handle h);
/// H as a long long when it is an integer (is_integer) that fits one; else nothing.
std::optional<long long> integer_value(py::handle h);

/// "ExceptionType: message", then the traceback of the Python error E, for a C++ message.
std::string describe_python_error(py::error_already_set& e);

/// A policy's Python exception E, kept (with its traceback) for the growformer module, which
/// raises the ConfigError or RunError whose message contains MESSAGE with E as its __cause__.
/// The policy bridge and the module are separate libraries: the exception waits in the
/// interpreter's state dict. A newer one replaces it.
void remember_policy_error(const std::string& message, py::error_already_set& e);
/// The exception remember_policy_error kept for a message contained in WHAT (then forgotten),
/// or None.
py::object take_policy_error(const std::string& what);
/// Forgets a kept exception (before a run starts).
void forget_policy_error();

}  // namespace gfpy
