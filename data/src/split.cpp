// Region options, split sizes and checks shared by the dataset plugins (see data/split.hpp).
#include "growformer/data/split.hpp"

#include <cmath>

#include "growformer/data/sequences.hpp"

namespace gf {

OptionTable<RegionSpec> RegionSpec::table(const std::string& what) {
  using S = RegionSpec;
  return OptionTable<S>()
      .add("region_start", &S::start, "~", "1-based first base of " + what, 1)
      .add("region_end", &S::end, "~", "1-based last base of the region (inclusive)", 1)
      .add("gene", &S::gene, "~", "region = this gene of the gff file")
      .add("gff", &S::gff, "~", "GFF annotation for gene");
}

void check_region(const Options& o, RegionSpec& r) {
  bool has_start = o.has_value("region_start"), has_end = o.has_value("region_end");
  if (has_start != has_end)
    o.fail(has_start ? "region_end" : "region_start", "give both region_start and region_end");
  if (has_start && r.end < r.start) o.fail("region_end", "must be >= region_start");
  if (o.has_value("gene")) {
    if (has_start) o.fail("gene", "give either gene or region_start/region_end, not both");
    if (!o.has_value("gff")) o.fail("gene", "needs gff: the annotation file to look it up in");
    r.gff = o.resolve_path(r.gff);
  }
}

std::pair<size_t, size_t> resolve_region(const RegionSpec& region) {
  if (!region.gene.empty()) return gff_gene_region(region.gff, region.gene);
  return {region.start, region.end};
}

OptionTable<SplitSettings> SplitSettings::table(const std::string& held_out,
                                                const std::string& seeded, bool split_files) {
  using S = SplitSettings;
  const std::string share = "share of " + held_out + " held out as ";
  return OptionTable<S>()
      .add("val_ratio", &S::val_ratio, "0.1", share + "val" + (split_files ? " (no val file)" : ""),
           0.0, 0.9)
      .add("test_ratio", &S::test_ratio, "0.1",
           share + "test" + (split_files ? " (no test file)" : ""), 0.0, 0.9)
      .add("split_seed", &S::seed, "~", "seed of " + seeded + " (default: run seed)", 0);
}

OptionTable<GenomeSettings> GenomeSettings::table(const std::string& region,
                                                  const std::string& unit,
                                                  const std::string& group) {
  using S = GenomeSettings;
  return OptionTable<S>()
      .include(RegionSpec::table(region), &S::region)
      .add("max_len", &S::max_len, "0", "keep at most this many tokens per " + unit + " (0 = all)",
           0)
      .include(SplitSettings::table("each " + group, "the split"), {"val_ratio", "test_ratio"})
      .include(KmerSettings::table());
}

void check_genome_settings(const Options& o, GenomeSettings& s) { check_region(o, s.region); }

KmerTokenizer genome_tokenizer(const GenomeSettings& s) {
  return KmerTokenizer(s.k, s.stride, s.ambiguous);
}

DataSplits genome_splits(const KmerTokenizer& tok, const std::vector<std::string>& classes) {
  DataSplits d;
  d.pad_id = 0;
  d.vocab_size = tok.vocab_size();
  d.vocab = tok.vocab();
  d.class_names = classes;
  d.num_classes = classes.size();
  return d;
}

size_t ratio_count(size_t n, double ratio) {
  return static_cast<size_t>(std::llround(static_cast<double>(n) * ratio));
}

HeldOut held_out(size_t n, const GenomeSettings& s) {
  return {ratio_count(n, s.test_ratio), ratio_count(n, s.val_ratio)};
}

void require_nonempty_splits(const DataSplits& d, const std::string& plugin,
                             const std::string& hint) {
  const char* names[] = {"train", "val", "test"};
  const std::vector<Example>* splits[] = {&d.train, &d.val, &d.test};
  for (int i = 0; i < 3; ++i)
    if (splits[i]->empty())
      throw ConfigError(plugin + ": split `" + names[i] + "` is empty (" + hint + ")");
}

}  // namespace gf
