// Bytes in JSON. A JSON string is UTF-8 text, but the labels, ids, words and paths a run writes
// into JSON (checkpoints, logs, predictions, statistics) are bytes from files and file names,
// which need not be UTF-8. Every JSON the program writes goes through `dump_json`, which writes
// such a string in an escaped form that `json_bytes` turns back into the very same bytes:
//
//   a string that is valid UTF-8 and does not begin with U+FFFD is written as it is;
//   any other string is written as U+FFFD followed by its bytes, where each byte that is not
//   part of a valid UTF-8 sequence is written `\xHH` (two lowercase hex digits) and each
//   backslash `\\`; valid UTF-8 sequences stay as they are.
//
// So the label bytes `caf` 0xE9 are the JSON string "\ufffdcaf\\xe9" (shown as `�caf\xe9`), and
// a reader that does not know the form still sees where the odd bytes were. The form is
// injective, so a vocabulary or a class name saved in a checkpoint compares equal to the one
// rebuilt from the same data; `json_bytes` of any string not written by `json_text` is that
// string itself.
#pragma once
#include "growformer/export.hpp"

#include <string>
#include <string_view>

GROWFORMER_API_BEGIN

namespace gf {

/// Whether BYTES are well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool is_utf8(std::string_view bytes);

/// Whether json_text changes BYTES (they are not UTF-8, or begin with U+FFFD).
bool needs_json_text(std::string_view bytes);

/// BYTES as a valid UTF-8 string in the form above (BYTES themselves when they need none).
std::string json_text(std::string_view bytes);

/// The bytes that json_text turned into TEXT; TEXT itself when it is not in the escaped form.
std::string json_bytes(std::string_view text);

namespace detail {
template <class Json>
bool json_needs_text(const Json& j) {
  if (j.is_string()) return needs_json_text(j.template get_ref<const typename Json::string_t&>());
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (needs_json_text(it.key()) || json_needs_text(it.value())) return true;
  } else if (j.is_array()) {
    for (const auto& x : j)
      if (json_needs_text(x)) return true;
  }
  return false;
}

// J with every string and key through F.
template <class Json, class F>
Json map_json_strings(const Json& j, const F& f) {
  if (j.is_string()) return Json(f(j.template get_ref<const typename Json::string_t&>()));
  if (j.is_object()) {
    Json out = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it)
      out[f(it.key())] = map_json_strings(it.value(), f);
    return out;
  }
  if (j.is_array()) {
    Json out = Json::array();
    for (const auto& x : j) out.push_back(map_json_strings(x, f));
    return out;
  }
  return j;
}
}  // namespace detail

/// J as text (nlohmann::json's dump(INDENT)), every string and key written through json_text:
/// never the "invalid UTF-8" error of a plain dump, and nothing lost.
template <class Json>
std::string dump_json(const Json& j, int indent = -1) {
  if (!detail::json_needs_text(j)) return j.dump(indent);
  return detail::map_json_strings(j, [](const std::string& s) { return json_text(s); })
      .dump(indent);
}

/// J (as read from text dump_json wrote) with every string and key back as its bytes.
template <class Json>
Json json_bytes_tree(const Json& j) {
  return detail::map_json_strings(j, [](const std::string& s) { return json_bytes(s); });
}

}  // namespace gf

GROWFORMER_API_END
