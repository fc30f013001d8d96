// The configuration node API: typed reads, children, locations, the unconsumed-key check, dumps.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "config_impl.hpp"

namespace gf {

using config_detail::Doc;
using config_detail::join;
using config_detail::mark_str;

bool ConfigNode::valid() const { return impl_->present && impl_->node.IsDefined(); }
bool ConfigNode::is_map() const { return valid() && impl_->node.IsMap(); }
bool ConfigNode::is_scalar() const { return valid() && impl_->node.IsScalar(); }
bool ConfigNode::is_sequence() const { return valid() && impl_->node.IsSequence(); }

bool ConfigNode::has(const std::string& key) const {
  if (!is_map()) return false;
  const YAML::Node& n = impl_->node;
  for (auto it = n.begin(); it != n.end(); ++it)
    if (it->first.Scalar() == key) return true;
  return false;
}

void ConfigNode::remove(const std::string& key) const {
  if (!is_map()) return;
  YAML::Node n = impl_->node;
  n.remove(key);
}

ConfigNode ConfigNode::child(const std::string& key) const {
  auto impl = std::make_shared<Impl>();
  impl->doc = impl_->doc;
  impl->path = join(impl_->path, key);
  if (is_map()) {
    const YAML::Node& n = impl_->node;
    for (auto it = n.begin(); it != n.end(); ++it)
      if (it->first.Scalar() == key) {
        impl->node = it->second;
        impl->present = true;
        break;
      }
  }
  return ConfigNode(impl);
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  if (!is_map()) return out;
  for (auto it = impl_->node.begin(); it != impl_->node.end(); ++it)
    out.push_back(it->first.Scalar());
  return out;
}

std::vector<ConfigNode> ConfigNode::items() const {
  std::vector<ConfigNode> out;
  if (!is_sequence()) return out;
  size_t i = 0;
  for (auto it = impl_->node.begin(); it != impl_->node.end(); ++it, ++i) {
    auto impl = std::make_shared<Impl>();
    impl->doc = impl_->doc;
    impl->node = static_cast<const YAML::Node&>(*it);
    impl->present = true;
    impl->path = impl_->path + "[" + std::to_string(i) + "]";
    out.push_back(ConfigNode(impl));
  }
  return out;
}

std::string ConfigNode::path() const { return impl_->path; }

std::string ConfigNode::location() const {
  const Doc& d = *impl_->doc;
  for (const auto& o : d.overridden)
    if (impl_->path == o || impl_->path.rfind(o + ".", 0) == 0) return "--set " + o;
  if (valid()) return mark_str(d, impl_->node.Mark());
  return d.file;
}

ConfigNode ConfigNode::insert_default(const std::string& key, const std::string& yaml_text,
                                      bool consumed) const {
  if (!is_map() || has(key)) return ConfigNode();
  YAML::Node value;
  try {
    value = YAML::Load(yaml_text);
  } catch (const YAML::Exception&) {
    value = YAML::Node(yaml_text);
  }
  impl_->node[key] = value;
  ConfigNode c = child(key);
  if (consumed) c.mark_consumed();
  return c;
}

std::string ConfigNode::key_location(const std::string& key) const {
  const Doc& d = *impl_->doc;
  std::string p = join(impl_->path, key);
  for (const auto& o : d.overridden)
    if (p == o || p.rfind(o + ".", 0) == 0) return "--set " + o;
  if (is_map())
    for (auto it = impl_->node.begin(); it != impl_->node.end(); ++it)
      if (it->first.Scalar() == key) return mark_str(d, it->first.Mark());
  return location();
}

void ConfigNode::fail(const std::string& msg) const {
  throw ConfigError(location() + ": `" + impl_->path + "`: " + msg);
}

std::string ConfigNode::as_string() const {
  if (!valid() || impl_->node.IsNull()) fail("missing value");
  if (!impl_->node.IsScalar())
    fail("expected a single value, found a " +
         std::string(impl_->node.IsMap() ? "mapping" : "list"));
  mark_consumed();
  // a NUL (a "\0" escape in a quoted string) would silently cut a path or a name where the
  // text reaches the system or a message
  if (impl_->node.Scalar().find('\0') != std::string::npos)
    fail("the value holds a NUL character (a \\0 escape?); no option accepts one");
  return impl_->node.Scalar();
}

namespace {
// A quoted scalar ("2", '0.5') is a string in YAML: an option that takes a number refuses it
// rather than reading the digits (yaml-cpp tags a quoted scalar "!", a plain one "?").
bool quoted(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "!"; }
}  // namespace

int64_t ConfigNode::as_int() const {
  std::string s = as_string();
  if (quoted(impl_->node))
    fail("expected an integer, found the string \"" + s + "\" (quoted): write it without quotes");
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    if (pos == s.size()) return v;
    // accept integral floats written like 1e3
    double d = std::stod(s, &pos);
    if (pos == s.size() && std::floor(d) == d && std::fabs(d) < 9e18)
      return static_cast<int64_t>(d);
  } catch (...) {
  }
  fail("expected an integer, found `" + s + "`");
}

double ConfigNode::as_float() const {
  std::string s = as_string();
  if (quoted(impl_->node))
    fail("expected a number, found the string \"" + s + "\" (quoted): write it without quotes");
  try {
    size_t pos = 0;
    double v = std::stod(s, &pos);
    if (pos == s.size()) return v;
  } catch (...) {
  }
  fail("expected a number, found `" + s + "`");
}

bool ConfigNode::as_bool() const {
  std::string s = as_string();
  if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "False" || s == "no" || s == "off") return false;
  fail("expected true or false, found `" + s + "`");
}

void ConfigNode::mark_consumed() const { impl_->doc->consumed.insert(impl_->path); }

namespace {
void walk_unconsumed(const Doc& doc, const YAML::Node& n, const std::string& path) {
  if (doc.consumed.count(path)) return;
  if (!n.IsMap()) {
    return;  // scalars and lists are checked by their owner
  }
  std::vector<std::string> keys;
  for (auto it = n.begin(); it != n.end(); ++it) keys.push_back(it->first.Scalar());
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string p = join(path, it->first.Scalar());
    if (doc.consumed.count(p)) continue;
    if (it->second.IsMap() && it->second.size() > 0) {
      walk_unconsumed(doc, it->second, p);
      continue;
    }
    throw ConfigError(mark_str(doc, it->first.Mark()) + ": unknown key `" + p +
                      "`: nothing reads it");
  }
}
}  // namespace

void ConfigNode::check_all_consumed() const {
  walk_unconsumed(*impl_->doc, impl_->node, impl_->path);
}

std::string ConfigNode::dump() const {
  YAML::Emitter out;
  out << impl_->node;
  return std::string(out.c_str()) + "\n";
}

std::string ConfigNode::base_dir() const { return impl_->doc->base_dir; }

}  // namespace gf
