#include "growformer/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "growformer/errors.hpp"
#include "growformer/json_text.hpp"

namespace gf {

using json = nlohmann::json;

namespace {

constexpr const char* kChecksumKey = "checksum";
constexpr size_t kMaxRank = 16;

// CRC-32 (zlib) of the header as written without the checksum entry, then of the data section.
uint32_t content_crc(const std::string& header_without_checksum, const uint8_t* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(header_without_checksum.data()),
                header_without_checksum.size());
  crc = crc32_z(crc, data, n);
  return static_cast<uint32_t>(crc);
}

std::string crc_text(uint32_t crc) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "crc32:%08x", crc);
  return buf;
}

std::string errno_text() { return std::strerror(errno); }

// Writes all of [p, p + n) to fd; false (errno set) on any failure, including a short write.
bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (w == 0) {
      errno = ENOSPC;
      return false;
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(dir + ": cannot open the directory to sync it: " + errno_text());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // some file systems cannot sync a directory (EINVAL); the rename is then as durable as it gets
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw RuntimeError(dir + ": cannot sync the directory: " + std::strerror(err));
}

void write_file_durably(const std::string& path,
                        const std::vector<std::pair<const void*, size_t>>& parts) {
  namespace fs = std::filesystem;
  fs::path target(path);
  std::string dir = target.parent_path().string();
  // unique temporary name beside the target: concurrent writers never share one
  std::string tmpl = path + ".tmp-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    throw RuntimeError(path + ": cannot create a temporary file beside it: " + errno_text());
  std::string tmp(name.data());
  auto fail = [&](const std::string& what) {
    std::string msg = tmp + ": " + what + ": " + errno_text();
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());  // never leave a partial file behind
    std::error_code ec;
    const std::string name = target.filename().string();
    throw RuntimeError(msg + (fs::exists(target, ec) ? " (the previous " + name + " is untouched)"
                                                     : " (there was no " + name +
                                                           " before; no partial file is left)"));
  };
  ::fchmod(fd, 0644);
  for (const auto& [p, n] : parts)
    if (!write_all(fd, p, n)) fail("write failed (disk full?)");
  if (::fsync(fd) != 0) fail("cannot sync to disk");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("close failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot move into place as " + path);
  fsync_directory(dir);
}

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  json header = json::object();
  size_t offset = 0;
  for (const auto& [name, t] : ck.tensors) {
    size_t bytes = t.size() * sizeof(float);
    header[json_text(name)] = {
        {"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  json meta = json::object();
  for (const auto& [k, v] : ck.metadata)
    if (k != kChecksumKey) meta[json_text(k)] = json_text(v);  // any bytes (json_text.hpp)
  header["__metadata__"] = meta;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::string h0 = header.dump();
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(h0.data()), h0.size());
  for (const auto& [name, t] : ck.tensors)
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(t.data()), t.size() * sizeof(float));
  header["__metadata__"][kChecksumKey] = crc_text(static_cast<uint32_t>(crc));
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // align the data section
  uint64_t n = h.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  std::vector<std::pair<const void*, size_t>> parts{{le, 8}, {h.data(), h.size()}};
  for (const auto& [name, t] : ck.tensors) parts.emplace_back(t.data(), t.size() * sizeof(float));
  write_file_durably(path, parts);
}

