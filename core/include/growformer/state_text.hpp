// Exact round-trip text serialisation of a component's state (growth and pruning policies save
// theirs as text in checkpoints): numbers with 17 significant digits, vectors with their length,
// and a reader that names the component in every error.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "growformer/errors.hpp"

namespace gf {
namespace state {

inline void put(std::ostringstream& os, double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  os << buf << ' ';
}
inline void put_vec(std::ostringstream& os, const std::vector<double>& v) {
  os << v.size() << ' ';
  for (double x : v) put(os, x);
}

/// Token reader over save_state() text; errors start with OWNER (e.g. "incrt").
class Reader {
 public:
  explicit Reader(const std::string& s, std::string owner = "incrt") : is_(s), owner_(std::move(owner)) {}
  /// A reader over TEXT positioned after its "TAG VERSION" header (checked), or none when TEXT
  /// is empty (a component that has saved nothing yet).
  static std::optional<Reader> open(const std::string& text, const std::string& tag,
                                    const std::string& version, std::string owner = "incrt") {
    if (text.empty()) return std::nullopt;
    std::optional<Reader> r(std::in_place, text, std::move(owner));
    r->expect(tag);
    r->expect(version);
    return r;
  }
  std::string word() {
    std::string w;
    if (!(is_ >> w)) throw RuntimeError(owner_ + ": truncated policy state");
    return w;
  }
  double num() {
    const std::string w = word();
    char* end = nullptr;
    const double v = std::strtod(w.c_str(), &end);
    if (end == w.c_str()) throw RuntimeError(owner_ + ": bad number in policy state: " + w);
    return v;
  }
  uint64_t u64() { return std::strtoull(word().c_str(), nullptr, 10); }
  long i64() { return std::strtol(word().c_str(), nullptr, 10); }
  std::vector<double> vec() {
    const size_t n = static_cast<size_t>(u64());
    std::vector<double> v(n);
    for (double& x : v) x = num();
    return v;
  }
  void expect(const std::string& tag) {
    const std::string w = word();
    if (w != tag) throw RuntimeError(owner_ + ": policy state: expected '" + tag + "', got '" + w + "'");
  }

 private:
  std::istringstream is_;
  std::string owner_;
};

}  // namespace state
}  // namespace gf
