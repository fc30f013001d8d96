#include "growformer/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

namespace gf {

// ---------------------------------------------------------------------------
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::string w = lower(word);
  size_t best = std::string::npos;
  std::string out;
  for (const auto& c0 : candidates) {
    std::string c = lower(c0);
    std::vector<size_t> prev(c.size() + 1), cur(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= w.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= c.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (w[i - 1] != c[j - 1])});
      std::swap(prev, cur);
    }
    size_t d = prev[c.size()];
    if (d < best) {
      best = d;
      out = c0;
    }
  }
  size_t limit = std::max<size_t>(2, w.size() / 3);
  if (best <= limit) return out;
  // a prefix or containment match still helps ("lr" -> "lr_min" is not useful, "atten" -> ...)
  for (const auto& c : candidates)
    if (w.size() >= 3 && lower(c).find(w) != std::string::npos) return c;
  return "";
}

std::string printable(const std::string& s, size_t max_line) {
  std::string out;
  out.reserve(std::min(s.size(), size_t{1} << 16));
  size_t line_bytes = 0, skipped = 0;
  auto flush_skipped = [&]() {
    if (skipped) out += "... (" + std::to_string(skipped) + " more bytes)";
    skipped = 0;
  };
  auto emit = [&](const std::string& piece, size_t raw) {
    if (line_bytes >= max_line) {
      skipped += raw;
      return;
    }
    out += piece;
    line_bytes += raw;
  };
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      flush_skipped();
      out += '\n';
      line_bytes = 0;
      ++i;
      continue;
    }
    // length of a valid UTF-8 sequence starting here (0 = invalid)
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len > 1) {
      if (i + len > s.size()) len = 0;
      for (size_t k = 1; len && k < len; ++k)
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) len = 0;
      if (len == 2 && c < 0xC2) len = 0;  // overlong
    }
    if (len == 1 && (c >= 0x20 && c != 0x7f)) {
      emit(std::string(1, static_cast<char>(c)), 1);
    } else if (len == 1 && c == '\t') {
      emit("\t", 1);
    } else if (len > 1) {
      emit(s.substr(i, len), len);
      i += len;
      continue;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      emit(buf, 1);
    }
    ++i;
  }
  flush_skipped();
  return out;
}

namespace {

struct Doc {
  std::string file;  // path or "<string>"
  std::string base_dir;
  YAML::Node root;
  std::set<std::string> consumed;    // paths consumed with everything below
  std::set<std::string> overridden;  // paths set with --set
};

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string join_list(const std::vector<std::string>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i];
  return s;
}

std::string mark_str(const Doc& doc, const YAML::Mark& m) {
  std::ostringstream o;
  o << doc.file;
  if (!m.is_null()) o << ":" << (m.line + 1) << ":" << (m.column + 1);
  return o.str();
}

// Aliases make the document a graph: `x: &a [*a]` is a cycle and nine aliases nested nine deep
// expand to 10^9 nodes. Every walk over a document (here, the unconsumed-key check, dumps) visits
// aliased nodes once per reference, so the expansion is bounded here, before any of them runs.
constexpr size_t kMaxConfigDepth = 64;
constexpr size_t kMaxConfigNodes = 200000;

