// Reading a configuration: YAML text and files with their checks (characters, nesting, aliases,
// duplicate keys, a second document), and --set overrides.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string_view>

#include "config_impl.hpp"

namespace gf {
namespace config_detail {

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

}  // namespace config_detail

namespace {

using config_detail::Doc;
using config_detail::join;
using config_detail::mark_str;

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
        throw ConfigError(
            mark_str(doc, it->first.Mark()) + ": " +
            (path.empty() ? std::string("a top-level key") : "a key under `" + path + "`") +
            " holds a NUL character (a \\0 escape?); keys must be plain names");
      if (!seen.insert(key).second)
        throw ConfigError(mark_str(doc, it->first.Mark()) + ": duplicate key `" + join(path, key) +
                          "` (each key may appear once in a mapping)");
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
    if (c == '"' || c == '\'')
      quote = c;
    else if (c == '#')
      comment = true;
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
  std::vector<size_t> open;               // the columns of the levels open at this line
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

using config_detail::Doc;

ConfigNode::ConfigNode() : impl_(std::make_shared<Impl>()) { impl_->doc = std::make_shared<Doc>(); }
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
      bool marker =
          l.rfind("---", 0) == 0 && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
      if (marker && content)
        throw ConfigError(
            doc->file + ":" + std::to_string(no) +
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

}  // namespace gf
