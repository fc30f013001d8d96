// The edit lists a Python growth or pruning policy's check returns, checked as the policy bridge
// checks them (python/src/policy_edits.hpp, parse_policy_edits), without Python.
//
// Input: the model's blocks, one line each ("MAX EDITABLE ID ID ...": the most heads, 1 when
// it can add and remove heads, its head ids; MAX `*` = no maximum; `-` = no block), then
// "\n%%\n", then the returned value as JSON text, read as Python values: objects as dicts,
// arrays as lists, integers, floats, strings, true/false, null as None; and the Python values
// JSON lacks: the strings "$nan", "$inf", "-$inf" (floats), "$huge" (an int no float holds),
// "$object" (an instance of some class), and object keys "$int:N" (an int key).
//
// The answer must be a RuntimeError, or edits that the blocks take one after the other: each
// head edit on an editable block, an added head within the block's maximum with a random init
// whose value variance is the default (-1) or a finite number >= 0, a removed head one the
// block holds then and not its last; a block inserted at an index up to the number of blocks
// (taking no head edit after it), a block removed that the model holds, not its only one.
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "policy_edits.hpp"

namespace {

using gfpy::BlockShape;
using gfpy::PolicyValue;
using K = PolicyValue::Kind;

[[noreturn]] void defect(const std::string& what) {
  std::fprintf(stderr, "accepted an edit the blocks cannot take: %s\n", what.c_str());
  std::abort();
}

std::vector<BlockShape> read_blocks(const std::string& text) {
  std::vector<BlockShape> blocks;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line) && blocks.size() < 8) {
    std::istringstream l(line);
    std::string max;
    BlockShape b;
    if (!(l >> max) || max == "-") {
      blocks.push_back(b);
      continue;
    }
    b.present = true;
    b.describe = "block " + std::to_string(blocks.size());
    b.max_heads =
        max == "*" ? static_cast<size_t>(-1) : static_cast<size_t>(std::atoi(max.c_str()) & 63);
    int editable = 0, id = 0;
    l >> editable;
    b.editable = editable == 1;
    while (b.heads.size() < 64 && l >> id) b.heads.push_back(id);
    blocks.push_back(b);
  }
  return blocks;
}

PolicyValue from_json(const nlohmann::json& j, int depth) {
  PolicyValue v;
  v.repr = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (v.repr.size() > 200) v.repr = v.repr.substr(0, 200) + "...";
  if (j.is_null()) {
    v.kind = K::None;
  } else if (j.is_boolean()) {
    v.kind = K::Bool;
    v.flag = j.get<bool>();
  } else if (j.is_number_integer() &&
             !(j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))) {
    v.kind = K::Integer;
    v.integer = j.get<long long>();
    v.number = static_cast<double>(*v.integer);
  } else if (j.is_number()) {  // a float, or an integer beyond a long long
    v.kind = j.is_number_unsigned() ? K::Integer : K::Real;
    v.number = j.get<double>();
  } else if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "$nan" || s == "$inf" || s == "-$inf") {
      v.kind = K::Real;
      v.number = s == "$nan" ? std::nan("") : s == "$inf" ? HUGE_VAL : -HUGE_VAL;
    } else if (s == "$huge") {
      v.kind = K::Integer;
    } else if (s == "$object") {
      v.kind = K::Other;
    } else {
      v.kind = K::Str;
      v.text = s;
    }
  } else if (depth >= 4) {  // as the bridge: deeper containers are opaque
    v.kind = K::Other;
  } else if (j.is_array()) {
    v.kind = K::List;
    for (const auto& x : j) v.items.push_back(from_json(x, depth + 1));
  } else {
    v.kind = K::Dict;
    for (auto it = j.begin(); it != j.end(); ++it) {
      PolicyValue key;
      if (it.key().rfind("$int:", 0) == 0) {
        key.kind = K::Integer;
        key.integer = std::atoll(it.key().c_str() + 5);
        key.number = static_cast<double>(*key.integer);
        key.text = key.repr = std::to_string(*key.integer);
      } else {
        key.kind = K::Str;
        key.text = it.key();
        key.repr = "'" + it.key() + "'";
      }
      v.entries.emplace_back(std::move(key), from_json(it.value(), depth + 1));
    }
  }
  return v;
}

// A block edit against BLOCKS, applied to them.
void apply_block_edit(const gf::Edit& e, std::vector<BlockShape>& blocks) {
  const size_t n = blocks.size();
  if (e.kind == gf::Edit::Kind::InsertBlock) {
    if (e.block > n)
      defect("inserting a block at " + std::to_string(e.block) + " of " + std::to_string(n));
    BlockShape added;  // its heads are the trainer's: no head edit in this check
    added.present = true;
    blocks.insert(blocks.begin() + static_cast<long>(e.block), added);
    return;
  }
  if (e.block >= n)
    defect("removing block " + std::to_string(e.block) + " of " + std::to_string(n));
  if (n == 1) defect("removing the only block");
  blocks.erase(blocks.begin() + static_cast<long>(e.block));
}

// The edits against the blocks, applied one after the other.
void check_applicable(const std::vector<gf::Edit>& edits, std::vector<BlockShape> blocks) {
  for (const gf::Edit& e : edits) {
    bool has_class = false;
    for (const auto& s : e.cause.strings)
      has_class = has_class || (s.first == "class" && s.second == "fuzz.Policy");
    if (!has_class) defect("an edit whose cause does not name the class");
    if (e.edits_blocks()) {
      apply_block_edit(e, blocks);
      continue;
    }
    if (!e.edits_heads()) defect("an MLP edit of a block without an MLP");
    if (e.block >= blocks.size())
      defect("block " + std::to_string(e.block) + " of " + std::to_string(blocks.size()));
    const BlockShape& bs = blocks[e.block];
    if (!bs.present || !bs.editable)
      defect("block " + std::to_string(e.block) + " cannot edit heads");
    std::vector<int>& ids = blocks[e.block].heads;
    if (e.kind == gf::Edit::Kind::AddHead) {
      if (ids.size() >= bs.max_heads)
        defect("a head beyond the maximum of block " + std::to_string(e.block));
      if (e.init.mode != "random") defect("init mode " + e.init.mode);
      double vv = e.init.value_variance;
      if (!(vv == -1.0 || (std::isfinite(vv) && vv >= 0)))
        defect("value variance " + std::to_string(vv));
      ids.push_back(-1);
    } else {
      auto it = std::find(ids.begin(), ids.end(), e.head_id);
      if (e.head_id < 0 || it == ids.end())
        defect("removing head " + std::to_string(e.head_id) + ", not in the block");
      if (ids.size() == 1) defect("removing the last head of block " + std::to_string(e.block));
      ids.erase(it);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = gf_fuzz::split(data, size, 2);
  const std::vector<BlockShape> blocks = read_blocks(parts[0]);
  nlohmann::json j = nlohmann::json::parse(parts[1], nullptr, false);
  if (j.is_discarded()) return 0;
  const PolicyValue ret = from_json(j, 0);
  gf_fuzz::expect_clean([&] {
    std::vector<gf::Edit> edits = gfpy::parse_policy_edits(
        ret, blocks, "growth `python` (fuzz.Policy).check at step 10", "fuzz.Policy");
    check_applicable(edits, blocks);
  });
  return 0;
}
