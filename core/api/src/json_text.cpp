#include "growformer/json_text.hpp"

#include <cstdio>

namespace gf {

namespace {
constexpr std::string_view kMark = "\xEF\xBF\xBD";  // U+FFFD, the replacement character

// The length of the well-formed UTF-8 sequence at S[I], or 0 when the byte there starts none.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode Table 3-7)
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return len;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is not the form json_text writes
}
}  // namespace

bool is_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    size_t n = utf8_sequence(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool needs_json_text(std::string_view bytes) {
  return bytes.substr(0, kMark.size()) == kMark || !is_utf8(bytes);
}

std::string json_text(std::string_view bytes) {
  if (!needs_json_text(bytes)) return std::string(bytes);
  std::string out(kMark);
  out.reserve(bytes.size() + 16);
  for (size_t i = 0; i < bytes.size();) {
    size_t n = utf8_sequence(bytes, i);
    if (n == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(bytes[i]));
      out += buf;
      ++i;
    } else if (bytes[i] == '\\') {
      out += "\\\\";
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string json_bytes(std::string_view text) {
  if (text.substr(0, kMark.size()) != kMark) return std::string(text);
  std::string out;
  for (size_t i = kMark.size(); i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < text.size() && text[i + 1] == 'x' && hex_digit(text[i + 2]) >= 0 &&
               hex_digit(text[i + 3]) >= 0) {
      out += static_cast<char>(hex_digit(text[i + 2]) * 16 + hex_digit(text[i + 3]));
      i += 3;
    } else {
      return std::string(text);  // not the escaped form: the text is itself
    }
  }
  // only what json_text writes is its escape (a `\x41` it would have written as `A`, say)
  return json_text(out) == text ? out : std::string(text);
}

}  // namespace gf
