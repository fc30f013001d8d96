#include "job_pattern.hpp"

#include <cctype>
#include <cstdint>
#include <stdexcept>

namespace gfapp {

namespace {

using Op = JobPattern::Op;
using Bytes = std::bitset<256>;

// The most groups nested in one another, the largest {n,m} count and the most instructions a
// pattern may compile to (repetitions written out). A name costs at most its length times the
// program's size: some 0.5 ms for a 100-character name at the largest program, so some 5 s for
// the largest sweep (10000 jobs) at the worst; an ordinary pattern is a few dozen instructions.
constexpr int kMaxDepth = 100;
constexpr int kMaxCount = 1000;
constexpr size_t kMaxProgram = 500;

// The pattern as a tree: byte sets, assertions, sequences, alternatives and repetitions.
struct Node {
  enum class Kind { bytes, assertion, sequence, alternatives, repeat } kind = Kind::sequence;
  Bytes bytes;
  Op assertion = Op::match;
  std::vector<Node> kids;
  int min = 0, max = -1;  // Kind::repeat; max -1: no bound
};

Bytes range(unsigned char lo, unsigned char hi) {
  Bytes b;
  for (unsigned c = lo; c <= hi; ++c) b.set(c);
  return b;
}
Bytes one(char c) {
  Bytes b;
  b.set(static_cast<unsigned char>(c));
  return b;
}
Bytes word_bytes() { return range('a', 'z') | range('A', 'Z') | range('0', '9') | one('_'); }
bool is_word(const std::string& s, size_t i) {
  return i < s.size() && word_bytes().test(static_cast<unsigned char>(s[i]));
}

class Parser {
 public:
  explicit Parser(const std::string& p) : p_(p) {}
  Node parse() {
    Node n = alternatives(0);
    if (more()) bad("`)` without a matching `(`");
    return n;
  }

 private:
  bool more() const { return i_ < p_.size(); }
  bool at(char c) const { return more() && p_[i_] == c; }
  [[noreturn]] static void bad(const std::string& why) {
    throw std::invalid_argument("not a regular expression (" + why + ")");
  }
  [[noreturn]] static void unsupported(const std::string& what) {
    throw std::invalid_argument(what +
                                " are not supported by --only (it matches without backtracking, so "
                                "that no pattern can hang a sweep)");
  }

