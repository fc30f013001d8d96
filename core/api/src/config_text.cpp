// Text helpers of the configuration's messages: "did you mean" and printable excerpts.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "growformer/config.hpp"

namespace gf {

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

}  // namespace gf
