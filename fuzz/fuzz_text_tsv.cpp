// text_tsv: train/val files (TSV, CSV with quoting, JSON lines, or sniffed) with char, word and
// ids tokenisers (the first byte picks options and, in its top bits, the format).
#define GF_FUZZ_LINKED_PLUGIN
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t mode = data[0];
  auto parts = gf_fuzz::split(data + 1, size - 1, 2);
  static const char* const ext[] = {".tsv", ".csv", ".jsonl", ""};  // "": sniffed
  const std::string e = ext[mode >> 6];
  std::string train = gf_fuzz::put("train" + e, parts[0]);
  std::string yaml = "plugin: text_tsv\ntrain: " + train + "\n";
  if (!parts[1].empty()) yaml += "val: " + gf_fuzz::put("val" + e, parts[1]) + "\n";
  yaml += std::string("tokenizer: ") +
          ((mode & 1)              ? "char"
           : (mode & 0x30) == 0x30 ? "ids"
                                   : "word") +
          "\n";
  yaml += std::string("label_type: ") + ((mode & 2) ? "auto" : "string") + "\n";
  if (mode & 4) yaml += "strip_html: true\nsplit_punct: true\n";
  if (mode & 8) yaml += "max_vocab: 5\nmin_freq: 2\n";
  yaml += "max_len: " + std::to_string((mode >> 4) & 3) + "\n";
  gf_fuzz::load_dataset(yaml);
  return 0;
}
