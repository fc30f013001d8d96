#include "growformer/run_events.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "growformer/errors.hpp"

namespace gf {

using json = nlohmann::json;

std::optional<double> RunEvent::number(const std::string& key) const {
  for (auto& [k, v] : event.numbers)
    if (k == key) return v;
  return std::nullopt;
}

std::string RunEvent::text(const std::string& key) const {
  for (auto& [k, v] : event.strings)
    if (k == key) return v;
  return "";
}

namespace {

double number_of(const json& v) {
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

RunEvent parse_event(const std::string& line) {
  json j = json::parse(line);
  if (!j.is_object() || !j.contains("step") || !j.contains("type"))
    throw std::runtime_error("not an event (an object with `step` and `type`)");
  RunEvent r;
  r.step = j["step"].get<long>();
  r.event.type = j["type"].get<std::string>();
  for (auto& [k, v] : j.items()) {
    if (k == "step" || k == "type") continue;
    if (k == "block" && v.is_number_integer()) r.event.block = v.get<long>();
    else if (k == "head" && v.is_number_integer()) r.event.head = v.get<long>();
    else if (v.is_number() || v.is_null() || v.is_boolean())
      r.event.numbers.push_back({k, v.is_boolean() ? double(v.get<bool>()) : number_of(v)});
    else if (v.is_string()) r.event.strings.push_back({k, v.get<std::string>()});
    else if (v.is_array()) {
      std::vector<double> xs;
      for (auto& x : v) xs.push_back(number_of(x));
      r.event.lists.push_back({k, xs});
    } else {
      throw std::runtime_error("field `" + k + "` is no number, string or list of numbers");
    }
  }
  return r;
}

}  // namespace

std::vector<RunEvent> read_run_events(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw RuntimeError("cannot open " + path);
  std::vector<RunEvent> out;
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(parse_event(line));
    } catch (const std::exception& e) {
      throw RuntimeError(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  return out;
}

}  // namespace gf
