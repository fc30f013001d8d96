// ListOps: generator, serializer, evaluator, tokenizer and TSV files (see listops.hpp).
#include "growformer/data/listops.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ostream>
#include <sstream>
#include <unordered_set>

#include "growformer/config.hpp"
#include "growformer/data/io.hpp"

namespace gf::listops {

namespace {

constexpr double kOperatorProbability = 0.25;  // LRA's VALUE_P: u > 0.25 makes a leaf
constexpr int kNumOperators = 4;

bool is_operator(int32_t id) { return id >= kMin && id <= kSum; }
bool is_digit(int32_t id) { return id >= kDigit0 && id < kDigit0 + 10; }

int apply_range(int32_t op, const int* args, size_t n) {
  switch (op) {
    case kMin:
      return *std::min_element(args, args + n);
    case kMax:
      return *std::max_element(args, args + n);
    case kSum: {
      int s = 0;
      for (size_t i = 0; i < n; ++i) s += args[i];
      return s % 10;
    }
    case kMed: {
      // Counting "sort" of digits: the values at sorted positions (n-1)/2 and n/2.
      size_t counts[10] = {0};
      for (size_t i = 0; i < n; ++i) ++counts[args[i]];
      auto at = [&](size_t pos) {
        size_t seen = 0;
        for (int d = 0; d < 10; ++d) {
          seen += counts[d];
          if (pos < seen) return d;
        }
        return 9;
      };
      return (at((n - 1) / 2) + at(n / 2)) / 2;  // floor of the mean of the middle pair
    }
    default:
      throw RuntimeError("listops: not an operator id: " + std::to_string(op));
  }
}

/// Maps one whitespace-separated token to its id; -1 for a parenthesis, -2 when unknown.
int32_t token_id(const char* s, size_t n) {
  if (n == 1) {
    char c = s[0];
    if (c >= '0' && c <= '9') return kDigit0 + (c - '0');
    if (c == ']') return kClose;
    if (c == '(' || c == ')') return -1;
    return -2;
  }
  if (n == 4 && s[0] == '[') {
    if (std::memcmp(s, "[MIN", 4) == 0) return kMin;
    if (std::memcmp(s, "[MAX", 4) == 0) return kMax;
    if (std::memcmp(s, "[MED", 4) == 0) return kMed;
  }
  if (n == 3 && std::memcmp(s, "[SM", 3) == 0) return kSum;
  return -2;
}

struct Lexed {
  int32_t id;
  size_t index;   // 1-based token number in the text (parentheses included)
  size_t column;  // 1-based character column
  std::string text;
};

[[noreturn]] void lex_fail(const Lexed& t, const std::string& msg) {
  throw RuntimeError("listops: token " + std::to_string(t.index) + " (`" + t.text + "`, column " +
                     std::to_string(t.column) + "): " + msg);
}

/// Splits on whitespace and calls f(Lexed) for each non-parenthesis token.
template <class F>
void lex(const std::string& expr, F&& f) {
  size_t i = 0, index = 0;
  const size_t n = expr.size();
  while (i < n) {
    while (i < n && std::isspace(static_cast<unsigned char>(expr[i]))) ++i;
    if (i >= n) break;
    size_t j = i;
    while (j < n && !std::isspace(static_cast<unsigned char>(expr[j]))) ++j;
    ++index;
    int32_t id = token_id(expr.data() + i, j - i);
    if (id != -1) {
      Lexed t{id, index, i + 1, std::string()};
      if (id == -2) {
        t.text = expr.substr(i, std::min<size_t>(j - i, 40));
        lex_fail(t, "unknown token (expected [MIN [MAX [MED [SM ] ( ) or a digit)");
      }
      f(t);
    }
    i = j;
  }
}

std::string describe_token(const Lexed& t) { return t.text.empty() ? vocabulary()[t.id] : t.text; }

// ---- generation ----

struct GenState {
  Rng& rng;
  int max_depth;
  uint64_t arity_choices;  // max_args - 1: arity is 2 + below(arity_choices)
  size_t abort_length;
  std::vector<int32_t>& buf;
  std::vector<int> values;  // operand stack
  size_t open = 0;          // operators whose `]` is not yet written
  size_t pending = 0;       // arguments of open operators not yet started (>= 1 token each)

  // The final length is at least the tokens written, the `]`s owed and one per pending argument.
  bool too_long() const { return abort_length != 0 && buf.size() + open + pending >= abort_length; }

