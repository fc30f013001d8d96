// ConfigError and RunError: the module's exceptions, translated from the C++ ones.
#include <cstring>

#include "module.hpp"

namespace gfpy {
namespace {

// ConfigError and RunError from the C++ exceptions; a policy's Python exception, kept by the
// policy bridge, becomes the __cause__ of the error whose message reports it.
py::handle g_config_error, g_run_error;

// WHAT as a Python str: bytes that are not UTF-8 (a corrupt line quoted from a binary file, a
// file name) as \xHH escapes, so the message is never lost.
py::str message_text(const char* what) {
  PyObject* s =
      PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "backslashreplace");
  if (!s) {
    PyErr_Clear();
    return py::str("(an error message that could not be decoded)");
  }
  return py::reinterpret_steal<py::str>(s);
}

void raise_with_cause(py::handle type, const char* what) {
  py::object cause = take_policy_error(what);
  if (cause.is_none()) {
    PyErr_SetObject(type.ptr(), message_text(what).ptr());
    return;
  }
  py::object err = py::reinterpret_borrow<py::object>(type)(message_text(what));
  PyException_SetCause(err.ptr(), cause.release().ptr());  // steals the reference
  PyErr_SetObject(type.ptr(), err.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  static py::exception<gf::ConfigError> config_error(m, "ConfigError", PyExc_ValueError);
  static py::exception<gf::RuntimeError> run_error(m, "RunError", PyExc_RuntimeError);
  config_error.attr("__doc__") =
      "A configuration the program refuses (a ValueError): a malformed config, an unknown key, "
      "plugin or option, a bad value, a policy class that cannot be made; the message names "
      "the file, line and key. A policy's own exception is its __cause__.";
  run_error.attr("__doc__") =
      "A run that failed (a RuntimeError): unreadable data or checkpoints, a policy that raised "
      "or answered wrongly, a non-finite loss; the message names what and where. A policy's own "
      "exception is its __cause__.";
  g_config_error = config_error;
  g_run_error = run_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gf::ConfigError& e) {
      raise_with_cause(g_config_error, e.what());
    } catch (const gf::RuntimeError& e) {
      raise_with_cause(g_run_error, e.what());
    }
  });
}

}  // namespace gfpy
