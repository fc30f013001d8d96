// fasta_variants: genome classification from a FASTA file (plain or gzip) and a
// metadata TSV that labels each record; k-mer tokens over an optional region,
// class filters, and a stratified train/val/test split by seed.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <growformer/config.hpp>
#include <growformer/data/io.hpp>
#include <growformer/data/sequences.hpp>
#include <growformer/data/split.hpp>
#include <growformer/dataset.hpp>
#include <growformer/json_text.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>
#include <growformer/rng.hpp>
#include <growformer/tokenizer_fields.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

/// The options of `fasta_variants`, each declared once: its own, `split_seed` (the seed of the
/// stratified split, `seed`) and the genome options of the data library.
struct Settings : gf::GenomeSettings {  // region end 0 = whole record
  std::string fasta, metadata, id_column, label_column;
  int64_t min_count = 0;
  std::vector<std::string> include;
  std::string other, other_name, missing;
  // a tokenizer saved with a checkpoint (DatasetBuild::tokenizer)
  bool restored = false;
  std::vector<std::string> classes;

  /// The saved tokenizer: the k-mer settings, the region (resolved: start and end), the seed of
  /// the ambiguity resolution and the classes.
  static const gf::TokenizerFields<Settings>& saved() {
    using S = Settings;
    static const auto t =
        gf::TokenizerFields<S>("fasta_variants")
            .add("k", &S::k)
            .add("stride", &S::stride)
            .custom(
                "ambiguous",
                [](const S& s) { return nlohmann::json(gf::ambiguous_name(s.ambiguous)); },
                [](const nlohmann::json& j, S& s) {
                  s.ambiguous = gf::parse_ambiguous(j.get<std::string>());
                })
            .custom(
                "region",
                [](const S& s) {
                  return nlohmann::json({s.region.start, s.region.end});
                },
                [](const nlohmann::json& j, S& s) {
                  s.region.start = j.at(0).get<size_t>();
                  s.region.end = j.at(1).get<size_t>();
                  s.region.gene.clear();
                })
            .add("max_len", &S::max_len)
            .add("seed", &S::seed)
            .add("classes", &S::classes)
            .add("other_name", &S::other_name);
    return t;
  }

  static const gf::OptionTable<Settings>& table() {
    using S = Settings;
    static const auto t =
        gf::OptionTable<S>()
            .add("fasta", &S::fasta, "", "FASTA or FASTA.gz of the genomes")
            .add("metadata", &S::metadata, "", "TSV with a header: one row per genome")
            .add("id_column", &S::id_column, "strain", "metadata column holding the FASTA id")
            .add("label_column", &S::label_column, "who_variant",
                 "metadata column holding the class")
            .add("min_count", &S::min_count, "0",
                 "classes with fewer genomes are grouped or dropped", 0)
            .add("include", &S::include, "[]", "keep only these classes (empty = all)")
            .choice("other", &S::other, "group",
                    "classes removed by include/min_count: group into other_name, or drop",
                    {{"group", std::string("group")}, {"drop", std::string("drop")}})
            .add("other_name", &S::other_name, "other", "name of the grouped class")
            .choice("missing", &S::missing, "skip",
                    "metadata ids absent from the FASTA: skip (counted) or error",
                    {{"skip", std::string("skip")}, {"error", std::string("error")}})
            .include(gf::SplitSettings::table("each class", "the stratified split"), {"split_seed"})
            .include(gf::GenomeSettings::table("the region on each record", "genome", "class"));
    return t;
  }
};

/// Prediction records of a FASTA file (plain or gzip), read record by record.
class FastaRecordReader : public gf::RecordReader {
 public:
  FastaRecordReader(const Settings& s, size_t start, size_t end, const std::string& path)
      : s_(s), start_(start), end_(end), in_(path), tok_(gf::genome_tokenizer(s)) {}
  bool next(gf::Record& r) override {
    std::string line;
    size_t header_line = 0;
    if (!header(line, header_line)) return false;
    seen_any_ = true;
    size_t b = 1;
    while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    size_t e = b;
    while (e < line.size() && !std::isspace(static_cast<unsigned char>(line[e]))) ++e;
    const std::string id = line.substr(b, e - b);
    const std::string seq = sequence();
    r = gf::Record();
    r.line = header_line;
    r.id = id.empty() ? "line" + std::to_string(header_line) : id;
    if (id.empty()) {
      r.error = "FASTA header without an id";
      return true;
    }
    if (seq.empty()) {
      r.error = "FASTA record `" + id + "` has no sequence";
      return true;
    }
    size_t start = end_ ? start_ - 1 : 0;
    size_t end = end_ ? std::min(end_, seq.size()) : seq.size();
    std::string where = in_.path() + ":" + std::to_string(header_line) + ": record `" + id + "`";
    try {
      if (start < end)
        r.tokens = tok_.tokenize(seq, start, end, s_.max_len, where, s_.seed ^ gf::hash_name(id));
    } catch (const gf::ConfigError& err) {
      r.error = err.what();
      r.tokens.clear();
      return true;
    }
    if (r.tokens.empty())
      r.error = "no k-mer in the region (record length " + std::to_string(seq.size()) +
                ", region " + std::to_string(start + 1) + ".." +
                std::to_string(end_ ? end_ : seq.size()) + ")";
    return true;
  }

