// fasta_variants: a FASTA file, its metadata TSV and a GFF annotation (parts split by "\n%%\n");
// the first byte picks k, the stride, the ambiguity mode and gene-or-coordinates.
#define GF_FUZZ_LINKED_PLUGIN
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t mode = data[0];
  auto parts = gf_fuzz::split(data + 1, size - 1, 3);
  static const char* amb[] = {"token", "skip", "error", "resolve"};
  std::string yaml = "plugin: fasta_variants\nfasta: " + gf_fuzz::put("g.fasta", parts[0]) +
                     "\nmetadata: " + gf_fuzz::put("m.tsv", parts[1]) +
                     "\nk: " + std::to_string(1 + (mode & 3)) +
                     "\nstride: " + std::to_string(1 + ((mode >> 2) & 1)) +
                     "\nambiguous: " + amb[(mode >> 3) & 3] + "\nmax_len: 64\n";
  if (mode & 0x20) {
    yaml += "gene: S\ngff: " + gf_fuzz::put("a.gff", parts[2]) + "\n";
  } else if (mode & 0x40) {
    yaml += "region_start: 2\nregion_end: 40\n";
  }
  if (mode & 0x80) yaml += "min_count: 2\nother: drop\n";
  gf_fuzz::load_dataset(yaml);
  return 0;
}
