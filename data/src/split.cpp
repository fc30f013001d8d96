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

size_t ratio_count(size_t n, double ratio) {
  return static_cast<size_t>(std::llround(static_cast<double>(n) * ratio));
}

void require_nonempty_splits(const DataSplits& d, const std::string& plugin, const std::string& hint) {
  const char* names[] = {"train", "val", "test"};
  const std::vector<Example>* splits[] = {&d.train, &d.val, &d.test};
  for (int i = 0; i < 3; ++i)
    if (splits[i]->empty())
      throw ConfigError(plugin + ": split `" + names[i] + "` is empty (" + hint + ")");
}

}  // namespace gf
