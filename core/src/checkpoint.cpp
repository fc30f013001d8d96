#include "growformer/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "growformer/errors.hpp"

namespace gf {

using json = nlohmann::json;

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  json header = json::object();
  size_t offset = 0;
  for (const auto& [name, t] : ck.tensors) {
    size_t bytes = t.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  json meta = json::object();
  for (const auto& [k, v] : ck.metadata) meta[k] = v;
  header["__metadata__"] = meta;
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // align the data section
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw RuntimeError(tmp + ": cannot write checkpoint");
    uint64_t n = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& [name, t] : ck.tensors)
      out.write(reinterpret_cast<const char*>(t.data()),
                static_cast<std::streamsize>(t.size() * sizeof(float)));
    out.flush();
    if (!out) throw RuntimeError(tmp + ": write failed (disk full?)");
  }
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw RuntimeError(path + ": cannot move the new checkpoint into place: " + std::strerror(errno));
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError(path + ": no such checkpoint (or not readable)");
  in.seekg(0, std::ios::end);
  size_t fsize = static_cast<size_t>(in.tellg());
  in.seekg(0);
  if (fsize < 8) throw RuntimeError(path + ": corrupt checkpoint: file is " + std::to_string(fsize) +
                                    " bytes, shorter than the 8-byte header length");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (n > fsize - 8)
    throw RuntimeError(path + ": corrupt or truncated checkpoint: header claims " +
                       std::to_string(n) + " bytes but the file has " + std::to_string(fsize - 8));
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  json header;
  try {
    header = json::parse(h);
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": corrupt checkpoint header (not JSON): " + e.what());
  }
  if (!header.is_object()) throw RuntimeError(path + ": corrupt checkpoint header (not an object)");
  size_t data_start = 8 + n, data_size = fsize - data_start;
  Checkpoint ck;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m)
        ck.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const json& e = *it;
    try {
      if (e.at("dtype").get<std::string>() != "F32")
        throw RuntimeError("dtype " + e.at("dtype").get<std::string>() + " (only F32 is supported)");
      Shape shape = e.at("shape").get<Shape>();
      auto off = e.at("data_offsets").get<std::vector<size_t>>();
      if (off.size() != 2 || off[1] < off[0] || off[1] > data_size)
        throw RuntimeError("data offsets outside the file (truncated?)");
      if (off[1] - off[0] != shape_size(shape) * sizeof(float))
        throw RuntimeError("data size does not match shape " + shape_str(shape));
      Tensor t = Tensor::empty(shape);
      in.seekg(static_cast<std::streamoff>(data_start + off[0]));
      in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(off[1] - off[0]));
      if (!in) throw RuntimeError("read failed (truncated?)");
      ck.tensors[it.key()] = t;
    } catch (const RuntimeError& err) {
      throw RuntimeError(path + ": corrupt checkpoint: tensor `" + it.key() + "`: " + err.what());
    } catch (const std::exception& err) {
      throw RuntimeError(path + ": corrupt checkpoint: tensor `" + it.key() + "`: " + err.what());
    }
  }
  return ck;
}

}  // namespace gf
