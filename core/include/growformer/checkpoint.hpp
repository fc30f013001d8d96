// Checkpoints in the safetensors format: an 8-byte little-endian header length,
// a JSON header (name -> dtype, shape, data offsets; "__metadata__" -> strings),
// then the raw float32 data. Written to a temporary file and renamed.
#pragma once

#include <map>
#include <string>

#include "growformer/tensor.hpp"

namespace gf {

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes atomically (PATH.tmp, fsync, rename); throws RuntimeError on I/O failure.
void save_checkpoint(const std::string& path, const Checkpoint& ck);
/// Reads and validates (size, header JSON, dtypes, shapes, offsets); RuntimeError naming the
/// file and the problem on anything missing, truncated or corrupt.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace gf
