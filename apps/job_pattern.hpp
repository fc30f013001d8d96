// `sweep --only PATTERN`: a regular expression matched without backtracking, so that no pattern
// can make a sweep hang (std::regex backtracks: `(a*)*b` against 40 letters ran for minutes).
#pragma once

#include <bitset>
#include <string>
#include <vector>

namespace gfapp {

/// A regular expression in the ECMAScript syntax job names need, compiled to a program that a
/// Pike VM runs: the time is the name's length times the program's size, whatever the pattern.
/// Understood: literal characters and escaped ones (`\.`, `\(`, `\n`, `\xHH`), `.`, classes
/// (`[a-z_]`, `[^0-9]`, `\d \w \s` and `\D \W \S`), the assertions `^ $ \b \B`, groups `(...)` and
/// `(?:...)`, alternation `|`, and the quantifiers `* + ? {n} {n,} {n,m}` (lazy forms match the
/// same names). Back-references and lookaround are refused. Characters are bytes.
class JobPattern {
 public:
  /// Throws std::invalid_argument with the reason when PATTERN is malformed or unsupported.
  explicit JobPattern(const std::string& pattern);
  /// Whether a match of the pattern occurs anywhere in NAME (std::regex_search's question).
  bool search(const std::string& name) const;

  enum class Op {
    bytes,
    split,
    jump,
    line_begin,
    line_end,
    word_boundary,
    not_word_boundary,
    match
  };
  struct Inst {
    Op op = Op::match;
    std::bitset<256> bytes;  // Op::bytes: the bytes it accepts
    size_t x = 0, y = 0;     // Op::split: both targets (x first); Op::jump: x
  };

 private:
  std::vector<Inst> prog_;
};

}  // namespace gfapp