  Node alternatives(int depth) {
    Node a;
    a.kind = Node::Kind::alternatives;
    a.kids.push_back(sequence(depth));
    while (at('|')) {
      ++i_;
      a.kids.push_back(sequence(depth));
    }
    return a.kids.size() == 1 ? a.kids[0] : a;
  }
  Node sequence(int depth) {
    Node s;
    while (more() && !at('|') && !at(')')) s.kids.push_back(quantified(depth));
    return s;
  }
  Node quantified(int depth) {
    Node a = atom(depth);
    int lo = 0, hi = -1;
    if (!quantifier(&lo, &hi)) return a;
    if (a.kind == Node::Kind::assertion)
      bad("nothing to repeat: an assertion cannot take a quantifier");
    Node r;
    r.kind = Node::Kind::repeat;
    r.min = lo;
    r.max = hi;
    r.kids.push_back(std::move(a));
    if (quantifier(&lo, &hi)) bad("nothing to repeat: a quantifier follows another");
    return r;
  }
  // A quantifier at the current place, read into [*LO, *HI] (HI -1: no bound); false if none.
  bool quantifier(int* lo, int* hi) {
    if (!more()) return false;
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      *lo = c == '+';
      *hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
      ++i_;
      *lo = *hi = count();
      if (at(',')) {
        ++i_;
        *hi = at('}') ? -1 : count();
      }
      if (!at('}')) bad("`{` starts a repetition {n}, {n,} or {n,m}; write \\{ for the character");
      ++i_;
      if (*hi >= 0 && *hi < *lo) bad("{n,m} with m below n");
    } else {
      return false;
    }
    if (at('?')) ++i_;  // a lazy quantifier matches the same names
    return true;
  }
  int count() {
    if (!more() || !std::isdigit(static_cast<unsigned char>(p_[i_])))
      bad("`{` starts a repetition {n}, {n,} or {n,m}; write \\{ for the character");
    long n = 0;
    while (more() && std::isdigit(static_cast<unsigned char>(p_[i_]))) {
      n = n * 10 + (p_[i_++] - '0');
      if (n > kMaxCount) bad("a repetition count over " + std::to_string(kMaxCount));
    }
    return static_cast<int>(n);
  }
  Node atom(int depth) {
    Node n;
    n.kind = Node::Kind::bytes;
    const char c = p_[i_++];
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        n.bytes = bracket();
        return n;
      case '.':
        n.bytes = ~(one('\n') | one('\r'));
        return n;
      case '^':
      case '$':
        n.kind = Node::Kind::assertion;
        n.assertion = c == '^' ? Op::line_begin : Op::line_end;
        return n;
      case '\\':
        n.bytes = escape(false, &n.assertion);
        if (n.assertion != Op::match) n.kind = Node::Kind::assertion;
        return n;
      case '*':
      case '+':
      case '?':
      case '{':
        bad(std::string("nothing to repeat before `") + c + "`");
      default:
        n.bytes = one(c);
        return n;
    }
  }
  Node group(int depth) {
    if (depth >= kMaxDepth) bad("groups nested more than " + std::to_string(kMaxDepth) + " deep");
    if (p_.compare(i_, 2, "?:") == 0) {
      i_ += 2;
    } else if (at('?')) {
      unsupported("lookaround and named groups ((?=, (?!, (?<)");
    }
    Node n = alternatives(depth + 1);
    if (!at(')')) bad("missing `)`");
    ++i_;
    return n;
  }
  // After `[`: the class up to its `]`.
  Bytes bracket() {
    Bytes set;
    const bool negate = at('^');
    if (negate) ++i_;
    for (;;) {
      if (!more()) bad("missing `]`");
      if (at(']')) break;
      Bytes lo_set;
      const int lo = class_atom(&lo_set);
      if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        Bytes hi_set;
        const int hi = class_atom(&hi_set);
        if (lo < 0 || hi < 0) bad("a range in [...] must run between two characters");
        if (lo > hi) bad("a range in [...] out of order");
        set |= range(static_cast<unsigned char>(lo), static_cast<unsigned char>(hi));
      } else {
        set |= lo_set;
      }
    }
    ++i_;
    return negate ? ~set : set;
  }
  // One character of a class (its byte) or a class escape such as \d (-1), its bytes in *SET.
  int class_atom(Bytes* set) {
    const char c = p_[i_++];
    const bool class_escape =
        c == '\\' && more() && std::string("dwsDWS").find(p_[i_]) != std::string::npos;
    *set = c == '\\' ? escape(true, nullptr) : one(c);
    if (class_escape) return -1;
    for (int b = 0; b < 256; ++b)
      if (set->test(static_cast<size_t>(b))) return b;
    return -1;
  }
  Bytes escape(bool in_class, Op* assertion);

  const std::string& p_;
  size_t i_ = 0;
};

// After a backslash: the bytes the escape stands for, or (outside a class) the assertion \b or
// \B in *ASSERTION.
Bytes Parser::escape(bool in_class, Op* assertion) {
  if (!more()) bad("a pattern cannot end with \\");
  const char c = p_[i_++];
  const Bytes space = one(' ') | one('\t') | one('\n') | one('\v') | one('\f') | one('\r');
  switch (c) {
    case 'd':
      return range('0', '9');
    case 'D':
      return ~range('0', '9');
    case 'w':
      return word_bytes();
    case 'W':
      return ~word_bytes();
    case 's':
      return space;
    case 'S':
      return ~space;
    case 'n':
      return one('\n');
    case 't':
      return one('\t');
    case 'r':
      return one('\r');
    case 'f':
      return one('\f');
    case 'v':
      return one('\v');
    case 'x': {
      auto hex = [&](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; };
      if (i_ + 2 > p_.size() || !hex(p_[i_]) || !hex(p_[i_ + 1]))
        bad("\\x takes two hexadecimal digits");
      i_ += 2;
      return one(static_cast<char>(std::stoi(p_.substr(i_ - 2, 2), nullptr, 16)));
    }
    case 'b':
    case 'B':
      if (in_class && c == 'B') bad("\\B inside [...]");
      if (in_class) return one('\b');  // a backspace, as in ECMAScript
      *assertion = c == 'b' ? Op::word_boundary : Op::not_word_boundary;
      return Bytes();
    default:
      break;
  }
  if (c >= '1' && c <= '9') unsupported(std::string("back-references (\\") + c + ")");
  if (std::isalnum(static_cast<unsigned char>(c))) bad(std::string("unknown escape \\") + c);
  return one(c);
}