void check_duplicates(const Doc& doc, const YAML::Node& n, const std::string& path, size_t depth,
                      size_t& visited) {
  if (++visited > kMaxConfigNodes)
    throw ConfigError(mark_str(doc, n.Mark()) + ": the configuration expands to more than " +
                      std::to_string(kMaxConfigNodes) +
                      " values (aliases referring to aliases?); write it out without them");
  if (depth > kMaxConfigDepth)
    throw ConfigError(mark_str(doc, n.Mark()) + ": `" + path.substr(0, 200) +
                      "...` is nested more than " + std::to_string(kMaxConfigDepth) +
                      " levels deep (an alias that refers to itself?)");
  if (n.IsMap()) {
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar())
        throw ConfigError(mark_str(doc, it->first.Mark()) + ": a key under `" + path +
                          "` is a list or mapping; keys must be plain names");
      std::string key = it->first.Scalar();
      if (key.find('\0') != std::string::npos)
        throw ConfigError(mark_str(doc, it->first.Mark()) + ": " +
                          (path.empty() ? std::string("a top-level key") : "a key under `" + path + "`") +
                          " holds a NUL character (a \\0 escape?); keys must be plain names");
      if (!seen.insert(key).second)
        throw ConfigError(mark_str(doc, it->first.Mark()) + ": duplicate key `" +
                          join(path, key) + "` (each key may appear once in a mapping)");
      check_duplicates(doc, it->second, join(path, key), depth + 1, visited);
    }
  } else if (n.IsSequence()) {
    size_t i = 0;
    for (auto it = n.begin(); it != n.end(); ++it, ++i)
      check_duplicates(doc, *it, path + "[" + std::to_string(i) + "]", depth + 1, visited);
  }
}

void check_duplicates(const Doc& doc, const YAML::Node& n) {
  size_t visited = 0;
  check_duplicates(doc, n, "", 0, visited);
}

// YAML allows no C0 control character but tab, LF and CR; yaml-cpp loops without end (and
// without bound on memory) on some inputs holding a NUL byte, so they are refused first.
void check_characters(const std::string& text, const std::string& file) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {  // a whole UTF-8 sequence, else an error: yaml-cpp loops on invalid ones
      size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      bool ok = len > 0 && c >= 0xC2 && i + len <= text.size();
      for (size_t k = 1; ok && k < len; ++k)
        ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 2;
      if (!ok)
        throw ConfigError(file + ":" + std::to_string(line) + ":" + std::to_string(col) +
                          ": invalid UTF-8 in the YAML text; save the file as UTF-8");
      i += len - 1;
      ++col;
      continue;
    }
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02x", c);
      throw ConfigError(file + ":" + std::to_string(line) + ":" + std::to_string(col) +
                        ": control character (byte " + buf +
                        ") in the YAML text; is this a binary file?");
    }
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
}

