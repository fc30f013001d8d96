// The checks a plugin file passes before dlopen: ELF header, program and section headers,
// segments inside the file, the entry point in the dynamic symbol table.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)gf::Registry::check_library_image(data, size);
  return 0;
}
