// A Python policy's answers as plain C++ values for the checks (policy_edits.hpp), and the
// short text an error quotes them by. The caller holds the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "policy_edits.hpp"

namespace gfpy {

namespace py = pybind11;

/// repr(H), at most 200 characters ("<unprintable>" when repr raises).
std::string short_repr(py::handle h);
/// A str's UTF-8 text; lone surrogates (which UTF-8 cannot hold) as \udcxx escapes.
std::string str_text(py::handle h);
/// H as the edit checks see it. Containers DEPTH 4 and deeper are opaque: the checks look at
/// the list (0), an edit (1), its info or init (2), a list in info (3) and its numbers (4).
PolicyValue policy_value(py::handle h, int depth);

}  // namespace gfpy