// yaml-cpp parses nested flow collections recursively: bound the nesting before parsing.
void check_nesting(const std::string& text, const std::string& file) {
  size_t depth = 0, line = 1;
  char quote = 0;
  bool comment = false;
  for (char c : text) {
    if (c == '\n') {
      ++line;
      comment = false;
      if (quote == '\'') quote = 0;  // no multi-line single-quoted scalars in configs
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    else if (c == '#') comment = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxConfigDepth)
        throw ConfigError(file + ":" + std::to_string(line) + ": brackets nested more than " +
                          std::to_string(kMaxConfigDepth) + " levels deep");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// Block mappings and lists nest by indentation (and by `- ` items on one line); yaml-cpp fails
// on deep ones with an unrelated message ("bad file"), so their depth is bounded before parsing.
void check_block_nesting(const std::string& text, const std::string& file) {
  std::vector<size_t> open;  // the columns of the levels open at this line
  size_t text_block = std::string::npos;  // a block scalar's indentation: its lines are text
  std::istringstream lines(text);
  std::string l;
  for (size_t no = 1; std::getline(lines, l); ++no) {
    size_t b = l.find_first_not_of(" \r");
    if (b == std::string::npos || l[b] == '#') continue;
    if (text_block != std::string::npos && b > text_block) continue;
    text_block = std::string::npos;
    while (!open.empty() && open.back() >= b) open.pop_back();
    open.push_back(b);
    for (size_t c = b; c + 1 < l.size() && l[c] == '-' && (l[c + 1] == ' ' || l[c + 1] == '\t');) {
      c = l.find_first_not_of(" \t", c + 1);
      if (c == std::string::npos) break;
      open.push_back(c);  // `- - x`: a list in a list
    }
    if (open.size() > kMaxConfigDepth)
      throw ConfigError(file + ":" + std::to_string(no) + ": mappings or lists nested more than " +
                        std::to_string(kMaxConfigDepth) +
                        " levels deep (by indentation); a configuration needs a few levels");
    size_t e = l.find_last_not_of(" \t\r");
    size_t mark = l.find_last_of("|>", e);
    if (mark != std::string::npos && l.find_first_not_of("+-0123456789", mark + 1) > e)
      text_block = b;  // `key: |` or `key: >-`: the lines below are text
  }
}

}  // namespace

struct ConfigNode::Impl {
  std::shared_ptr<Doc> doc;
  YAML::Node node;  // may be invalid/undefined
  bool present = false;
  std::string path;
};

ConfigNode::ConfigNode() : impl_(std::make_shared<Impl>()) {
  impl_->doc = std::make_shared<Doc>();
}
ConfigNode::ConfigNode(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

ConfigNode ConfigNode::load_string(const std::string& text, const std::string& name,
                                   const std::string& base_dir) {
  auto doc = std::make_shared<Doc>();
  doc->file = name.empty() ? "<string>" : name;
  doc->base_dir = base_dir;
  // a UTF-8 byte order mark is not part of the document
  std::string_view body(text);
  if (body.rfind("\xEF\xBB\xBF", 0) == 0) body.remove_prefix(3);
  check_characters(std::string(body), doc->file);
  check_nesting(std::string(body), doc->file);
  check_block_nesting(std::string(body), doc->file);
  // a second document (a `---` line after content) would be silently ignored by Load; LoadAll
  // is not used: it yields documents without end on some malformed inputs (`,w"[`)
  {
    std::istringstream lines{std::string(body)};
    std::string l;
    bool content = false;
    for (size_t no = 1; std::getline(lines, l); ++no) {
      bool marker = l.rfind("---", 0) == 0 && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
      if (marker && content)
        throw ConfigError(doc->file + ":" + std::to_string(no) +
                          ":1: a second YAML document (after `---`); a configuration is one document");
      size_t b = l.find_first_not_of(" \t\r");
      if (!marker && b != std::string::npos && l[b] != '#' && l[b] != '%') content = true;
    }
  }
  try {
    doc->root = YAML::Load(std::string(body));
  } catch (const YAML::Exception& e) {
    throw ConfigError(mark_str(*doc, e.mark) + ": malformed YAML: " + e.msg);
  }
  if (!doc->root.IsDefined() || doc->root.IsNull()) doc->root = YAML::Node(YAML::NodeType::Map);
  if (!doc->root.IsMap())
    throw ConfigError(doc->file + ": the top level must be a mapping of keys");
  check_duplicates(*doc, doc->root);
  auto impl = std::make_shared<Impl>();
  impl->doc = doc;
  impl->node = doc->root;
  impl->present = true;
  return ConfigNode(impl);
}

CappedRead read_file_capped(const std::string& path, size_t max_bytes, std::string& text) {
  text.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CappedRead::unreadable;
  char buf[1 << 16];
  for (;;) {
    size_t want = std::min(sizeof buf, max_bytes + 1 - text.size());  // one byte past the cap
    ssize_t n = ::read(fd, buf, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      errno = err;
      return CappedRead::unreadable;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      text.resize(max_bytes);
      return CappedRead::too_large;
    }
  }
  ::close(fd);
  return CappedRead::ok;
}

ConfigNode ConfigNode::load_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool there = fs::exists(path, ec);
  if (ec)  // a loop of symbolic links, a folder on the way that cannot be searched, ...
    throw ConfigError(path + ": cannot reach the configuration file: " + ec.message() +
                      (ec == std::errc::too_many_symbolic_link_levels
                           ? " (a loop of symbolic links: one of them points back to itself)"
                           : std::string()));
  if (!there) throw ConfigError(path + ": no such configuration file");
  if (fs::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, expected a YAML configuration file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
    throw ConfigError(path + ": is a device, expected a YAML configuration file");
  // the cap counts the bytes read: a pipe, like a device, reports a size of 0
  constexpr size_t kMaxConfigBytes = 16u << 20;
  std::string text;
  switch (read_file_capped(path, kMaxConfigBytes, text)) {
    case CappedRead::unreadable:
      throw ConfigError(path + ": cannot read the configuration file: " + std::strerror(errno));
    case CappedRead::too_large:
      throw ConfigError(path + ": more than 16 MiB: too large for a configuration file" +
                        (S_ISREG(st.st_mode) ? std::string() : " (and not a regular file)"));
    case CappedRead::ok:
      break;
  }
  ConfigNode n = load_string(text, path);
  n.impl_->doc->base_dir = fs::absolute(fs::path(path)).parent_path().string();
  return n;
}

void ConfigNode::apply_override(const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set " + assignment + ": expected KEY=VALUE (e.g. train.steps=100)");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  YAML::Node parsed;
  check_characters(value, "--set " + key);
  check_nesting(value, "--set " + key);
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + assignment + ": malformed value: " + e.msg);
  }
  check_duplicates(*impl_->doc, parsed);
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.empty()) throw ConfigError("--set " + assignment + ": empty key segment");
    parts.push_back(part);
  }
  // Walk with explicit node handles; yaml-cpp's operator[] on a non-const node creates entries.
  std::vector<YAML::Node> chain{impl_->node};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    } else if (!next.IsMap()) {
      throw ConfigError("--set " + assignment + ": `" + parts[i] + "` is not a mapping");
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = parsed;
  impl_->doc->overridden.insert(join(impl_->path, key));
}

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
  if (!impl_->node.IsScalar()) fail("expected a single value, found a " +
                                    std::string(impl_->node.IsMap() ? "mapping" : "list"));
  mark_consumed();
  // a NUL (a "\0" escape in a quoted string) would silently cut a path or a name where the
  // text reaches the system or a message
  if (impl_->node.Scalar().find('\0') != std::string::npos)
    fail("the value holds a NUL character (a \\0 escape?); no option accepts one");
  return impl_->node.Scalar();
}

