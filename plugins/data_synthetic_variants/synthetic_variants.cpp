// synthetic_variants: a generated variant-calling benchmark. Each sequence is the
// reference genome with its clade's defining nucleotide states (Nextstrain
// clades TSV, inheritance resolved), random background substitutions and
// optional runs of N; tokens are k-mers of a region. Deterministic by seed.
// Difficulty knobs: which clades, mutation_rate, n_runs, region length.
#include <algorithm>
#include <cmath>
#include <growformer/config.hpp>
#include <growformer/data/io.hpp>
#include <growformer/data/sequences.hpp>
#include <growformer/data/split.hpp>
#include <growformer/dataset.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>
#include <growformer/rng.hpp>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// The options of `synthetic_variants`, each declared once: its own (`seed`, the generation
/// seed, also draws the split) and the genome options of the data library.
struct Settings : gf::GenomeSettings {
  std::string reference, clades_tsv;
  std::vector<std::string> clades;
  int64_t num_clades = 0, per_clade = 100;
  double mutation_rate = 0.001;
  int64_t n_runs = 0, n_run_max = 100;

  static const gf::OptionTable<Settings>& table() {
    using S = Settings;
    static const auto t =
        gf::OptionTable<S>()
            .add("reference", &S::reference, "", "reference genome FASTA (first record is used)")
            .add("clades_tsv", &S::clades_tsv, "",
                 "Nextstrain clades TSV: clade gene site alt; `nuc POS BASE` and `clade PARENT` "
                 "rows")
            .add("clades", &S::clades, "[]", "clades to generate (empty = see num_clades)")
            .add("num_clades", &S::num_clades, "0", "the first N clades of the file (0 = all)", 0)
            .add("per_clade", &S::per_clade, "100", "sequences generated per clade", 3)
            .add("mutation_rate", &S::mutation_rate, "0.001",
                 "background substitution probability per site (defining sites are kept)", 0.0, 1.0)
            .add("n_runs", &S::n_runs, "0", "runs of N per sequence (defining sites are kept)", 0)
            .add("n_run_max", &S::n_run_max, "100", "longest run of N (length uniform in 1..max)",
                 1)
            .add("seed", &S::seed, "~", "generation seed (default: run seed)", 0)
            .include(gf::GenomeSettings::table("the region", "sequence", "clade"));
    return t;
  }
};

// Clade definitions: own nucleotide states and parent, in file order.
struct CladeDefs {
  std::vector<std::string> order;
  std::map<std::string, std::map<size_t, char>> own;  // 0-based position -> base
  std::map<std::string, std::string> parent;
  std::map<std::string, size_t> line;

  // States of `clade` with its ancestors' states underneath (child wins).
  std::map<size_t, char> resolve(const std::string& clade, const std::string& path) const {
    std::vector<std::string> chain;
    std::set<std::string> seen;
    for (std::string c = clade; !c.empty();) {
      if (!seen.insert(c).second) {
        gf::data_error(path, line.at(clade), "clade `" + clade + "` inherits from itself");
      }
      chain.push_back(c);
      auto p = parent.find(c);
      if (p == parent.end()) break;
      if (!own.count(p->second) && !parent.count(p->second)) {
        gf::data_error(path, line.at(c),
                       "clade `" + c + "` names unknown parent `" + p->second + "`");
      }
      c = p->second;
    }
    std::map<size_t, char> states;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      auto o = own.find(*it);
      if (o == own.end()) continue;
      for (const auto& kv : o->second) states[kv.first] = kv.second;
    }
    return states;
  }
};

