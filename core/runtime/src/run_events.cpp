#include "growformer/run_events.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "growformer/errors.hpp"
#include "growformer/json_text.hpp"
#include "log_lines.hpp"

namespace gf {

using json = nlohmann::json;

namespace {

template <class T>
const T* find_field(const std::vector<std::pair<std::string, T>>& fields, const std::string& key) {
  for (auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

double number_of(const json& v) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (v.is_boolean()) return v.get<bool>();
  if (!v.is_number()) throw std::runtime_error("`" + v.dump() + "` is no number");
  return v.get<double>();
}

std::vector<double> numbers_of(const json& v) {
  std::vector<double> xs;
  for (auto& x : v) xs.push_back(number_of(x));
  return xs;
}

// LINE as a JSON object; "corrupt line (not a JSON object): ..." otherwise (a torn line too).
json parse_object(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error("corrupt line (not a JSON object): " + line.substr(0, 60) +
                             (line.size() > 60 ? "..." : ""));
  return json_bytes_tree(j);  // the bytes the reporter was given (json_text.hpp)
}

// Runs PARSE on every line of PATH; its error gets the prefix "PATH:LINE: ".
template <class Parse>
void read_lines(const std::string& path, Parse parse) {
  bool exists = for_each_log_line(path, [&](size_t n, const std::string& line) {
    try {
      parse(line);
    } catch (const std::exception& e) {
      throw RuntimeError(path + ":" + std::to_string(n) + ": " + e.what());
    }
  });
  if (!exists) throw RuntimeError("cannot open " + path);
}

// A field of a log line into NUMBERS, STRINGS or LISTS by its shape.
template <class Line>
void add_field(Line& out, const std::string& k, const json& v) {
  if (v.is_number() || v.is_null() || v.is_boolean())
    out.numbers.push_back({k, number_of(v)});
  else if (v.is_string())
    out.strings.push_back({k, v.get<std::string>()});
  else if (v.is_array())
    out.lists.push_back({k, numbers_of(v)});
  else
    throw std::runtime_error("field `" + k + "` is no number, string or list of numbers");
}

// A line's `step` (an integer, or a float such as 490.0 as the events write it); one error for a
// value no step can have (a float cast out of range is undefined behaviour).
long step_of(const json& v) {
  if (v.is_number_integer()) return v.get<long>();
  const double x = v.get<double>();
  if (!std::isfinite(x) || std::fabs(x) > 9.0e18)
    throw std::runtime_error("corrupt line (`step` is out of range)");
  return static_cast<long>(x);
}

RunEvent parse_event(const std::string& line) {
  json j = parse_object(line);
  if (!j.contains("step") || !j["step"].is_number() || !j.contains("type") ||
      !j["type"].is_string())
    throw std::runtime_error("not an event (an object with `step` and `type`)");
  RunEvent r;
  r.step = step_of(j["step"]);
  r.event.type = j["type"].get<std::string>();
  for (auto& [k, v] : j.items()) {
    if (k == "step" || k == "type") continue;
    if (k == "block" && v.is_number_integer())
      r.event.block = v.get<long>();
    else if (k == "head" && v.is_number_integer())
      r.event.head = v.get<long>();
    else
      add_field(r.event, k, v);
  }
  return r;
}

// A head id of a `blocks` entry's "heads" ("3" -> 3).
long head_id(const std::string& key) {
  size_t end = 0;
  long id = -1;
  try {
    id = std::stol(key, &end);
  } catch (const std::exception&) {
  }
  if (key.empty() || end != key.size() || id < 0)
    throw std::runtime_error("`blocks` names head `" + key + "`, which is no head id");
  return id;
}

// A train line's "blocks": per block, lists of numbers and "heads": {id: {name: number}}.
std::vector<BlockDiagnostics> parse_blocks(const json& blocks) {
  if (!blocks.is_array()) throw std::runtime_error("`blocks` is no list of block objects");
  std::vector<BlockDiagnostics> out;
  for (auto& b : blocks) {
    if (!b.is_object())
      throw std::runtime_error("`blocks` holds " + b.dump(-1).substr(0, 40) + ", no object");
    BlockDiagnostics d;
    for (auto& [k, v] : b.items()) {
      if (k == "heads" && v.is_object()) {
        for (auto& [h, scalars] : v.items()) {
          if (!scalars.is_object())
            throw std::runtime_error("`blocks` head `" + h + "` is no object");
          auto& dst = d.heads[head_id(h)];
          for (auto& [name, x] : scalars.items()) dst[name] = number_of(x);
        }
      } else if (v.is_array()) {
        d.lists[k] = numbers_of(v);
      } else {
        throw std::runtime_error("`blocks` field `" + k + "` is no list of numbers");
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

MetricsLine parse_metrics(const std::string& line) {
  json j = parse_object(line);
  if (!j.contains("step") || !j["step"].is_number())
    throw std::runtime_error("corrupt line (no numeric `step`)");
  MetricsLine m;
  m.step = step_of(j["step"]);
  m.split = j.contains("split") && j["split"].is_string() ? j["split"].get<std::string>() : "";
  if (m.split != "train" && m.split != "val" && m.split != "test")
    throw std::runtime_error("corrupt line (`split` is not train, val or test)");
  for (auto& [k, v] : j.items()) {
    if (k == "step" || k == "split") continue;
    if (k == "blocks")
      m.blocks = parse_blocks(v);
    else
      add_field(m, k, v);
  }
  return m;
}

// A whole small run file (configuration, plugin lock); "" when absent.
std::string read_run_file(const std::string& path) {
  constexpr std::uintmax_t kMaxRunFile = 16u << 20;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (!S_ISREG(st.st_mode) || static_cast<std::uintmax_t>(st.st_size) > kMaxRunFile)
    throw RuntimeError(path + ": not a regular file of at most 16 MiB; remove or replace it");
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size())))
    throw RuntimeError(path + ": read failed");
  return text;
}

std::vector<PluginLock> parse_plugin_lock(const std::string& path, const std::string& text) {
  std::vector<PluginLock> out;
  if (text.empty()) return out;
  json j = json::parse(text, nullptr, false);
  if (!j.is_discarded()) j = json_bytes_tree(j);  // paths are bytes (json_text.hpp)
  auto field = [](const json& e, const char* k) {
    if (!e.contains(k) || !e[k].is_string()) throw std::runtime_error("");
    return e[k].get<std::string>();
  };
  try {
    if (!j.is_array()) throw std::runtime_error("");
    for (auto& e : j)
      out.push_back(
          {field(e, "plugin"), field(e, "version"), field(e, "path"), field(e, "checksum")});
  } catch (const std::exception&) {
    throw RuntimeError(path +
                       ": not a plugin lock (a JSON list of objects with the strings `plugin`, "
                       "`version`, `path` and `checksum`)");
  }
  return out;
}

}  // namespace

std::optional<double> RunEvent::number(const std::string& key) const {
  const double* v = find_field(event.numbers, key);
  return v ? std::optional<double>(*v) : std::nullopt;
}

std::string RunEvent::text(const std::string& key) const {
  const std::string* v = find_field(event.strings, key);
  return v ? *v : "";
}

std::vector<double> RunEvent::list(const std::string& key) const {
  const std::vector<double>* v = find_field(event.lists, key);
  return v ? *v : std::vector<double>{};
}

std::optional<double> MetricsLine::number(const std::string& key) const {
  const double* v = find_field(numbers, key);
  return v ? std::optional<double>(*v) : std::nullopt;
}

std::string MetricsLine::text(const std::string& key, const std::string& otherwise) const {
  const std::string* v = find_field(strings, key);
  return v ? *v : otherwise;
}

std::vector<double> MetricsLine::list(const std::string& key) const {
  const std::vector<double>* v = find_field(lists, key);
  return v ? *v : std::vector<double>{};
}

std::vector<RunEvent> read_run_events(const std::string& path) {
  std::vector<RunEvent> out;
  read_lines(path, [&](const std::string& line) { out.push_back(parse_event(line)); });
  return out;
}

std::vector<MetricsLine> read_metrics(const std::string& path) {
  std::vector<MetricsLine> out;
  read_lines(path, [&](const std::string& line) { out.push_back(parse_metrics(line)); });
  return out;
}

std::vector<PluginLock> read_plugin_lock(const RunDir& dir) {
  return parse_plugin_lock(dir.plugins_lock(), read_run_file(dir.plugins_lock()));
}

RunLog read_run_log(const RunDir& dir) {
  RunLog r;
  for (MetricsLine& m : read_metrics(dir.metrics())) {
    if (m.split == "train")
      r.train.push_back(std::move(m));
    else if (m.split == "val")
      r.val.push_back(std::move(m));
    else
      r.test = std::move(m);
  }
  struct stat st {};
  if (::stat(dir.events().c_str(), &st) == 0) r.events = read_run_events(dir.events());
  r.config = read_run_file(dir.resolved_config());
  r.plugins = parse_plugin_lock(dir.plugins_lock(), read_run_file(dir.plugins_lock()));
  return r;
}

}  // namespace gf
