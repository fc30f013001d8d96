// growformer.Config (a YAML file, YAML text or a dict, plus overrides) and the path and config
// arguments of the module's functions.
#include <filesystem>

#include "module.hpp"

namespace fs = std::filesystem;

namespace gfpy {

gf::ConfigNode Config::node() const {
  gf::ConfigNode n = path.empty() ? gf::ConfigNode::load_string(text, name, base_dir)
                                  : gf::ConfigNode::load_file(path);
  for (const std::string& o : overrides) n.apply_override(o);
  return n;
}

namespace {
// A config dict as JSON text (growformer._convert: policy classes given as class objects,
// numpy numbers, paths; one ConfigError naming the key of anything else).
std::string config_json(py::handle d) {
  return py::module_::import("growformer._convert").attr("config_json")(d).cast<std::string>();
}
}  // namespace

std::string path_arg(py::handle h, const std::string& what) {
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::bytes>(h) || py::hasattr(h, "__fspath__")) {
    py::module_ os = py::module_::import("os");
    return os.attr("fsdecode")(os.attr("fspath")(h)).cast<std::string>();
  }
  throw py::type_error(what + " is a path (a str or an os.PathLike such as pathlib.Path), not " +
                       py::repr(h).cast<std::string>());
}

std::vector<std::string> path_list(py::handle h, const std::string& what) {
  std::vector<std::string> out;
  if (h.is_none()) return out;
  if (py::isinstance<py::str>(h) || py::isinstance<py::bytes>(h) || py::hasattr(h, "__fspath__") ||
      !py::isinstance<py::iterable>(h))
    throw py::type_error(what + " is a list of paths, not " + py::repr(h).cast<std::string>() +
                         " (wrap one path in a list)");
  size_t i = 0;
  for (auto x : h) out.push_back(path_arg(x, what + "[" + std::to_string(i++) + "]"));
  return out;
}

Config config_from(py::handle src, const std::vector<std::string>& overrides,
                   const std::string& base_dir) {
  Config c;
  if (py::isinstance<Config>(src)) {
    c = src.cast<Config>();
  } else if (py::isinstance<py::dict>(src)) {
    c.text = config_json(src);
    c.name = "<dict>";
    c.base_dir = base_dir.empty() ? fs::current_path().string() : base_dir;
  } else if (py::isinstance<py::str>(src) || py::hasattr(src, "__fspath__")) {
    c.path = path_arg(src, "config");
    if (!fs::exists(c.path)) throw gf::ConfigError(c.path + ": no such config file");
  } else {
    throw py::type_error("a config is a growformer.Config, a path to a YAML file or a dict, not " +
                         py::repr(src).cast<std::string>());
  }
  for (const std::string& o : overrides) c.overrides.push_back(o);
  c.node();  // parse now: a malformed document or override fails here, with its location
  return c;
}

/// growformer.Config: a YAML file or a dict, plus overrides.
void bind_config(py::module_& m) {
  py::class_<Config>(
      m, "Config",
      R"doc(A configuration: a YAML file, YAML text or a dict, plus KEY=VALUE overrides.

Experiment() takes one (or a path or a dict directly). Each Experiment parses it afresh, so one
Config can build several. Errors are ConfigError naming the file, line and key.)doc")
      .def_static(
          "load",
          [](py::object path, const std::vector<std::string>& overrides) {
            return config_from(py::str(path_arg(path, "Config.load: path")), overrides, "");
          },
          "path"_a, "overrides"_a = std::vector<std::string>{},
          "A YAML config file (a str or pathlib.Path) with OVERRIDES (\"train.steps=300\", "
          "...); relative data paths resolve against the file's folder.")
      .def_static(
          "from_dict",
          [](py::dict d, const std::vector<std::string>& overrides, py::object base_dir) {
            return config_from(d, overrides,
                               base_dir.is_none()
                                   ? std::string()
                                   : path_arg(base_dir, "Config.from_dict: base_dir"));
          },
          "config"_a, "overrides"_a = std::vector<std::string>{}, "base_dir"_a = "",
          "A config as nested dicts (values: str, numbers, bools, None, lists, dicts; also "
          "numpy numbers, paths, and a policy class given as the class object, recorded as "
          "module.Class with its module's folder in `path`); relative paths resolve "
          "against BASE_DIR (default the current folder).")
      .def_static(
          "from_yaml",
          [](const std::string& text, const std::vector<std::string>& overrides,
             py::object base_dir) {
            Config c;
            c.text = text;
            c.name = "<yaml>";
            std::string dir = base_dir.is_none() ? std::string()
                                                 : path_arg(base_dir, "Config.from_yaml: base_dir");
            c.base_dir = dir.empty() ? fs::current_path().string() : dir;
            return config_from(py::cast(c), overrides, "");
          },
          "text"_a, "overrides"_a = std::vector<std::string>{}, "base_dir"_a = "",
          "A config from YAML TEXT; relative paths resolve against BASE_DIR (default the "
          "current folder).")
      .def(
          "set",
          [](Config& c, const std::string& assignment) {
            Config next = c;
            next.overrides.push_back(assignment);
            next.node();
            c = next;
            return c;
          },
          "assignment"_a,
          "Adds a KEY=VALUE override (dotted key, YAML value), checked now; returns the config.")
      .def_readonly("overrides", &Config::overrides,
                    "The KEY=VALUE overrides, in order (list of str).")
      .def(
          "yaml", [](const Config& c) { return c.node().dump(); },
          "The document with the overrides applied, as YAML text.")
      .def(
          "to_dict", [](const Config& c) { return config_to_py(c.node()); },
          "The document with the overrides applied, as nested dicts and lists (scalars as int, "
          "float, bool, None or str).")
      .def("__repr__", [](const Config& c) {
        return "growformer.Config(" + (c.path.empty() ? c.name : c.path) +
               ", overrides=" + py::repr(py::cast(c.overrides)).cast<std::string>() + ")";
      });
}

}  // namespace gfpy