namespace {

// The header of a checkpoint in memory and where its data section starts.
struct RawCheckpoint {
  json header;
  const uint8_t* data = nullptr;
  size_t data_size = 0;
};

RawCheckpoint split_header(const uint8_t* bytes, size_t fsize, const std::string& path) {
  if (fsize < 8)
    throw RuntimeError(path + ": corrupt checkpoint: file is " + std::to_string(fsize) +
                       " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  // a text file (a YAML config, say) read as a checkpoint: its first bytes make a huge length
  bool text = n > fsize - 8;
  for (size_t i = 0; text && i < 8; ++i)
    text = bytes[i] == '\t' || bytes[i] == '\n' || bytes[i] == '\r' ||
           (bytes[i] >= 0x20 && bytes[i] < 0x7f);
  if (text)
    throw RuntimeError(path +
                       ": a text file (a YAML config?), not a checkpoint: give a checkpoint "
                       "(.safetensors) or the run directory that holds one");
  if (n > fsize - 8)
    throw RuntimeError(path + ": corrupt or truncated checkpoint: header claims " +
                       std::to_string(n) + " bytes but the file has " + std::to_string(fsize - 8));
  RawCheckpoint raw;
  try {
    raw.header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": corrupt checkpoint header (not JSON): " + e.what());
  }
  if (!raw.header.is_object())
    throw RuntimeError(path + ": corrupt checkpoint header (not an object)");
  raw.data = bytes + 8 + n;
  raw.data_size = fsize - 8 - n;
  return raw;
}

// Integrity first: nothing in a damaged file is trusted. Removes the checksum entry from the
// metadata it checks. Throws the message for `corrupt`.
void verify_checksum(RawCheckpoint& raw) {
  auto meta_it = raw.header.find("__metadata__");
  if (meta_it == raw.header.end() || !meta_it->is_object())
    throw std::runtime_error("no `__metadata__` object in the header");
  auto sum_it = meta_it->find(kChecksumKey);
  if (sum_it == meta_it->end() || !sum_it->is_string())
    throw std::runtime_error(
        "no checksum in the header (written by an older growformer, or not "
        "by growformer at all)");
  std::string stored = sum_it->get<std::string>();
  meta_it->erase(kChecksumKey);
  std::string actual = crc_text(content_crc(raw.header.dump(), raw.data, raw.data_size));
  if (stored != actual)
    throw std::runtime_error("checksum mismatch (stored " + stored.substr(0, 40) + ", content " +
                             actual + "): the file was damaged or edited after it was written");
}

Shape entry_shape(const json& sj, size_t data_size, size_t* elems) {
  if (!sj.is_array() || sj.size() > kMaxRank)
    throw RuntimeError("shape must be a list of at most " + std::to_string(kMaxRank) + " sizes");
  Shape shape;
  *elems = 1;
  for (const auto& d : sj) {
    if (!d.is_number_unsigned()) throw RuntimeError("shape entry " + d.dump() + " is not a size");
    size_t v = d.get<size_t>();
    if (v != 0 && *elems > data_size / sizeof(float) / v)
      throw RuntimeError("shape " + sj.dump() + " holds more elements than the file");
    *elems *= v;
    shape.push_back(v);
  }
  return shape;
}

// One tensor entry of the header; RANGE receives its byte range in the data section.
Tensor read_entry(const json& e, const RawCheckpoint& raw, std::pair<size_t, size_t>* range) {
  if (!e.is_object()) throw RuntimeError("entry is not an object");
  const json& dtype = e.at("dtype");
  if (!dtype.is_string() || dtype.get<std::string>() != "F32")
    throw RuntimeError("dtype " + dtype.dump() + " (only \"F32\" is supported)");
  size_t elems = 0;
  Shape shape = entry_shape(e.at("shape"), raw.data_size, &elems);
  const json& oj = e.at("data_offsets");
  if (!oj.is_array() || oj.size() != 2 || !oj[0].is_number_unsigned() ||
      !oj[1].is_number_unsigned())
    throw RuntimeError("data_offsets must be two byte offsets");
  size_t b = oj[0].get<size_t>(), f = oj[1].get<size_t>();
  if (f < b || f > raw.data_size) throw RuntimeError("data offsets outside the file (truncated?)");
  if (f - b != elems * sizeof(float))
    throw RuntimeError("data size " + std::to_string(f - b) + " does not match shape " +
                       shape_str(shape));
  Tensor t = Tensor::empty(shape);
  if (f > b) std::memcpy(t.data(), raw.data + b, f - b);
  *range = {b, f};
  return t;
}

// The tensors tile the data section: no overlaps, no gaps, nothing after the last one.
void check_tiling(std::vector<std::pair<size_t, size_t>> ranges, size_t data_size) {
  std::sort(ranges.begin(), ranges.end());
  size_t at = 0;
  for (const auto& [b, f] : ranges) {
    if (b != at)
      throw std::runtime_error("tensor data overlap or leave a gap at byte " + std::to_string(at));
    at = f;
  }
  if (at != data_size)
    throw std::runtime_error(std::to_string(data_size - at) + " bytes after the last tensor");
}

}  // namespace

Checkpoint parse_checkpoint(const uint8_t* bytes, size_t fsize, const std::string& path) {
  auto corrupt = [&](const std::string& msg) -> RuntimeError {
    return RuntimeError(path + ": corrupt checkpoint: " + msg);
  };
  RawCheckpoint raw = split_header(bytes, fsize, path);
  Checkpoint ck;
  std::vector<std::pair<size_t, size_t>> ranges;
  try {
    verify_checksum(raw);
  } catch (const std::runtime_error& e) {
    throw corrupt(e.what());
  }
  for (auto it = raw.header.begin(); it != raw.header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m)
        ck.metadata[json_bytes(m.key())] =
            m->is_string() ? json_bytes(m->get<std::string>()) : m->dump();
      continue;
    }
    try {
      ranges.emplace_back();
      Tensor t = read_entry(*it, raw, &ranges.back());
      if (!ck.tensors.emplace(json_bytes(it.key()), std::move(t)).second)
        throw RuntimeError("a second tensor of this name");
    } catch (const std::exception& err) {
      throw corrupt("tensor `" + it.key() + "`: " + err.what());
    }
  }
  try {
    check_tiling(std::move(ranges), raw.data_size);
  } catch (const std::runtime_error& e) {
    throw corrupt(e.what());
  }
  return ck;
}

Checkpoint load_checkpoint(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(path + ": no such checkpoint (or not readable): " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw RuntimeError(path + ": not a checkpoint file (" +
                       (S_ISDIR(st.st_mode) ? std::string("a directory") : "not a regular file") +
                       "); expected e.g. RUN_DIR/checkpoints/last.safetensors");
  }
  size_t fsize = static_cast<size_t>(st.st_size);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(fsize);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw RuntimeError(path + ": checkpoint of " + std::to_string(fsize) +
                       " bytes does not fit in memory");
  }
  size_t got = 0;
  while (got < fsize) {
    ssize_t r = ::read(fd, bytes.data() + got, fsize - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::string why = r < 0 ? errno_text() : "file shrank while reading";
      ::close(fd);
      throw RuntimeError(path + ": cannot read the checkpoint: " + why);
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return parse_checkpoint(bytes.data(), bytes.size(), path);
}

}  // namespace gf
