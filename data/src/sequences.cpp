// FASTA, GFF gene regions and k-mer tokenisation (see data/sequences.hpp).
#include "growformer/data/sequences.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <sstream>

#include "growformer/rng.hpp"

namespace gf {

std::vector<FastaRecord> read_fasta(const std::string& path) {
  std::vector<FastaRecord> out;
  LineReader in(path);
  std::string line;
  auto finish = [&]() {
    if (!out.empty() && out.back().seq.empty()) {
      data_error(path, out.back().line, "FASTA record `" + out.back().id + "` has no sequence");
    }
  };
  while (in.next(line)) {
    if (line.empty() || line[0] == ';') continue;
    if (line[0] == '>') {
      finish();
      size_t b = 1;
      while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
      size_t e = b;
      while (e < line.size() && !std::isspace(static_cast<unsigned char>(line[e]))) ++e;
      if (e == b) data_error(path, in.line_number(), "FASTA header without an id");
      FastaRecord r;
      r.id = line.substr(b, e - b);
      r.line = in.line_number();
      out.push_back(std::move(r));
      continue;
    }
    if (out.empty()) {
      data_error(path, in.line_number(),
                 "sequence data before the first '>' header: is this a FASTA file?");
    }
    std::string& s = out.back().seq;
    for (char c : line) {
      if (!std::isspace(static_cast<unsigned char>(c))) {
        s.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
      }
    }
  }
  finish();
  if (out.empty()) data_error(path, 0, "no FASTA records");
  return out;
}

std::pair<size_t, size_t> gff_gene_region(const std::string& path, const std::string& gene) {
  LineReader in(path);
  std::string line;
  std::vector<std::string> names;
  while (in.next(line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = split_fields(line, '\t');
    if (f.size() < 9) continue;
    for (const auto& attr : split_fields(f[8], ';')) {
      std::string a = attr;
      a.erase(0, a.find_first_not_of(" \t"));
      size_t eq = a.find('=');
      if (eq == std::string::npos) continue;
      std::string key = a.substr(0, eq), value = a.substr(eq + 1);
      if (key != "gene_name" && key != "Name" && key != "gene") continue;
      names.push_back(value);
      if (value == gene) {
        size_t start = 0, end = 0;
        // plain decimal positions only: stoul would read "-1" as 2^64 - 1
        auto position = [&](const std::string& t, size_t& out) {
          if (t.empty() || t.size() > 15 || t.find_first_not_of("0123456789") != std::string::npos)
            data_error(path, in.line_number(),
                       "gene `" + gene + "`: start/end `" + t.substr(0, 20) +
                           "` is not a position (a number from 1)");
          out = std::stoul(t);
        };
        position(f[3], start);
        position(f[4], end);
        if (start < 1 || end < start) {
          data_error(path, in.line_number(), "gene `" + gene + "` has an empty range");
        }
        return {start, end};
      }
    }
  }
  std::ostringstream os;
  os << "no gene `" << gene << "`; genes:";
  for (const auto& n : names) os << " " << n;
  std::string guess = did_you_mean(gene, names);
  if (!guess.empty()) os << "; did you mean `" << guess << "`?";
  data_error(path, 0, os.str());
}

Ambiguous parse_ambiguous(const std::string& s) {
  if (s == "token") return Ambiguous::Token;
  if (s == "skip") return Ambiguous::Skip;
  if (s == "error") return Ambiguous::Error;
  if (s == "resolve") return Ambiguous::Resolve;
  throw ConfigError("ambiguous: unknown mode `" + s + "` (token | skip | error | resolve)");
}

const char* ambiguous_name(Ambiguous a) {
  switch (a) {
    case Ambiguous::Token:
      return "token";
    case Ambiguous::Skip:
      return "skip";
    case Ambiguous::Error:
      return "error";
    case Ambiguous::Resolve:
      return "resolve";
  }
  return "?";
}

namespace {

// Bit mask of the bases (A=1, C=2, G=4, T=8) an IUPAC code stands for; 0 = not a code.
struct BaseTable {
  uint8_t mask[256] = {};
  BaseTable() {
    auto set = [&](char c, uint8_t m) {
      mask[static_cast<unsigned char>(c)] = m;
      mask[static_cast<unsigned char>(std::tolower(c))] = m;
    };
    set('A', 1);
    set('C', 2);
    set('G', 4);
    set('T', 8);
    set('U', 8);
    set('R', 1 | 4);
    set('Y', 2 | 8);
    set('S', 2 | 4);
    set('W', 1 | 8);
    set('K', 4 | 8);
    set('M', 1 | 2);
    set('B', 2 | 4 | 8);
    set('D', 1 | 4 | 8);
    set('H', 1 | 2 | 8);
    set('V', 1 | 2 | 4);
    set('N', 15);
    mask[static_cast<unsigned char>('-')] = 15;  // an alignment gap reads as "any base"
    mask[static_cast<unsigned char>('.')] = 15;
  }
};
const BaseTable kBases;

int base_code(uint8_t mask) {
  switch (mask) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 4:
      return 2;
    case 8:
      return 3;
    default:
      return -1;
  }
}

}  // namespace

const OptionTable<KmerSettings>& KmerSettings::table() {
  using S = KmerSettings;
  static const auto t =
      OptionTable<S>()
          .add("k", &S::k, "1", "k-mer length (vocabulary 2 + 4^k)", 1, 10)
          .add("stride", &S::stride, "1", "step between k-mer starts (stride k = non-overlapping)",
               1, 1e9)
          .choice(
              "ambiguous", &S::ambiguous, "token",
              "k-mers with N or another IUPAC code: token (<amb>), skip, error, resolve (seeded "
              "random compatible base)",
              {{"token", Ambiguous::Token},
               {"skip", Ambiguous::Skip},
               {"error", Ambiguous::Error},
               {"resolve", Ambiguous::Resolve}});
  return t;
}

OptionSpecs KmerTokenizer::options() { return KmerSettings::table().specs(); }

KmerTokenizer::KmerTokenizer(int k, int stride, Ambiguous ambiguous)
    : k_(k), stride_(stride), ambiguous_(ambiguous) {
  if (k < 1 || k > 10)
    throw ConfigError("k-mer size k must be in [1, 10], got " + std::to_string(k));
  if (stride < 1) throw ConfigError("k-mer stride must be >= 1, got " + std::to_string(stride));
}

size_t KmerTokenizer::vocab_size() const { return 2 + (size_t{1} << (2 * k_)); }

std::vector<std::string> KmerTokenizer::vocab() const {
  static const char kAcgt[] = "ACGT";
  std::vector<std::string> v{"<pad>", "<amb>"};
  size_t n = size_t{1} << (2 * k_);
  v.reserve(2 + n);
  for (size_t code = 0; code < n; ++code) {
    std::string s(static_cast<size_t>(k_), 'A');
    for (int i = k_ - 1, c = static_cast<int>(code); i >= 0; --i, c >>= 2) s[i] = kAcgt[c & 3];
    v.push_back(std::move(s));
  }
  return v;
}

std::vector<int32_t> KmerTokenizer::tokenize(const std::string& seq, size_t start, size_t end,
                                             size_t max_tokens, const std::string& where,
                                             uint64_t rng_seed) const {
  end = std::min(end, seq.size());
  std::vector<int32_t> out;
  if (start >= end) return out;
  size_t k = static_cast<size_t>(k_), stride = static_cast<size_t>(stride_);
  out.reserve(std::min((end - start) / stride + 1, max_tokens ? max_tokens : SIZE_MAX));
  Rng rng(rng_seed, "kmer.resolve");
  for (size_t p = start; p + k <= end; p += stride) {
    if (max_tokens && out.size() >= max_tokens) break;
    int32_t code = 0;
    bool amb = false;
    for (size_t i = 0; i < k; ++i) {
      unsigned char ch = static_cast<unsigned char>(seq[p + i]);
      uint8_t m = kBases.mask[ch];
      if (m == 0) {
        std::ostringstream os;
        os << where << ": unknown base '" << (std::isprint(ch) ? std::string(1, ch) : "?")
           << "' (byte " << int(ch) << ") at position " << (p + i + 1)
           << "; expected A C G T U or an IUPAC ambiguity code (N R Y S W K M B D H V)";
        throw ConfigError(os.str());
      }
      int b = base_code(m);
      if (b < 0) {
        if (ambiguous_ == Ambiguous::Error) {
          std::ostringstream os;
          os << where << ": ambiguous base '" << seq[p + i] << "' at position " << (p + i + 1)
             << " (set ambiguous: token | skip | resolve to accept it)";
          throw ConfigError(os.str());
        }
        if (ambiguous_ == Ambiguous::Resolve) {
          int choices[4], n = 0;
          for (int j = 0; j < 4; ++j) {
            if (m & (1 << j)) choices[n++] = j;
          }
          b = choices[rng.below(static_cast<uint64_t>(n))];
        } else {
          amb = true;
          b = 0;
        }
      }
      code = (code << 2) | b;
    }
    if (amb) {
      if (ambiguous_ == Ambiguous::Skip) continue;
      out.push_back(1);
    } else {
      out.push_back(2 + code);
    }
  }
  return out;
}

}  // namespace gf