int64_t ConfigNode::as_int() const {
  std::string s = as_string();
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    if (pos == s.size()) return v;
    // accept integral floats written like 1e3
    double d = std::stod(s, &pos);
    if (pos == s.size() && std::floor(d) == d && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
  } catch (...) {
  }
  fail("expected an integer, found `" + s + "`");
}

double ConfigNode::as_float() const {
  std::string s = as_string();
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

// ---------------------------------------------------------------------------
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
    case OptType::Int: return "int";
    case OptType::Float: return "float";
    case OptType::Bool: return "bool";
    case OptType::String: return "string";
    case OptType::IntList: return "list of int";
    case OptType::FloatList: return "list of float";
    case OptType::StringList: return "list of string";
    case OptType::Component: return "mapping";
    case OptType::Any: return "any";
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
    case OptType::Int: range(static_cast<double>(n.as_int())); break;
    case OptType::Float: {
      double v = n.as_float();
      if (!std::isfinite(v)) n.fail("value must be finite");
      range(v);
      break;
    }
    case OptType::Bool: n.as_bool(); break;
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
        if (s.type == OptType::IntList) range(static_cast<double>(it.as_int()));
        else if (s.type == OptType::FloatList) range(it.as_float());
        else it.as_string();
      }
      n.mark_consumed();
      break;
    }
    case OptType::Component:
      if (!n.is_map() && !(n.is_scalar() && n.as_string().empty()))
        n.fail("expected a mapping (with a `plugin:` key where it names a component)");
      break;
    case OptType::Any: n.mark_consumed(); break;
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
        throw ConfigError(node.key_location(key) + ": unknown key `" + c.path() + "` for " + component +
                          (dym.empty() ? "" : "; did you mean `" + dym + "`?") +
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
        node.fail("missing required key `" + s.name + "` (" + opt_type_name(s.type) + ": " +
                  s.doc + ")");
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
  return list_value<int64_t>(v.given, v.node, v.text, [](const ConfigNode& n) { return n.as_int(); });
}

std::vector<double> Options::get_float_list(const std::string& name) const {
  const Value& v = find(name);
  return list_value<double>(v.given, v.node, v.text, [](const ConfigNode& n) { return n.as_float(); });
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
