// The edits a Python policy's check returns, checked over plain C++ values: the policy bridge
// converts the returned object into a PolicyValue (policy_bridge.cpp) and the fuzz harness
// fuzz/fuzz_policy_edits.cpp builds them from bytes; both call parse_policy_edits. No Python
// here: the harness builds without it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <growformer/errors.hpp>
#include <growformer/growth.hpp>

namespace gfpy {

/// A value a policy returned, as the checks see it.
struct PolicyValue {
  enum class Kind { None, Bool, Integer, Real, Str, List, Dict, Other };
  Kind kind = Kind::Other;
  bool flag = false;                 // Bool
  std::optional<long long> integer;  // Integer: its value when a long long holds it
  std::optional<double> number;      // Integer and Real: as a float, when one holds it
  std::string text;                  // Str: its text; a dict key: str(key)
  std::string repr;                  // as Python prints it (shortened)
  std::vector<PolicyValue> items;    // List: a list or a tuple
  std::vector<std::pair<PolicyValue, PolicyValue>> entries;  // Dict, in order

  bool is_real() const { return kind == Kind::Integer || kind == Kind::Real; }
  bool is_str() const { return kind == Kind::Str; }
  /// The value of dict key KEY (a str), or null.
  const PolicyValue* get(const char* key) const {
    for (const auto& kv : entries)
      if (kv.first.is_str() && kv.first.text == key) return &kv.second;
    return nullptr;
  }
};

/// What a check's edits are checked against: one block of the model.
struct BlockShape {
  bool present = false;   // the block exists
  bool editable = false;  // it can add and remove heads
  std::string describe;   // for messages
  size_t max_heads = 0;
  std::vector<int> heads;  // its head ids
  size_t mlp_width = 0;    // its MLP's units; 0 = no MLP the trainer edits
};

namespace edits_detail {

inline std::string shorten(std::string s) {
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// Python's repr of a list of ints: [0, 1, -1]
inline std::string ids_repr(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return shorten(s + "]");
}

// An event's extra fields from a dict (`info`): numbers, strings, lists of numbers.
inline void add_fields(gf::Event& e, const PolicyValue& fields, const std::string& where) {
  for (const auto& kv : fields.entries) {
    const std::string& k = kv.first.text;
    const PolicyValue& v = kv.second;
    if (v.kind == PolicyValue::Kind::Bool) {
      e.numbers.push_back({k, v.flag ? 1.0 : 0.0});
    } else if (v.is_real()) {
      if (!v.number)
        throw gf::RuntimeError(where + ": field `" + k + "`: " + v.repr +
                               " is beyond the range of a float");
      e.numbers.push_back({k, *v.number});
    } else if (v.is_str()) {
      e.strings.push_back({k, v.text});
    } else if (v.kind == PolicyValue::Kind::List) {
      std::vector<double> xs;
      for (const PolicyValue& x : v.items) {
        if (!x.is_real() || !x.number)
          throw gf::RuntimeError(where + ": field `" + k + "`: a list holds numbers only, not " +
                                 x.repr);
        xs.push_back(*x.number);
      }
      e.lists.push_back({k, xs});
    } else {
      throw gf::RuntimeError(where + ": field `" + k + "` is " + v.repr +
                             "; an event field is a number, a string or a list of numbers");
    }
  }
}

inline void parse_init(const PolicyValue& init, const std::string& at, gf::HeadInit& out) {
  if (init.kind != PolicyValue::Kind::Dict)
    throw gf::RuntimeError(at +
                           ": `init` must be a dict (mode, value_variance, preserve_function)");
  for (const auto& kv : init.entries) {
    const std::string key = kv.first.is_str() ? kv.first.text : "";
    const PolicyValue& v = kv.second;
    if (key == "mode") {
      if (!v.is_str() || v.text != "random")
        throw gf::RuntimeError(at +
                               ": init `mode` must be \"random\" (directed heads need a "
                               "direction only C++ policies give)");
      out.mode = "random";
    } else if (key == "value_variance") {
      // NaN and infinity would give the new head's values NaN or infinite weights
      if (v.kind != PolicyValue::Kind::None &&
          (!v.is_real() || !v.number || !std::isfinite(*v.number) || *v.number < 0))
        throw gf::RuntimeError(at +
                               ": init `value_variance` must be a finite number >= 0 or None, "
                               "not " +
                               v.repr);
      out.value_variance = v.kind == PolicyValue::Kind::None ? -1.0 : *v.number;
    } else if (key == "preserve_function") {
      if (v.kind != PolicyValue::Kind::Bool)
        throw gf::RuntimeError(at + ": init `preserve_function` must be True or False");
      out.preserve_function = v.flag;
    } else {
      throw gf::RuntimeError(at + ": unknown init key " + kv.first.repr +
                             " (valid: mode, value_variance, preserve_function)");
    }
  }
}

inline void parse_add(const PolicyValue& d, const std::string& at, const BlockShape& bs,
                      std::vector<int>& ids, gf::Edit& e) {
  if (d.get("head"))
    throw gf::RuntimeError(at + ": an add_head edit has no `head` (the block gives the new id)");
  if (d.get("release_direction"))
    throw gf::RuntimeError(at + ": `release_direction` belongs to remove_head");
  e.kind = gf::Edit::Kind::AddHead;
  e.init.preserve_function = true;  // the default of the built-in baselines
  if (ids.size() >= bs.max_heads)
    throw gf::RuntimeError(at + ": block " + std::to_string(e.block) + " already has " +
                           std::to_string(ids.size()) + " heads, its maximum");
  if (const PolicyValue* init = d.get("init")) parse_init(*init, at, e.init);
  ids.push_back(-1);  // a new head (its id comes when it is applied)
}

inline void parse_remove(const PolicyValue& d, const std::string& at, std::vector<int>& ids,
                         gf::Edit& e) {
  const PolicyValue* head = d.get("head");
  std::optional<long long> hi =
      head && head->kind == PolicyValue::Kind::Integer ? head->integer : std::nullopt;
  if (!hi || *hi < 0 || *hi > std::numeric_limits<int>::max())
    throw gf::RuntimeError(at + ": a remove_head edit needs `head`, the id of a head");
  e.kind = gf::Edit::Kind::RemoveHead;
  e.head_id = static_cast<int>(*hi);
  auto it = std::find(ids.begin(), ids.end(), e.head_id);
  if (it == ids.end())
    throw gf::RuntimeError(at + ": block " + std::to_string(e.block) + " has no head " +
                           std::to_string(e.head_id) + " (heads: " + ids_repr(ids) +
                           ", -1 = added by this check)");
  if (ids.size() == 1)
    throw gf::RuntimeError(at + ": head " + std::to_string(e.head_id) + " is the last of block " +
                           std::to_string(e.block));
  ids.erase(it);
  if (const PolicyValue* rel = d.get("release_direction")) {
    if (rel->kind != PolicyValue::Kind::Bool)
      throw gf::RuntimeError(at + ": `release_direction` must be True or False");
    e.release_direction = rel->flag;
  }
}

// An add_mlp_units edit's `units` (a count >= 1) or a remove_mlp_units edit's (distinct unit
// indices below WIDTH, the block's width as the earlier edits leave it, not all of them);
// WIDTH updated.
inline void parse_units(const PolicyValue& d, const std::string& at, size_t& width, gf::Edit& e) {
  const PolicyValue* units = d.get("units");
  if (d.get("head") || d.get("init") || d.get("release_direction"))
    throw gf::RuntimeError(at + ": an MLP edit takes `units`, not `head`, `init` or " +
                           "`release_direction`");
  if (width == 0)
    throw gf::RuntimeError(at + ": block " + std::to_string(e.block) + " has no MLP to edit");
  if (d.get("op")->text == "add_mlp_units") {
    if (!units || units->kind != PolicyValue::Kind::Integer || !units->integer ||
        *units->integer < 1 || *units->integer > (1 << 20))
      throw gf::RuntimeError(at + ": an add_mlp_units edit needs `units`, a count in [1, 2^20]");
    e.kind = gf::Edit::Kind::AddMlpUnits;
    e.units = static_cast<size_t>(*units->integer);
    width += e.units;
    return;
  }
  if (!units || units->kind != PolicyValue::Kind::List || units->items.empty())
    throw gf::RuntimeError(at + ": a remove_mlp_units edit needs `units`, a list of unit indices");
  e.kind = gf::Edit::Kind::RemoveMlpUnits;
  std::vector<bool> seen(width, false);
  for (const PolicyValue& u : units->items) {
    if (u.kind != PolicyValue::Kind::Integer || !u.integer || *u.integer < 0 ||
        static_cast<unsigned long long>(*u.integer) >= width)
      throw gf::RuntimeError(at + ": unit " + u.repr + " is not an index of block " +
                             std::to_string(e.block) + "'s MLP (its units: 0.." +
                             std::to_string(width - 1) + ")");
    if (seen[static_cast<size_t>(*u.integer)])
      throw gf::RuntimeError(at + ": unit " + u.repr + " is named twice");
    seen[static_cast<size_t>(*u.integer)] = true;
    e.unit_indices.push_back(static_cast<size_t>(*u.integer));
  }
  if (e.unit_indices.size() == width)
    throw gf::RuntimeError(at + ": removing all " + std::to_string(width) + " units of block " +
                           std::to_string(e.block) + "'s MLP would leave it none");
  width -= e.unit_indices.size();
}

// An insert_block or remove_block edit (`block`: the index; no other key of an edit's own):
// checked against SHAPES as the earlier edits leave them, which it then edits. A block this
// check inserts takes no head or MLP edit in the same check (its shape is the trainer's).
inline void parse_block_edit(const PolicyValue& d, const std::string& at, long long index,
                             std::vector<BlockShape>& shapes, gf::Edit& e) {
  if (d.get("head") || d.get("init") || d.get("release_direction") || d.get("units"))
    throw gf::RuntimeError(at + ": a block edit takes `block`, not `head`, `init`, " +
                           "`release_direction` or `units`");
  const size_t n = shapes.size();
  if (d.get("op")->text == "insert_block") {
    if (index < 0 || static_cast<unsigned long long>(index) > n)
      throw gf::RuntimeError(at + ": an insert_block edit's `block` is the index the new block " +
                             "takes, in [0, " + std::to_string(n) + "]");
    e.kind = gf::Edit::Kind::InsertBlock;
    e.block = static_cast<size_t>(index);
    BlockShape added;
    added.present = true;
    added.describe = "a block inserted by this check";
    shapes.insert(shapes.begin() + index, added);
    return;
  }
  if (index < 0 || static_cast<unsigned long long>(index) >= n)
    throw gf::RuntimeError(at + ": `block` must be a block index in [0, " + std::to_string(n) +
                           ")");
  if (n == 1)
    throw gf::RuntimeError(at + ": block " + std::to_string(index) + " is the model's only block");
  e.kind = gf::Edit::Kind::RemoveBlock;
  e.block = static_cast<size_t>(index);
  shapes.erase(shapes.begin() + index);
}

// One edit, a dict: op, block, reason, info, then what add_head or remove_head takes (or
// add_mlp_units / remove_mlp_units: `units`; insert_block / remove_block: nothing more); SHAPES
// are the blocks (their head ids, MLP widths, number) as the earlier edits leave them (updated).
inline gf::Edit parse_edit(const PolicyValue& d, const std::string& at,
                           std::vector<BlockShape>& shapes, const std::string& class_path) {
  if (d.kind != PolicyValue::Kind::Dict)
    throw gf::RuntimeError(at + " is not a dict with `op` and `block`");
  static const char* const known[] = {
      "op", "block", "head", "reason", "init", "release_direction", "info", "units"};
  for (const auto& kv : d.entries) {
    const std::string key = kv.first.is_str() ? kv.first.text : "";
    if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return key == k; }))
      throw gf::RuntimeError(at + ": unknown key " + kv.first.repr +
                             " (valid: op, block, head, reason, init, release_direction, info, "
                             "units)");
  }
  const PolicyValue* op = d.get("op");
  const PolicyValue* block = d.get("block");
  const std::string ops = op && op->is_str() ? op->text : "";
  const bool mlp = ops == "add_mlp_units" || ops == "remove_mlp_units";
  const bool depth = ops == "insert_block" || ops == "remove_block";
  if (ops != "add_head" && ops != "remove_head" && !mlp && !depth)
    throw gf::RuntimeError(
        at +
        ": `op` must be \"add_head\" or \"remove_head\" (heads), \"add_mlp_units\" "
        "or \"remove_mlp_units\" (MLP units), \"insert_block\" or \"remove_block\" (blocks)");
  std::optional<long long> bi =
      block && block->kind == PolicyValue::Kind::Integer ? block->integer : std::nullopt;
  if (!depth && (!bi || *bi < 0 || static_cast<unsigned long long>(*bi) >= shapes.size()))
    throw gf::RuntimeError(at + ": `block` must be a block index in [0, " +
                           std::to_string(shapes.size()) + ")");
  if (depth && !bi) throw gf::RuntimeError(at + ": a block edit needs `block`, an index");
  gf::Edit e;
  if (const PolicyValue* reason = d.get("reason")) {
    if (!reason->is_str()) throw gf::RuntimeError(at + ": `reason` must be a str");
    e.cause.strings.push_back({"reason", reason->text});
  }
  e.cause.strings.push_back({"class", class_path});
  if (const PolicyValue* info = d.get("info")) {
    if (info->kind != PolicyValue::Kind::Dict)
      throw gf::RuntimeError(at +
                             ": `info` must be a dict of name -> number, str or list of numbers");
    add_fields(e.cause, *info, at + ": `info`");
  }
  if (depth) {
    parse_block_edit(d, at, *bi, shapes, e);
    return e;
  }
  e.block = static_cast<size_t>(*bi);
  BlockShape& bs = shapes[e.block];
  if (!mlp && (!bs.present || !bs.editable))
    throw gf::RuntimeError(at + ": block " + std::to_string(e.block) + " (" +
                           (bs.present ? bs.describe : std::string("?")) +
                           ") cannot add or remove heads");
  if (mlp)
    parse_units(d, at, bs.mlp_width, e);
  else if (ops == "add_head")
    parse_add(d, at, bs, bs.heads, e);
  else
    parse_remove(d, at, bs.heads, e);
  return e;
}

}  // namespace edits_detail

/// The edits RET (what a check returned) asks for, each checked against BLOCKS as the edits
/// before it leave them; else one RuntimeError naming WHERE ("<policy>.check at step N"), the
/// edit's index and value, and what is wrong. CLASS_PATH goes into each edit's cause.
inline std::vector<gf::Edit> parse_policy_edits(const PolicyValue& ret,
                                                const std::vector<BlockShape>& blocks,
                                                const std::string& where,
                                                const std::string& class_path) {
  if (ret.kind != PolicyValue::Kind::List)
    throw gf::RuntimeError(where + " returned " + ret.repr +
                           "; expected a list of edits ([] for none), each a dict such as "
                           "{\"op\": \"add_head\", \"block\": 0, \"reason\": \"...\"}");
  // the blocks as the edits before each one leave them
  std::vector<BlockShape> shapes = blocks;
  for (BlockShape& b : shapes)
    if (!b.present) b.heads.clear();
  std::vector<gf::Edit> out;
  size_t k = 0;
  for (const PolicyValue& item : ret.items) {
    const std::string at = where + ": edit " + std::to_string(k++) + " " + item.repr;
    out.push_back(edits_detail::parse_edit(item, at, shapes, class_path));
  }
  return out;
}

}  // namespace gfpy