  // Appends one subtree to buf and its value to values; false once the tree is too long.
  bool grow(int depth) {
    double u = depth < max_depth ? rng.uniform() : 1.0;
    if (u > kOperatorProbability) {
      int d = static_cast<int>(rng.below(10));
      buf.push_back(kDigit0 + d);
      values.push_back(d);
      return !too_long();
    }
    size_t k = 2 + static_cast<size_t>(rng.below(arity_choices));
    size_t op_pos = buf.size();
    buf.push_back(kPad);  // the operator is drawn after its arguments, as in LRA
    ++open;
    pending += k;
    if (too_long()) return false;
    size_t start = values.size();
    for (size_t i = 0; i < k; ++i) {
      --pending;
      if (!grow(depth + 1)) return false;
    }
    int32_t op = kMin + static_cast<int32_t>(rng.below(kNumOperators));
    buf[op_pos] = op;
    buf.push_back(kClose);
    --open;
    int v = apply_range(op, values.data() + start, k);
    values.resize(start);
    values.push_back(v);
    return true;
  }
};

// ---- files ----

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int parse_label(const std::string& field, const std::string& where) {
  std::string t = trim(field);
  if (t.size() != 1 || t[0] < '0' || t[0] > '9')
    throw ConfigError(where + ": label `" + t.substr(0, 40) + "` is not an integer in 0..9");
  return t[0] - '0';
}

}  // namespace

const std::vector<std::string>& vocabulary() {
  static const std::vector<std::string> v = {"<pad>", "[MIN", "[MAX", "[MED", "[SM", "]", "0", "1",
                                             "2",     "3",    "4",    "5",    "6",   "7", "8", "9"};
  return v;
}

int apply_operator(int32_t op, const std::vector<int>& args) {
  if (!is_operator(op)) throw RuntimeError("listops: not an operator id: " + std::to_string(op));
  if (args.empty())
    throw RuntimeError("listops: operator " + vocabulary()[op] + " without arguments");
  for (int a : args)
    if (a < 0 || a > 9) throw RuntimeError("listops: argument out of 0..9: " + std::to_string(a));
  return apply_range(op, args.data(), args.size());
}

int evaluate(const std::string& expr) {
  std::vector<int> values;
  struct Frame {
    int32_t op;
    size_t start;
    Lexed token;
  };
  std::vector<Frame> frames;
  bool done = false;  // a complete top-level expression has been read
  lex(expr, [&](const Lexed& t) {
    if (done) lex_fail(t, "text after the end of the expression");
    if (is_operator(t.id)) {
      frames.push_back({t.id, values.size(), t});
    } else if (is_digit(t.id)) {
      values.push_back(t.id - kDigit0);
    } else {  // kClose
      if (frames.empty()) lex_fail(t, "`]` without an open operator");
      Frame f = frames.back();
      frames.pop_back();
      size_t n = values.size() - f.start;
      if (n == 0) lex_fail(t, "operator " + vocabulary()[f.op] + " without arguments");
      int v = apply_range(f.op, values.data() + f.start, n);
      values.resize(f.start);
      values.push_back(v);
    }
    if (frames.empty()) done = true;
  });
  if (!frames.empty()) {
    const Lexed& t = frames.back().token;
    lex_fail(t, "operator " + describe_token(t) + " is never closed with `]`");
  }
  if (values.size() != 1) throw RuntimeError("listops: empty expression");
  return values[0];
}

std::vector<int32_t> tokenize(const std::string& expr) {
  std::vector<int32_t> ids;
  ids.reserve(expr.size() / 4 + 1);
  lex(expr, [&](const Lexed& t) { ids.push_back(t.id); });
  return ids;
}

std::string serialize(const std::vector<int32_t>& tokens) {
  // First pass: arity of every operator, and the ids form exactly one tree.
  std::vector<size_t> arity(tokens.size(), 0);
  std::vector<size_t> stack;
  bool done = false;
  auto fail = [&](size_t i, const std::string& msg) {
    throw RuntimeError("listops: serialize: token id " + std::to_string(i + 1) + ": " + msg);
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t id = tokens[i];
    if (done) fail(i, "ids after the end of the tree");
    if (is_operator(id)) {
      if (!stack.empty()) ++arity[stack.back()];
      stack.push_back(i);
    } else if (is_digit(id)) {
      if (!stack.empty()) ++arity[stack.back()];
    } else if (id == kClose) {
      if (stack.empty()) fail(i, "`]` without an open operator");
      if (arity[stack.back()] == 0) fail(i, "operator without arguments");
      stack.pop_back();
    } else {
      fail(i, "not a ListOps token id: " + std::to_string(id));
    }
    if (stack.empty()) done = true;
  }
  if (!done || !stack.empty()) throw RuntimeError("listops: serialize: incomplete tree");

  // Second pass: ( ( ... ( OP a1 ) a2 ) ... ak ) ] )
  const auto& vocab = vocabulary();
  std::string out;
  out.reserve(tokens.size() * 5);
  auto emit = [&](const std::string& s) {
    if (!out.empty()) out += ' ';
    out += s;
  };
  size_t depth = 0;  // open operators
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t id = tokens[i];
    if (is_operator(id)) {
      for (size_t j = 0; j <= arity[i]; ++j) emit("(");
      emit(vocab[id]);
      ++depth;
      continue;
    }
    if (is_digit(id)) {
      emit(vocab[id]);
    } else {  // kClose ends the operator node
      emit("]");
      emit(")");
      --depth;
    }
    if (depth > 0) emit(")");  // a completed argument closes one pair of its parent
  }
  return out;
}

