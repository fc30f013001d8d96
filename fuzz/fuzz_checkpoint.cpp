// The checkpoint parser (safetensors layout, checksum, shapes, offsets) on arbitrary bytes.
// The checksum would stop almost every mutation at the door, so a second pass re-signs the
// input's header and data with a correct checksum and sends that through the structural checks.
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "growformer/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gf_fuzz::expect_clean([&] { gf::parse_checkpoint(data, size, "fuzz.safetensors"); });
  // re-sign: header JSON = the input up to the first NUL, data = the rest
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  size_t hlen = nul ? static_cast<size_t>(nul - data) : size;
  nlohmann::json header = nlohmann::json::parse(data, data + hlen, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return 0;
  if (!header.contains("__metadata__") || !header["__metadata__"].is_object())
    header["__metadata__"] = nlohmann::json::object();
  header["__metadata__"].erase("checksum");
  std::string h0;
  try {
    h0 = header.dump();
  } catch (const nlohmann::json::exception&) {
    return 0;  // invalid UTF-8 in a string: the parser refuses those itself
  }
  const uint8_t* body = nul ? nul + 1 : data + size;
  size_t blen = static_cast<size_t>(data + size - body);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(h0.data()), h0.size());
  crc = crc32_z(crc, body, blen);
  char sum[24];
  std::snprintf(sum, sizeof sum, "crc32:%08lx", static_cast<unsigned long>(crc));
  header["__metadata__"]["checksum"] = sum;
  std::string h = header.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  file += h;
  file.append(reinterpret_cast<const char*>(body), blen);
  gf_fuzz::expect_clean([&] {
    gf::parse_checkpoint(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "fuzz");
  });
  return 0;
}
