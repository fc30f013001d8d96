// Region options, split sizes and checks shared by the dataset plugins (see data/split.hpp).
#include "growformer/data/split.hpp"

#include <cmath>

#include "growformer/data/sequences.hpp"

namespace gf {

OptionSpecs region_options(const std::string& what) {
  return {
      make_option("region_start", OptType::Int, "~", "1-based first base of " + what, 1),
      make_option("region_end", OptType::Int, "~", "1-based last base of the region (inclusive)", 1),
      make_option("gene", OptType::String, "~", "region = this gene of the gff file"),
      make_option("gff", OptType::String, "~", "GFF annotation for gene"),
  };
}

RegionSpec read_region(const Options& o) {
  RegionSpec r;
  bool has_start = o.has_value("region_start"), has_end = o.has_value("region_end");
  if (has_start != has_end)
    o.fail(has_start ? "region_end" : "region_start", "give both region_start and region_end");
  if (has_start) {
    r.start = static_cast<size_t>(o.get_int("region_start"));
    r.end = static_cast<size_t>(o.get_int("region_end"));
    if (r.end < r.start) o.fail("region_end", "must be >= region_start");
  }
  if (o.has_value("gene")) {
    if (has_start) o.fail("gene", "give either gene or region_start/region_end, not both");
    if (!o.has_value("gff")) o.fail("gene", "needs gff: the annotation file to look it up in");
    r.gene = o.get_string("gene");
    r.gff = o.resolve_path(o.get_string("gff"));
  }
  return r;
}

std::pair<size_t, size_t> resolve_region(const RegionSpec& region) {
  if (!region.gene.empty()) return gff_gene_region(region.gff, region.gene);
  return {region.start, region.end};
}

OptionSpecs genome_options(const std::string& region, const std::string& unit,
                           const std::string& group) {
  OptionSpecs out = region_options(region);
  out.push_back(make_option("max_len", OptType::Int, "0",
                            "keep at most this many tokens per " + unit + " (0 = all)", 0));
  out.push_back(make_option("val_ratio", OptType::Float, "0.1",
                            "share of each " + group + " held out as val", 0.0, 0.9));
  out.push_back(make_option("test_ratio", OptType::Float, "0.1",
                            "share of each " + group + " held out as test", 0.0, 0.9));
  for (auto& o : KmerTokenizer::options()) out.push_back(o);
  return out;
}

GenomeSettings read_genome_settings(const Options& o) {
  GenomeSettings g;
  g.region = read_region(o);
  g.max_len = static_cast<size_t>(o.get_int("max_len"));
  g.val_ratio = o.get_float("val_ratio");
  g.test_ratio = o.get_float("test_ratio");
  g.k = static_cast<int>(o.get_int("k"));
  g.stride = static_cast<int>(o.get_int("stride"));
  g.ambiguous_name = o.get_string("ambiguous");
  g.ambiguous = parse_ambiguous(g.ambiguous_name);
  return g;
}

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

void require_nonempty_splits(const DataSplits& d, const std::string& plugin, const std::string& hint) {
  const char* names[] = {"train", "val", "test"};
  const std::vector<Example>* splits[] = {&d.train, &d.val, &d.test};
  for (int i = 0; i < 3; ++i)
    if (splits[i]->empty())
      throw ConfigError(plugin + ": split `" + names[i] + "` is empty (" + hint + ")");
}

}  // namespace gf