bool generate_tree(Rng& rng, int max_depth, int max_args, size_t abort_length, Generated& out) {
  if (max_args < 2) throw RuntimeError("listops: max_args must be at least 2");
  out.tokens.clear();
  GenState s{rng, max_depth, static_cast<uint64_t>(max_args - 1), abort_length, out.tokens, {}};
  s.values.reserve(64);
  if (!s.grow(1)) return false;
  out.label = s.values.back();
  return true;
}

std::vector<Generated> generate(const GeneratorConfig& cfg, Rng& rng) {
  if (cfg.max_depth < 1) throw RuntimeError("listops: max_depth must be at least 1");
  if (cfg.max_args < 2) throw RuntimeError("listops: max_args must be at least 2");
  if (cfg.max_length < cfg.min_length + 2)
    throw RuntimeError("listops: no length lies strictly between min_length " +
                       std::to_string(cfg.min_length) + " and max_length " +
                       std::to_string(cfg.max_length));
  if (cfg.max_depth == 1 && cfg.min_length >= 1)
    throw RuntimeError(
        "listops: max_depth 1 makes only single digits (length 1), all <= min_length");

  std::vector<Generated> result;
  result.reserve(cfg.count);
  std::unordered_set<std::string> seen;
  seen.reserve(cfg.count * 2);
  Generated g;
  g.tokens.reserve(cfg.max_length + 16);
  std::string key;
  size_t misses = 0;
  while (result.size() < cfg.count) {
    bool ok = generate_tree(rng, cfg.max_depth, cfg.max_args, cfg.max_length, g) &&
              g.tokens.size() > cfg.min_length && g.tokens.size() < cfg.max_length;
    if (ok) {
      // Token ids identify the tree exactly as its serialized string does, at a fifth the size.
      key.assign(g.tokens.begin(), g.tokens.end());
      ok = seen.insert(key).second;
    }
    if (!ok) {
      if (++misses >= cfg.max_consecutive_rejections)
        throw RuntimeError("listops: only " + std::to_string(result.size()) + " of " +
                           std::to_string(cfg.count) + " distinct trees with " +
                           std::to_string(cfg.min_length) + " < length < " +
                           std::to_string(cfg.max_length) + " after " + std::to_string(misses) +
                           " draws in a row without a new one; widen the length range, raise "
                           "max_depth/max_args or ask for fewer trees");
      continue;
    }
    misses = 0;
    result.push_back(g);
  }
  return result;
}

std::vector<Row> read_tsv(const std::string& path) {
  gf::LineReader reader(path);
  std::vector<Row> rows;
  std::string line;
  enum class Format { Unknown, Lra, LabelFirst } format = Format::Unknown;
  while (reader.next(line)) {
    size_t ln = reader.line_number();
    std::string where = path + ":" + std::to_string(ln);
    if (trim(line).empty()) continue;
    if (format == Format::Unknown) {
      if (line == "Source\tTarget") {
        format = Format::Lra;
        continue;
      }
      format = Format::LabelFirst;
    }
    size_t tab = line.find('\t');
    if (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos)
      throw ConfigError(where + ": expected two tab-separated columns (" +
                        (format == Format::Lra ? "expression, label" : "label, expression") + ")");
    Row r;
    r.line = ln;
    if (format == Format::Lra) {
      r.expression = line.substr(0, tab);
      r.label = parse_label(line.substr(tab + 1), where);
    } else {
      std::string first = trim(line.substr(0, tab));
      if (first.size() != 1 || first[0] < '0' || first[0] > '9')
        throw ConfigError(where + ": first column `" + first.substr(0, 40) +
                          "` is not a label 0..9 (files without the `Source<TAB>Target` "
                          "header must be `label<TAB>expression`)");
      r.label = first[0] - '0';
      r.expression = line.substr(tab + 1);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

void write_tsv(const std::string& path, const std::vector<Row>& rows) {
  std::string text = "Source\tTarget\n";
  for (const Row& r : rows) {
    if (r.expression.find_first_of("\t\n") != std::string::npos)
      throw RuntimeError(path + ": expression contains a tab or newline");
    text += r.expression;
    text += '\t';
    text += std::to_string(r.label);
    text += '\n';
  }
  write_file(path, text, ends_with(path, ".gz"));
}

size_t check_file(const std::string& path, std::ostream& out) {
  std::vector<Row> rows = read_tsv(path);
  size_t mismatches = 0;
  for (const Row& r : rows) {
    int expected;
    try {
      expected = evaluate(r.expression);
    } catch (const RuntimeError& e) {
      throw ConfigError(path + ":" + std::to_string(r.line) + ": " + e.what());
    }
    if (expected != r.label) {
      ++mismatches;
      out << path << ":" << r.line << ": expected " << expected << ", file says " << r.label
          << "\n";
    }
  }
  out << rows.size() << " rows, " << mismatches << " mismatches\n";
  return mismatches;
}

}  // namespace gf::listops