 private:
  /// The next record's header line into LINE (the one read ahead, or the next '>' line);
  /// false at the end of the file.
  bool header(std::string& line, size_t& header_line) {
    if (!pending_.empty()) {
      line.swap(pending_);
      header_line = pending_line_;
      return true;
    }
    while (true) {
      if (!in_.next(line)) {
        if (!seen_any_) gf::data_error(in_.path(), 0, "no FASTA records");
        return false;
      }
      if (line.empty() || line[0] == ';') continue;
      if (line[0] != '>')
        gf::data_error(in_.path(), in_.line_number(),
                       "sequence data before the first '>' header: is this a FASTA file?");
      header_line = in_.line_number();
      return true;
    }
  }

  /// The record's sequence lines, upper-cased without white space, up to the next header
  /// (kept for the next record).
  std::string sequence() {
    std::string seq, line;
    while (in_.next(line)) {
      if (line.empty() || line[0] == ';') continue;
      if (line[0] == '>') {
        pending_ = line;
        pending_line_ = in_.line_number();
        break;
      }
      for (char c : line)
        if (!std::isspace(static_cast<unsigned char>(c)))
          seq.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    }
    return seq;
  }

  const Settings& s_;
  size_t start_, end_;
  gf::LineReader in_;
  gf::KmerTokenizer tok_;
  std::string pending_;
  size_t pending_line_ = 0;
  bool seen_any_ = false;
};

class FastaVariants : public gf::Dataset {
 public:
  explicit FastaVariants(Settings s) : s_(std::move(s)) {}

  std::string describe() const override {
    std::ostringstream os;
    os << "fasta_variants(fasta=" << s_.fasta << ", metadata=" << s_.metadata
       << ", label=" << s_.label_column << ", k=" << s_.k << ", stride=" << s_.stride;
    if (region_end_ > 0) os << ", region=" << region_start_ << ".." << region_end_;
    os << ")";
    if (loaded_) {
      os << ": " << used_ << " genomes; " << missing_in_fasta_
         << " metadata ids absent from the FASTA (skipped), " << unlabelled_
         << " FASTA records without metadata (ignored), " << dropped_
         << " dropped by class filters";
    }
    return os.str();
  }

  gf::DataSplits load() override {
    std::tie(region_start_, region_end_) = gf::resolve_region(s_.region);
    std::vector<gf::FastaRecord> records = gf::read_fasta(s_.fasta);
    const std::vector<Labelled> rows = read_labels(records);
    if (rows.empty()) {
      throw gf::ConfigError("fasta_variants: no metadata id of " + s_.metadata + " occurs in " +
                            s_.fasta + " (" + std::to_string(missing_in_fasta_) +
                            " ids absent); check id_column");
    }
    std::map<std::string, std::string> maps_to;  // label -> class ("" = dropped)
    const std::vector<std::string> names = class_names(rows, maps_to);
    std::map<std::string, int32_t> class_of;
    for (size_t i = 0; i < names.size(); ++i) class_of[names[i]] = static_cast<int32_t>(i);

    const gf::KmerTokenizer tok = gf::genome_tokenizer(s_);
    gf::DataSplits d = gf::genome_splits(tok, names);
    std::vector<std::vector<gf::Example>> per_class =
        tokenize(records, rows, maps_to, class_of, names.size(), tok, d.max_len);
    std::vector<gf::FastaRecord>().swap(records);
    split_by_class(per_class, names, d);
    gf::require_nonempty_splits(d, "fasta_variants",
                                std::to_string(used_) + " genomes; raise val_ratio/test_ratio");
    loaded_ = true;
    // what the checkpoint saves: the resolved region and the classes
    s_.region = {region_start_, region_end_, "", ""};
    s_.classes = names;
    d.tokenizer = Settings::saved().save(s_);
    return d;
  }

 private:
  /// A metadata row whose id occurs in the FASTA: the record and its label.
  struct Labelled {
    size_t record;
    std::string label;
  };