// The tree as Pike VM instructions.
class Compiler {
 public:
  explicit Compiler(std::vector<JobPattern::Inst>& prog) : prog_(prog) {}
  void node(const Node& n) {
    switch (n.kind) {
      case Node::Kind::bytes:
        emit(Op::bytes).bytes = n.bytes;
        break;
      case Node::Kind::assertion:
        emit(n.assertion);
        break;
      case Node::Kind::sequence:
        for (const Node& k : n.kids) node(k);
        break;
      case Node::Kind::alternatives:
        alternatives(n);
        break;
      case Node::Kind::repeat:
        repeat(n);
        break;
    }
  }

 private:
  JobPattern::Inst& emit(Op op) {
    if (prog_.size() >= kMaxProgram)
      throw std::invalid_argument(
          "the pattern is too large once its repetitions are written out (over " +
          std::to_string(kMaxProgram) + " steps); use fewer or smaller {n,m}");
    prog_.push_back({});
    prog_.back().op = op;
    return prog_.back();
  }
  // split L1, N1; L1: kid 0; jump end; N1: split L2, N2; ... the last kid; end.
  void alternatives(const Node& n) {
    std::vector<size_t> ends;
    for (size_t k = 0; k < n.kids.size(); ++k) {
      if (k + 1 == n.kids.size()) {
        node(n.kids[k]);
        break;
      }
      const size_t split = prog_.size();
      emit(Op::split).x = split + 1;
      node(n.kids[k]);
      ends.push_back(prog_.size());
      emit(Op::jump);
      prog_[split].y = prog_.size();
    }
    for (size_t j : ends) prog_[j].x = prog_.size();
  }
  // The kid MIN times, then MAX - MIN optional copies, or a loop when MAX has no bound.
  void repeat(const Node& n) {
    for (int i = 0; i < n.min; ++i) node(n.kids[0]);
    if (n.max < 0) {
      const size_t split = prog_.size();
      emit(Op::split).x = split + 1;
      node(n.kids[0]);
      emit(Op::jump).x = split;
      prog_[split].y = prog_.size();
    }
    for (int i = n.min; i < n.max; ++i) {
      const size_t split = prog_.size();
      emit(Op::split).x = split + 1;
      node(n.kids[0]);
      prog_[split].y = prog_.size();
    }
  }

  std::vector<JobPattern::Inst>& prog_;
};

}  // namespace

JobPattern::JobPattern(const std::string& pattern) {
  Node tree = Parser(pattern).parse();
  Compiler c(prog_);
  c.node(tree);
  prog_.push_back({});  // Op::match
}

bool JobPattern::search(const std::string& name) const {
  std::vector<size_t> current, next, stack;
  std::vector<size_t> added_at(prog_.size(), SIZE_MAX);  // the position each pc was last added at
  // The threads that instruction PC leads to at POS (jumps, splits and assertions followed), each
  // pc once a position; true when one reaches the match.
  auto add = [&](std::vector<size_t>& list, size_t pc0, size_t pos) {
    const bool boundary = is_word(name, pos) != (pos > 0 && is_word(name, pos - 1));
    stack.assign(1, pc0);
    while (!stack.empty()) {
      const size_t pc = stack.back();
      stack.pop_back();
      if (added_at[pc] == pos) continue;
      added_at[pc] = pos;
      const Inst& in = prog_[pc];
      switch (in.op) {
        case Op::match:
          return true;
        case Op::bytes:
          list.push_back(pc);
          break;
        case Op::jump:
          stack.push_back(in.x);
          break;
        case Op::split:
          stack.push_back(in.y);
          stack.push_back(in.x);
          break;
        case Op::line_begin:
          if (pos == 0) stack.push_back(pc + 1);
          break;
        case Op::line_end:
          if (pos == name.size()) stack.push_back(pc + 1);
          break;
        case Op::word_boundary:
          if (boundary) stack.push_back(pc + 1);
          break;
        case Op::not_word_boundary:
          if (!boundary) stack.push_back(pc + 1);
          break;
      }
    }
    return false;
  };
  for (size_t pos = 0;; ++pos) {
    if (add(current, 0, pos)) return true;  // a match may start at every position
    if (pos == name.size()) return false;
    next.clear();
    const unsigned char c = static_cast<unsigned char>(name[pos]);
    for (size_t pc : current)
      if (prog_[pc].bytes.test(c) && add(next, pc + 1, pos + 1)) return true;
    current.swap(next);
  }
}

}  // namespace gfapp
