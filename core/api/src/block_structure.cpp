// A block's structure as text: the one writer and the one reader of the record a checkpoint
// keeps per block (its `architecture` entry). The checks against the tensors are the
// checkpoint reader's (trainer_state.cpp, checked_structures).
#include <algorithm>
#include <set>
#include <sstream>

#include "growformer/attention.hpp"

namespace gf {

namespace {

std::string hex_of(const std::string& raw) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * raw.size());
  for (unsigned char ch : raw) {
    out += hex[ch >> 4];
    out += hex[ch & 15];
  }
  return out;
}

// The bytes of HEX; false when it is not an even run of lowercase hex digits.
bool raw_of(const std::string& hex, std::string& raw) {
  if (hex.size() % 2 != 0) return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  raw.assign(hex.size() / 2, '\0');
  for (size_t j = 0; j < raw.size(); ++j) {
    int hi = nib(hex[2 * j]), lo = nib(hex[2 * j + 1]);
    if (hi < 0 || lo < 0) return false;
    raw[j] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

// The optional " states M ID HEX ..." after the heads, into S's head records.
void read_states(std::istream& in, BlockStructure& s, const std::string& what) {
  std::string key;
  if (!(in >> key)) return;
  size_t n = 0;
  if (key != "states" || !(in >> n) || n > s.heads.size())
    throw RuntimeError(what + ": malformed head states in the block structure");
  for (size_t i = 0; i < n; ++i) {
    int id = 0;
    std::string hex, raw;
    if (!(in >> id >> hex) || !raw_of(hex, raw))
      throw RuntimeError(what + ": malformed head state in the block structure");
    auto h = std::find_if(s.heads.begin(), s.heads.end(), [&](auto& r) { return r.id == id; });
    if (h == s.heads.end())
      throw RuntimeError(what + ": the block structure holds a state for head " +
                         std::to_string(id) + ", which is not one of its heads");
    h->state = std::move(raw);
  }
  if (in >> key)
    throw RuntimeError(what + ": malformed block structure (text after the head states)");
}

// Ids once each and below next_id (the id a new head gets: never one in use).
void check_ids(const BlockStructure& s, const std::string& what) {
  std::set<int> seen;
  for (auto& h : s.heads) {
    if (!seen.insert(h.id).second)
      throw RuntimeError(what + ": the block structure names head " + std::to_string(h.id) +
                         " twice");
    if (h.id < 0)
      throw RuntimeError(what + ": the block structure names a negative head id " +
                         std::to_string(h.id));
    if (h.id >= s.next_id)
      throw RuntimeError(what + ": the block structure names head " + std::to_string(h.id) +
                         ", not below its next id " + std::to_string(s.next_id) +
                         " (a new head would reuse an id)");
  }
}

}  // namespace

std::vector<int> BlockStructure::ids() const {
  std::vector<int> out;
  for (auto& h : heads) out.push_back(h.id);
  return out;
}

std::string BlockStructure::text() const {
  std::ostringstream o;
  o << "next_id " << next_id << " rng " << rng_state << " " << rng_increment << " heads "
    << heads.size();
  for (auto& h : heads) o << " " << h.id << " " << h.born;
  const size_t states =
      std::count_if(heads.begin(), heads.end(), [](auto& h) { return !h.state.empty(); });
  if (states > 0) {
    o << " states " << states;
    for (auto& h : heads)
      if (!h.state.empty()) o << " " << h.id << " " << hex_of(h.state);
  }
  return o.str();
}

BlockStructure BlockStructure::parse(const std::string& text, const std::string& what,
                                     size_t max_heads) {
  std::istringstream in(text);
  std::string k1, k2, k3;
  BlockStructure s;
  size_t n = 0;
  in >> k1 >> s.next_id >> k2 >> s.rng_state >> s.rng_increment >> k3 >> n;
  if (!in || k1 != "next_id" || k2 != "rng" || k3 != "heads" || n == 0)
    throw RuntimeError(what + ": malformed block structure `" + printable(text.substr(0, 200)) +
                       "`");
  // bounded before anything is allocated: a crafted structure may claim any count
  if (n > max_heads || n > text.size() / 4)  // each head is written as " ID BORN"
    throw RuntimeError(what + ": the block structure names " + std::to_string(n) +
                       " heads, more than " +
                       (n > max_heads ? "max_heads = " + std::to_string(max_heads)
                                      : std::string("its text holds")) +
                       " (a damaged or crafted checkpoint)");
  s.heads.resize(n);
  for (auto& h : s.heads) in >> h.id >> h.born;
  if (!in)
    throw RuntimeError(what + ": malformed block structure `" + printable(text.substr(0, 200)) +
                       "`");
  read_states(in, s, what);
  check_ids(s, what);
  return s;
}

}  // namespace gf
