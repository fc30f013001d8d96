// ListOps (Nangia & Bowman 2018; Long Range Arena variant): random expression trees over
// MIN, MAX, MED (median) and SM (sum mod 10) on the digits 0..9, their serialized text form,
// evaluation, tokenisation and TSV files. Follows /work/shared/data/listops/SPEC.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "growformer/rng.hpp"

namespace gf::listops {

/// Token ids of the fixed vocabulary; parentheses are not tokens.
enum TokenId : int32_t {
  kPad = 0,
  kMin = 1,
  kMax = 2,
  kMed = 3,
  kSum = 4,    // `[SM`: sum modulo 10
  kClose = 5,  // `]`
  kDigit0 = 6  // digits 0..9 are kDigit0 + d
};
/// Number of ids including the pad id: pad, 4 operators, `]`, 10 digits.
constexpr size_t kVocabSize = 16;
constexpr size_t kNumClasses = 10;

/// id -> token text ("<pad>", "[MIN", "[MAX", "[MED", "[SM", "]", "0".."9").
const std::vector<std::string>& vocabulary();

/// Value of operator `op` (kMin..kSum) over arguments in 0..9: MED is the floor of the
/// numpy-style median (mean of the two middle values for an even count).
int apply_operator(int32_t op, const std::vector<int>& args);

/// The serialized expression's label. Tokens `[MIN` `[MAX` `[MED` `[SM` `]` and digits,
/// separated by whitespace; `(` and `)` are optional and ignored. Throws gf::RuntimeError
/// naming the token position on malformed input.
int evaluate(const std::string& expr);

/// Token ids of a serialized expression (parentheses dropped). Throws gf::RuntimeError on an
/// unknown token.
std::vector<int32_t> tokenize(const std::string& expr);

/// The LRA text form of a tree given as prefix token ids (as tokenize() returns them):
/// OP with arguments a1..ak prints as `( ( ... ( ( OP a1 ) a2 ) ... ak ) ] )`.
/// Throws gf::RuntimeError when the ids do not form exactly one tree.
std::string serialize(const std::vector<int32_t>& tokens);

/// Settings of the random tree generator (LRA defaults).
struct GeneratorConfig {
  size_t count = 100000;     // distinct trees wanted
  size_t min_length = 500;   // keep trees with min_length < length < max_length
  size_t max_length = 2000;  // length = leaves + 2 per operator node (= token count)
  int max_depth = 10;        // the root is at depth 1; depth max_depth forces a leaf
  int max_args = 10;         // operator arity uniform in 2..max_args
  /// Give up (gf::RuntimeError) after this many draws in a row without a new tree.
  size_t max_consecutive_rejections = 5000000;
};

/// One generated tree: its prefix token ids (no parentheses) and its value.
struct Generated {
  std::vector<int32_t> tokens;
  int32_t label = 0;
};

/// Draws one tree (LRA order of draws: leaf test, digit or arity, subtrees, operator).
/// Aborts as soon as the tree is known to reach `abort_length` tokens (0 = never) and
/// returns false; a tree's distribution given that it is kept is unchanged by aborting.
bool generate_tree(Rng& rng, int max_depth, int max_args, size_t abort_length, Generated& out);

/// `cfg.count` distinct trees (by serialized form) whose length lies strictly between
/// min_length and max_length, in generation order. Throws gf::RuntimeError on impossible
/// settings or when distinct trees run out.
std::vector<Generated> generate(const GeneratorConfig& cfg, Rng& rng);

/// One row of a ListOps TSV file.
struct Row {
  std::string expression;
  int label = 0;
  size_t line = 0;  // 1-based line in the file it was read from (0 when not read)
};

/// Reads `Source<TAB>Target` files (LRA, with that header) or `label<TAB>expression` files
/// (original ListOps, no header), detected per file; plain or gzip. Throws gf::ConfigError
/// (bad user data, exit 2) naming file:line on a missing, truncated or malformed file.
/// Expressions are not checked here (check_file and the dataset plugin parse them).
std::vector<Row> read_tsv(const std::string& path);

/// Writes rows in LRA format (header `Source<TAB>Target`); gzip when the path ends in ".gz".
/// Throws gf::RuntimeError when the file cannot be written.
void write_tsv(const std::string& path, const std::vector<Row>& rows);

/// Recomputes every label of a TSV file; prints `FILE:LINE: expected E, file says F` per
/// mismatch and a summary `N rows, M mismatches`; returns M. Throws gf::ConfigError naming
/// file:line (and the token) on an unreadable or malformed file, as read_tsv.
size_t check_file(const std::string& path, std::ostream& out);

}  // namespace gf::listops