  /// The metadata's id -> label rows, in file order, of the ids the FASTA RECORDS hold (ids are
  /// unique in both); counts the ids absent from the FASTA and the records without metadata.
  std::vector<Labelled> read_labels(const std::vector<gf::FastaRecord>& records) {
    std::unordered_map<std::string, size_t> by_id;
    for (size_t i = 0; i < records.size(); ++i) {
      auto ins = by_id.emplace(records[i].id, i);
      if (!ins.second) {
        gf::data_error(s_.fasta, records[i].line,
                       "duplicate FASTA id `" + records[i].id + "` (first at line " +
                           std::to_string(records[ins.first->second].line) + ")");
      }
    }

    std::vector<Labelled> rows;
    gf::LineReader in(s_.metadata);
    std::string line;
    if (!in.next(line)) gf::data_error(s_.metadata, 1, "empty file: expected a header row");
    gf::TsvHeader header(gf::split_fields(line), s_.metadata);
    size_t id_col = header.index(s_.id_column, "id_column");
    size_t label_col = header.index(s_.label_column, "label_column");
    std::set<std::string> seen;
    while (in.next(line)) {
      if (line.empty()) continue;
      auto f = gf::split_fields(line);
      if (f.size() != header.size()) {
        gf::data_error(s_.metadata, in.line_number(),
                       "expected " + std::to_string(header.size()) +
                           " tab-separated fields (as the header), found " +
                           std::to_string(f.size()));
      }
      const std::string& id = f[id_col];
      if (id.empty()) gf::data_error(s_.metadata, in.line_number(), "empty id");
      if (f[label_col].empty()) {
        gf::data_error(s_.metadata, in.line_number(), "empty label for `" + id + "`");
      }
      if (!seen.insert(id).second) {
        gf::data_error(s_.metadata, in.line_number(), "duplicate id `" + id + "`");
      }
      auto it = by_id.find(id);
      if (it == by_id.end()) {
        if (s_.missing == "error") {
          gf::data_error(s_.metadata, in.line_number(),
                         "id `" + id + "` does not occur in " + s_.fasta +
                             " (set missing: skip to ignore such ids)");
        }
        ++missing_in_fasta_;
        continue;
      }
      rows.push_back({it->second, f[label_col]});
    }
    unlabelled_ = records.size() - rows.size();
    return rows;
  }

