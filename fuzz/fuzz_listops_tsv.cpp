// ListOps TSV files (either column order): the reader and `data listops-check`.
#include <sstream>

#include "fuzz_common.hpp"
#include "growformer/data/listops.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path =
      gf_fuzz::put("listops.tsv", std::string(reinterpret_cast<const char*>(data), size));
  gf_fuzz::expect_clean([&] { gf::listops::read_tsv(path); });
  gf_fuzz::expect_clean([&] {
    std::ostringstream out;
    gf::listops::check_file(path, out);
  });
  return 0;
}
