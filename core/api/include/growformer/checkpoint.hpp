// Checkpoints in the safetensors format: an 8-byte little-endian header length,
// a JSON header (name -> dtype, shape, data offsets; "__metadata__" -> strings),
// then the raw float32 data. `__metadata__.checksum` is a CRC-32 of the header (without that
// entry) and the data, verified on load. Written to a uniquely named temporary file, synced,
// renamed into place and the directory synced.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "growformer/tensor.hpp"

GROWFORMER_API_BEGIN

namespace gf {

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes atomically (unique PATH.tmp-XXXXXX, fsync, rename, fsync of the directory); throws
/// RuntimeError on I/O failure, leaving the previous file untouched and no temporary behind.
void save_checkpoint(const std::string& path, const Checkpoint& ck);
/// Reads and validates (regular file, size, checksum, header JSON, dtypes, shapes, offsets that
/// tile the data); RuntimeError naming the file and the problem on anything missing, truncated,
/// damaged or corrupt.
Checkpoint load_checkpoint(const std::string& path);
/// The same checks on bytes in memory; `path` names them in errors.
Checkpoint parse_checkpoint(const uint8_t* bytes, size_t size, const std::string& path);

/// Writes the concatenated parts to `path` durably: a unique temporary beside it, fsync, rename,
/// fsync of the directory. On any failure the temporary is removed and RuntimeError thrown.
void write_file_durably(const std::string& path,
                        const std::vector<std::pair<const void*, size_t>>& parts);
/// fsync of a directory (after a rename in it); RuntimeError when it cannot be opened.
void fsync_directory(const std::string& dir);

}  // namespace gf

GROWFORMER_API_END