CladeDefs read_clades(const std::string& path, size_t genome_len) {
  CladeDefs defs;
  gf::LineReader in(path);
  std::string line;
  if (!in.next(line))
    gf::data_error(path, 1, "empty file: expected the header clade gene site alt");
  gf::TsvHeader header(gf::split_fields(line), path);
  size_t c_clade = header.index("clade"), c_gene = header.index("gene"),
         c_site = header.index("site"), c_alt = header.index("alt");
  while (in.next(line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = gf::split_fields(line);
    // `clade PARENT` rows have no alt column
    size_t need = std::max({c_clade, c_gene, c_site}) + 1;
    if (f.size() > c_gene && f[c_gene] == "nuc") need = std::max(need, c_alt + 1);
    if (f.size() < need) {
      gf::data_error(path, in.line_number(),
                     "expected " + std::to_string(need) + " tab-separated fields, found " +
                         std::to_string(f.size()));
    }
    const std::string& clade = f[c_clade];
    if (clade.empty()) gf::data_error(path, in.line_number(), "empty clade name");
    if (!defs.line.count(clade)) {
      defs.order.push_back(clade);
      defs.line[clade] = in.line_number();
    }
    if (f[c_gene] == "clade") {
      defs.parent[clade] = f[c_site];
    } else if (f[c_gene] == "nuc") {
      long long pos = 0;
      try {
        size_t used = 0;
        pos = std::stoll(f[c_site], &used);
        if (used != f[c_site].size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        gf::data_error(path, in.line_number(), "site `" + f[c_site] + "` is not an integer");
      }
      if (pos < 1 || static_cast<size_t>(pos) > genome_len) {
        gf::data_error(path, in.line_number(),
                       "site " + f[c_site] + " lies outside the reference (1.." +
                           std::to_string(genome_len) + ")");
      }
      const std::string& alt = f[c_alt];
      if (alt.size() != 1 || std::string("ACGT").find(alt[0]) == std::string::npos) {
        gf::data_error(path, in.line_number(), "alt `" + alt + "` is not one of A C G T");
      }
      defs.own[clade][static_cast<size_t>(pos - 1)] = alt[0];
    }
    // amino-acid rows (gene S, ORF1a, ...) do not change the nucleotide sequence
  }
  return defs;
}

class SyntheticVariants : public gf::Dataset {
 public:
  explicit SyntheticVariants(Settings s) : s_(std::move(s)) {}

  std::string describe() const override {
    std::ostringstream os;
    os << "synthetic_variants(reference=" << s_.reference << ", clades=" << s_.clades_tsv
       << ", per_clade=" << s_.per_clade << ", mutation_rate=" << s_.mutation_rate
       << ", n_runs=" << s_.n_runs << ", k=" << s_.k << ")";
    if (!summary_.empty()) os << ": " << summary_;
    return os.str();
  }

  gf::DataSplits load() override {
    auto refs = gf::read_fasta(s_.reference);
    const std::string& ref = refs.front().seq;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::string("ACGT").find(ref[i]) == std::string::npos) {
        gf::data_error(s_.reference, refs.front().line,
                       "reference base '" + std::string(1, ref[i]) + "' at position " +
                           std::to_string(i + 1) + " is not A C G T");
      }
    }
    CladeDefs defs = read_clades(s_.clades_tsv, ref.size());
    const auto [start, end] = region(ref.size());  // 0-based [start, end)
    const std::vector<std::string> chosen = chosen_clades(defs);
    std::vector<std::map<size_t, char>> states;
    for (const auto& c : chosen) states.push_back(defs.resolve(c, s_.clades_tsv));
    const std::vector<std::string> seq_in_region =
        region_sequences(ref, chosen, states, start, end);

    const gf::KmerTokenizer tok = gf::genome_tokenizer(s_);
    gf::DataSplits d = gf::genome_splits(tok, chosen);
    const size_t n = static_cast<size_t>(s_.per_clade);
    const gf::HeldOut h = gf::held_out(n, s_);
    if (h.test == 0 || h.val == 0 || h.test + h.val >= n) {
      throw gf::ConfigError("synthetic_variants: per_clade " + std::to_string(n) +
                            " with val_ratio/test_ratio leaves an empty split; raise per_clade");
    }
    std::ostringstream sum;
    for (size_t c = 0; c < chosen.size(); ++c) {
      gf::Rng rng(s_.seed, "synthetic_variants." + chosen[c]);
      size_t in_region = 0;
      for (const auto& kv : states[c]) in_region += kv.first >= start && kv.first < end;
      sum << (c ? ", " : "") << chosen[c] << " " << in_region << " sites";
      for (size_t i = 0; i < n; ++i) {
        const std::string s = sample(seq_in_region[c], states[c], start, rng);
        gf::Example e;
        e.label = static_cast<int32_t>(c);
        std::string where =
            "synthetic_variants clade `" + chosen[c] + "` sequence " + std::to_string(i);
        e.tokens = tok.tokenize(s, 0, s.size(), s_.max_len, where, s_.seed ^ gf::hash_name(where));
        d.max_len = std::max(d.max_len, e.tokens.size());
        h.split_of(d, i).push_back(std::move(e));
      }
    }
    summary_ = "region " + std::to_string(start + 1) + ".." + std::to_string(end) +
               ", defining sites in region: " + sum.str();
    return d;
  }

 private:
  /// The region as 0-based [start, end) within a reference of REF_SIZE bases.
  std::pair<size_t, size_t> region(size_t ref_size) const {
    size_t start = 0, end = ref_size;
    auto [first, last] = gf::resolve_region(s_.region);
    if (last > 0) {
      start = first - 1;
      end = last;
    }
    if (end > ref_size || start >= end) {
      throw gf::ConfigError("synthetic_variants: region " + std::to_string(start + 1) + ".." +
                            std::to_string(end) + " lies outside the reference (1.." +
                            std::to_string(ref_size) + ")");
    }
    return {start, end};
  }

  /// The clades of the data set: `clades`, else the first `num_clades` the file defines; each
  /// defined, at least 2.
  std::vector<std::string> chosen_clades(const CladeDefs& defs) const {
    std::vector<std::string> chosen = s_.clades;
    if (chosen.empty()) {
      size_t n = s_.num_clades > 0 ? static_cast<size_t>(s_.num_clades) : defs.order.size();
      if (n > defs.order.size()) {
        throw gf::ConfigError("synthetic_variants: num_clades " + std::to_string(n) + " but " +
                              s_.clades_tsv + " defines " + std::to_string(defs.order.size()));
      }
      chosen.assign(defs.order.begin(), defs.order.begin() + static_cast<long>(n));
    }
    for (const auto& c : chosen) {
      if (!defs.line.count(c)) {
        std::string guess = gf::did_you_mean(c, defs.order);
        throw gf::ConfigError("synthetic_variants: clades: `" + c + "` is not defined in " +
                              s_.clades_tsv +
                              (guess.empty() ? "" : "; did you mean `" + guess + "`?"));
      }
    }
    if (chosen.size() < 2) throw gf::ConfigError("synthetic_variants: choose at least 2 clades");
    return chosen;
  }

  /// Each clade's sequence in the region (the reference with its defining states); two clades
  /// with the same states inside the region cannot be told apart.
  std::vector<std::string> region_sequences(const std::string& ref,
                                            const std::vector<std::string>& chosen,
                                            const std::vector<std::map<size_t, char>>& states,
                                            size_t start, size_t end) const {
    std::vector<std::string> seq_in_region(chosen.size());
    for (size_t c = 0; c < chosen.size(); ++c) {
      std::string s = ref.substr(start, end - start);
      for (const auto& kv : states[c]) {
        if (kv.first >= start && kv.first < end) s[kv.first - start] = kv.second;
      }
      for (size_t o = 0; o < c; ++o) {
        if (seq_in_region[o] == s) {
          throw gf::ConfigError("synthetic_variants: clades `" + chosen[o] + "` and `" + chosen[c] +
                                "` have identical defining states in region " +
                                std::to_string(start + 1) + ".." + std::to_string(end) +
                                "; widen the region or choose other clades");
        }
      }
      seq_in_region[c] = std::move(s);
    }
    return seq_in_region;
  }

  /// One genome of a clade: its region sequence BASE with random substitutions (never at a
  /// defining site of STATES) and runs of N, drawn from RNG.
  std::string sample(const std::string& base, const std::map<size_t, char>& states, size_t start,
                     gf::Rng& rng) const {
    const char* kBases = "ACGT";
    const size_t len = base.size();
    std::string s = base;
    auto defining = [&](size_t p) { return states.count(p + start) > 0; };
    if (s_.mutation_rate > 0) {
      // geometric gaps between substitutions: one draw per mutation, not per site
      double log_keep = std::log1p(-s_.mutation_rate);
      for (size_t p = 0;;) {
        double u = 1.0 - rng.uniform();  // (0, 1]
        double gap = s_.mutation_rate >= 1.0 ? 0.0 : std::floor(std::log(u) / log_keep);
        if (gap >= static_cast<double>(len - p)) break;
        p += static_cast<size_t>(gap);
        if (!defining(p)) {
          int old = static_cast<int>(std::string(kBases).find(s[p]));
          int b = static_cast<int>(rng.below(3));
          s[p] = kBases[b >= old ? b + 1 : b];
        }
        if (++p >= len) break;
      }
    }
    for (int64_t r = 0; r < s_.n_runs; ++r) {
      size_t run = 1 + rng.below(static_cast<uint64_t>(s_.n_run_max));
      size_t at = rng.below(len);
      for (size_t p = at; p < std::min(len, at + run); ++p) {
        if (!defining(p)) s[p] = 'N';
      }
    }
    return s;
  }

  Settings s_;
  std::string summary_;
};

std::unique_ptr<gf::Dataset> make(const gf::Options& o, const gf::DatasetBuild& b) {
  Settings s;
  s.seed = b.seed;  // unless seed is given
  s = Settings::table().read(o, std::move(s));
  gf::check_genome_settings(o, s);
  s.reference = o.resolve_path(s.reference);
  s.clades_tsv = o.resolve_path(s.clades_tsv);
  if (!s.clades.empty() && o.differs_from_default("num_clades")) {
    o.fail("num_clades", "give either clades or num_clades, not both");
  }
  return std::make_unique<SyntheticVariants>(std::move(s));
}

void register_components(gf::Registry& r) {
  r.add_dataset({"synthetic_variants",
                 "generated genomes: reference + clade-defining states + noise, k-mer tokens",
                 Settings::table().specs()},
                make);
}

}  // namespace

GROWFORMER_PLUGIN("synthetic_variants", "0.1.0", register_components)
