// Exact round-trip text serialisation of a component's state (growth and pruning policies save
// theirs as text in checkpoints): numbers with 17 significant digits, vectors with their length,
// and a reader that names the component in every error.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "growformer/errors.hpp"

GROWFORMER_API_BEGIN

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

/// Token reader over save_state() text; errors start with OWNER (the component's name).
class Reader {
 public:
  Reader(const std::string& s, std::string owner) : is_(s), owner_(std::move(owner)) {}
  /// A reader over TEXT positioned after its "TAG VERSION" header (checked), or none when TEXT
  /// is empty (a component that has saved nothing yet). OWNER defaults to TAG.
  static std::optional<Reader> open(const std::string& text, const std::string& tag,
                                    const std::string& version, std::string owner = "") {
    if (text.empty()) return std::nullopt;
    std::optional<Reader> r(std::in_place, text, owner.empty() ? tag : std::move(owner));
    r->expect(tag);
    r->expect(version);
    return r;
  }
  /// As above for a text of any version from MIN_VERSION to MAX_VERSION (whole numbers);
  /// version() gives the one read.
  static std::optional<Reader> open(const std::string& text, const std::string& tag,
                                    int min_version, int max_version, std::string owner = "") {
    if (text.empty()) return std::nullopt;
    std::optional<Reader> r(std::in_place, text, owner.empty() ? tag : std::move(owner));
    r->expect(tag);
    const std::string w = r->word();
    for (int v = min_version; v <= max_version; ++v)
      if (w == std::to_string(v)) r->version_ = v;
    if (r->version_ < 0)
      throw RuntimeError(r->owner_ + ": policy state: expected version '" +
                         std::to_string(min_version) + "' to '" + std::to_string(max_version) +
                         "', got '" + w + "'");
    return r;
  }
  /// The version open() read (-1 when the reader was made directly).
  int version() const { return version_; }
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
  /// The length of a list: at most MAX, so that a corrupt text cannot ask for any allocation.
  size_t count(size_t max = 1000000) {
    const uint64_t n = u64();
    if (n > max)
      throw RuntimeError(owner_ + ": policy state: a list of " + std::to_string(n) + " entries");
    return static_cast<size_t>(n);
  }
  std::vector<double> vec() {
    const size_t n = count(10000000);
    std::vector<double> v(n);
    for (double& x : v) x = num();
    return v;
  }
  void expect(const std::string& tag) {
    const std::string w = word();
    if (w != tag)
      throw RuntimeError(owner_ + ": policy state: expected '" + tag + "', got '" + w + "'");
  }

 private:
  std::istringstream is_;
  std::string owner_;
  int version_ = -1;
};

}  // namespace state
}  // namespace gf

GROWFORMER_API_END
