// idx_images: an images file and a labels file (split by "\n%%\n"); the first byte picks the
// pooling factor and the number of grey levels.
#define GF_FUZZ_LINKED_PLUGIN
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t mode = data[0];
  auto parts = gf_fuzz::split(data + 1, size - 1, 2);
  std::string img = gf_fuzz::put("img.idx", parts[0]), lab = gf_fuzz::put("lab.idx", parts[1]);
  std::string yaml = "plugin: idx_images\ntrain_images: " + img + "\ntrain_labels: " + lab +
                     "\ntest_images: " + img + "\ntest_labels: " + lab +
                     "\ndownsample: " + std::to_string(1 + (mode & 7)) +
                     "\nlevels: " + std::to_string(2 + (mode >> 3)) + "\nval_ratio: 0.25\n";
  gf_fuzz::load_dataset(yaml);
  return 0;
}
