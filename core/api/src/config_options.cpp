// Options: a component's declared options read from its configuration node, with defaults,
// ranges, choices and "did you mean" for unknown keys.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "config_impl.hpp"

namespace gf {

using config_detail::join_list;
using config_detail::mark_str;

OptionSpec make_option(std::string name, OptType type, std::string default_value, std::string doc,
                       double min, double max, std::vector<std::string> choices) {
  OptionSpec o;
  o.name = std::move(name);
  o.type = type;
  o.required = default_value.empty();
  o.default_value = std::move(default_value);
  o.doc = std::move(doc);
  o.min = min;
  o.max = max;
  o.choices = std::move(choices);
  return o;
}

const char* opt_type_name(OptType t) {
  switch (t) {
    case OptType::Int:
      return "int";
    case OptType::Float:
      return "float";
    case OptType::Bool:
      return "bool";
    case OptType::String:
      return "string";
    case OptType::IntList:
      return "list of int";
    case OptType::FloatList:
      return "list of float";
    case OptType::StringList:
      return "list of string";
    case OptType::Component:
      return "mapping";
    case OptType::Any:
      return "any";
  }
  return "?";
}

namespace {
void check_value(const ConfigNode& n, const OptionSpec& s) {
  auto range = [&](double v) {
    if (v < s.min || v > s.max) {
      std::ostringstream o;
      o << "value " << v << " out of range [" << s.min << ", " << s.max << "]";
      n.fail(o.str());
    }
  };
  switch (s.type) {
    case OptType::Int:
      range(static_cast<double>(n.as_int()));
      break;
    case OptType::Float: {
      double v = n.as_float();
      if (!std::isfinite(v)) n.fail("value must be finite");
      range(v);
      break;
    }
    case OptType::Bool:
      n.as_bool();
      break;
    case OptType::String: {
      std::string v = n.as_string();
      if (!s.choices.empty() &&
          std::find(s.choices.begin(), s.choices.end(), v) == s.choices.end()) {
        std::string dym = did_you_mean(v, s.choices);
        n.fail("`" + v + "` is not one of: " + join_list(s.choices) +
               (dym.empty() ? "" : " (did you mean `" + dym + "`?)"));
      }
      break;
    }
    case OptType::IntList:
    case OptType::FloatList:
    case OptType::StringList: {
      if (!n.is_sequence()) n.fail(std::string("expected a ") + opt_type_name(s.type));
      for (auto& it : n.items()) {
        if (s.type == OptType::IntList)
          range(static_cast<double>(it.as_int()));
        else if (s.type == OptType::FloatList)
          range(it.as_float());
        else
          it.as_string();
      }
      n.mark_consumed();
      break;
    }
    case OptType::Component:
      if (!n.is_map() && !(n.is_scalar() && n.as_string().empty()))
        n.fail("expected a mapping (with a `plugin:` key where it names a component)");
      break;
    case OptType::Any:
      n.mark_consumed();
      break;
  }
}
}  // namespace

Options::Options(const ConfigNode& node, const OptionSpecs& specs, const std::string& component)
    : component_(component), base_dir_(node.base_dir()), path_(node.path()) {
  if (node.valid() && node.location().rfind("<default of ", 0) != 0) node_where_ = node.location();
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  if (node.valid() && !node.is_map()) {
    bool null_scalar = node.is_scalar() && node.as_string().empty();
    if (!null_scalar) node.fail("expected a mapping of options for `" + component + "`");
  }
  if (node.is_map()) {
    for (const auto& key : node.keys()) {
      if (key == "plugin") continue;  // consumed by the registry
      if (std::find(names.begin(), names.end(), key) == names.end()) {
        std::string dym = did_you_mean(key, names);
        ConfigNode c = node.child(key);
        throw ConfigError(node.key_location(key) + ": unknown key `" + c.path() + "` for " +
                          component + (dym.empty() ? "" : "; did you mean `" + dym + "`?") +
                          " (valid keys: " + (names.empty() ? "none" : join_list(names)) + ")");
      }
    }
  }
  for (const auto& s : specs) {
    Value v;
    v.type = s.type;
    ConfigNode c = node.child(s.name);
    if (c.valid() && !(c.is_scalar() && c.as_string() == "~")) {
      if (s.type != OptType::Component && c.is_scalar() && c.as_string().empty() &&
          s.type != OptType::String)
        c.fail("missing value (expected " + std::string(opt_type_name(s.type)) + ")");
      check_value(c, s);
      v.node = c;
      v.given = true;
      if (c.is_scalar()) v.text = c.as_string();
    } else {
      if (s.required) {
        node.fail("missing required key `" + s.name + "` (" + opt_type_name(s.type) + ": " + s.doc +
                  ")");
      }
      v.text = s.default_value;
      if (c.valid()) c.mark_consumed();
      // Write the default into the document, so that the resolved config (run directory,
      // checkpoints) spells out every value the run used.
      if (!c.valid() && node.is_map() && !v.text.empty() && v.text != "~") {
        v.node = node.insert_default(s.name, v.text, s.type != OptType::Component);
        v.defaulted_in_doc = v.node.valid();
      }
    }
    values_[s.name] = v;
    defaults_[s.name] = s.default_value;
  }
  if (node.valid()) node.mark_consumed();
}

const Options::Value& Options::find(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    throw std::logic_error(component_ + ": option `" + name + "` was not declared");
  return it->second;
}

namespace {
YAML::Node default_node(const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (...) {
    return YAML::Node(text);
  }
}
}  // namespace

int64_t Options::get_int(const std::string& name) const {
  const Value& v = find(name);
  if (v.given) return v.node.as_int();
  if (v.text.empty() || v.text == "~") throw std::logic_error(component_ + "." + name + " unset");
  return static_cast<int64_t>(std::stod(v.text));
}

double Options::get_float(const std::string& name) const {
  const Value& v = find(name);
  if (v.given) return v.node.as_float();
  if (v.text.empty() || v.text == "~") throw std::logic_error(component_ + "." + name + " unset");
  return std::stod(v.text);
}

bool Options::get_bool(const std::string& name) const {
  const Value& v = find(name);
  if (v.given) return v.node.as_bool();
  return v.text == "true";
}

std::string Options::get_string(const std::string& name) const {
  const Value& v = find(name);
  if (v.given) return v.node.as_string();
  return v.text == "~" ? "" : v.text;
}

namespace {
// A list option: the document's items, else the declared default's.
template <class T, class FromItem>
std::vector<T> list_value(bool given, const ConfigNode& node, const std::string& default_text,
                          FromItem from_item) {
  std::vector<T> out;
  if (given) {
    for (auto& it : node.items()) out.push_back(from_item(it));
    return out;
  }
  YAML::Node n = default_node(default_text);
  if (n.IsSequence())
    for (auto x : n) out.push_back(x.as<T>());
  return out;
}
}  // namespace

std::vector<int64_t> Options::get_int_list(const std::string& name) const {
  const Value& v = find(name);
  return list_value<int64_t>(v.given, v.node, v.text,
                             [](const ConfigNode& n) { return n.as_int(); });
}

std::vector<double> Options::get_float_list(const std::string& name) const {
  const Value& v = find(name);
  return list_value<double>(v.given, v.node, v.text,
                            [](const ConfigNode& n) { return n.as_float(); });
}

std::vector<std::string> Options::get_string_list(const std::string& name) const {
  const Value& v = find(name);
  return list_value<std::string>(v.given, v.node, v.text,
                                 [](const ConfigNode& n) { return n.as_string(); });
}

ConfigNode Options::get_node(const std::string& name) const {
  const Value& v = find(name);
  if (v.given || v.defaulted_in_doc) return v.node;
  // a defaulted component: parse the default text as its own small document
  ConfigNode n = ConfigNode::load_string(v.text.empty() || v.text == "~" ? "{}" : v.text,
                                         "<default of " + component_ + "." + name + ">");
  return n;
}

bool Options::is_set(const std::string& name) const { return find(name).given; }

bool Options::differs_from_default(const std::string& name) const {
  const Value& v = find(name);
  if (!v.given) return false;
  auto it = defaults_.find(name);
  if (it == defaults_.end() || !v.node.is_scalar()) return true;
  const std::string& d = it->second;
  if (v.text == d) return false;
  if (v.type == OptType::Int || v.type == OptType::Float) {
    try {
      return std::stod(v.text) != std::stod(d);
    } catch (...) {
      return true;
    }
  }
  return true;
}

bool Options::has_value(const std::string& name) const {
  const Value& v = find(name);
  return v.given || !(v.text.empty() || v.text == "~");
}

std::string Options::where(const std::string& name) const {
  const Value& v = find(name);
  if (v.given) return v.node.location();
  const std::string p = path_.empty() ? name : path_ + "." + name;
  // where the component is written, and that its option is not: what the default came from
  if (!node_where_.empty()) return node_where_ + " (`" + p + "` not set: its default)";
  return "default of `" + p + "`";
}

void Options::fail(const std::string& name, const std::string& msg) const {
  std::string p = path_.empty() ? name : path_ + "." + name;
  throw ConfigError(where(name) + ": `" + p + "`: " + msg);
}

std::string Options::resolve_path(const std::string& p) const {
  namespace fs = std::filesystem;
  if (p.empty() || fs::path(p).is_absolute() || base_dir_.empty()) return p;
  return (fs::path(base_dir_) / p).lexically_normal().string();
}

}  // namespace gf