  /// The class names after the class filters (include list, then min_count; the rest grouped
  /// as `other` or dropped), or a checkpoint's classes; MAPS_TO gets each label's class.
  std::vector<std::string> class_names(const std::vector<Labelled>& rows,
                                       std::map<std::string, std::string>& maps_to) const {
    std::map<std::string, size_t> counts;
    for (const auto& r : rows) ++counts[r.label];
    std::set<std::string> included;
    if (!s_.include.empty()) {
      std::vector<std::string> known;
      for (const auto& kv : counts) known.push_back(kv.first);
      for (const auto& name : s_.include) {
        if (!counts.count(name)) {
          std::string guess = gf::did_you_mean(name, known);
          throw gf::ConfigError("fasta_variants: include: class `" + name + "` does not occur in " +
                                s_.metadata + " column `" + s_.label_column + "`" +
                                (guess.empty() ? "" : "; did you mean `" + guess + "`?"));
        }
        included.insert(name);
      }
    }
    bool any_other = false;
    for (const auto& kv : counts) {
      bool keep = (included.empty() || included.count(kv.first)) &&
                  kv.second >= static_cast<size_t>(s_.min_count);
      std::string target = keep ? kv.first : (s_.other == "group" ? s_.other_name : "");
      if (!keep && s_.other == "group") any_other = true;
      if (keep && kv.first == s_.other_name && s_.other == "group") any_other = true;
      maps_to[kv.first] = target;
    }
    std::vector<std::string> names;
    if (s_.restored) {  // the checkpoint's classes; an unknown label joins `other` if it exists
      bool has_other =
          std::find(s_.classes.begin(), s_.classes.end(), s_.other_name) != s_.classes.end();
      std::string known;
      for (const auto& c : s_.classes) known += (known.empty() ? "" : ", ") + c;
      for (auto& kv : maps_to) {
        if (std::find(s_.classes.begin(), s_.classes.end(), kv.first) != s_.classes.end())
          kv.second = kv.first;
        else if (has_other)
          kv.second = s_.other_name;
        else
          throw gf::ConfigError("fasta_variants: " + s_.metadata + ": class `" + kv.first +
                                "` is not one of the checkpoint's classes (" + known + ")");
      }
      names = s_.classes;
    }
    for (const auto& kv : maps_to) {
      if (s_.restored) break;
      bool grouped = s_.other == "group" && kv.second == s_.other_name;
      if (!kv.second.empty() && !grouped) names.push_back(kv.second);
    }
    if (any_other && !s_.restored) names.push_back(s_.other_name);  // the grouped class goes last
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.size() < 2) {
      throw gf::ConfigError("fasta_variants: the class filters leave " +
                            std::to_string(names.size()) + " class(es); need at least 2");
    }
    return names;
  }

  /// Each kept row's record tokenised (its region's k-mers), grouped by class; MAX_LEN grows to
  /// the longest.
  std::vector<std::vector<gf::Example>> tokenize(const std::vector<gf::FastaRecord>& records,
                                                 const std::vector<Labelled>& rows,
                                                 std::map<std::string, std::string>& maps_to,
                                                 std::map<std::string, int32_t>& class_of,
                                                 size_t n_classes, const gf::KmerTokenizer& tok,
                                                 size_t& max_len) {
    std::vector<std::vector<gf::Example>> per_class(n_classes);
    for (const auto& r : rows) {
      const std::string& target = maps_to[r.label];
      if (target.empty()) {
        ++dropped_;
        continue;
      }
      const gf::FastaRecord& rec = records[r.record];
      std::string where = s_.fasta + ":" + std::to_string(rec.line) + ": record `" + rec.id + "`";
      size_t start = region_end_ ? region_start_ - 1 : 0;
      size_t end = region_end_ ? region_end_ : rec.seq.size();
      gf::Example e;
      e.label = class_of[target];
      e.tokens =
          tok.tokenize(rec.seq, start, end, s_.max_len, where, s_.seed ^ gf::hash_name(rec.id));
      if (e.tokens.empty()) {
        throw gf::ConfigError(where + ": no k-mer in the region (record length " +
                              std::to_string(rec.seq.size()) + ", region " +
                              std::to_string(start + 1) + ".." + std::to_string(end) + ")");
      }
      max_len = std::max(max_len, e.tokens.size());
      per_class[static_cast<size_t>(e.label)].push_back(std::move(e));
      ++used_;
    }
    return per_class;
  }

  /// Stratified split: each class shuffled on its own stream, then test, validation, training.
  void split_by_class(std::vector<std::vector<gf::Example>>& per_class,
                      const std::vector<std::string>& names, gf::DataSplits& d) const {
    for (size_t c = 0; c < per_class.size(); ++c) {
      auto& v = per_class[c];
      gf::Rng rng(s_.seed, "fasta_variants.split." + names[c]);
      gf::seeded_shuffle(v, rng);
      size_t n = v.size();
      gf::HeldOut h = gf::held_out(n, s_);
      while (h.test + h.val >= n && (h.test + h.val) > 0) {  // keep one for training
        if (h.val >= h.test && h.val > 0)
          --h.val;
        else
          --h.test;
      }
      for (size_t i = 0; i < n; ++i) h.split_of(d, i).push_back(std::move(v[i]));
    }
  }

 public:
  // Prediction input: a FASTA file (plain or gzip), read record by record; the record's region
  // and k-mers as in training.
  std::unique_ptr<gf::RecordReader> open_records(const std::string& path) override {
    if (!s_.region.gene.empty() || region_end_ == 0)
      std::tie(region_start_, region_end_) = gf::resolve_region(s_.region);
    return std::make_unique<FastaRecordReader>(s_, region_start_, region_end_, path);
  }

 private:
  Settings s_;
  size_t region_start_ = 0, region_end_ = 0;
  size_t missing_in_fasta_ = 0, unlabelled_ = 0, dropped_ = 0, used_ = 0;
  bool loaded_ = false;
};

std::unique_ptr<gf::Dataset> make(const gf::Options& o, const gf::DatasetBuild& b) {
  Settings s;
  s.seed = b.seed;  // unless split_seed is given
  s = Settings::table().read(o, std::move(s));
  gf::check_genome_settings(o, s);
  s.fasta = o.resolve_path(s.fasta);
  s.metadata = o.resolve_path(s.metadata);
  if (!b.tokenizer.empty()) {
    Settings::saved().load(b.tokenizer, s);
    s.restored = true;
  }
  return std::make_unique<FastaVariants>(std::move(s));
}

void register_components(gf::Registry& r) {
  r.add_dataset({"fasta_variants", "genome classification: FASTA + metadata TSV, k-mer tokens",
                 Settings::table().specs()},
                make);
}

}  // namespace

GROWFORMER_PLUGIN("fasta_variants", "0.1.0", register_components)
