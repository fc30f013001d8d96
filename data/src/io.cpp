// Plain/gzip reading for the dataset plugins (see data/io.hpp).
#include "growformer/data/io.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace gf {

void data_error(const std::string& path, size_t line, const std::string& msg) {
  std::ostringstream os;
  os << path;
  if (line > 0) os << ":" << line;
  os << ": " << msg;
  throw ConfigError(os.str());
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string data_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return path + ": cannot open data file: " + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return path + ": is a directory, expected a data file";
  // a device has no end (/dev/zero, /dev/urandom) or no data (/dev/null); a pipe (a FIFO,
  // /dev/stdin) is read as a file
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    return path + ": is " +
           (S_ISCHR(st.st_mode)   ? "a character device"
            : S_ISBLK(st.st_mode) ? "a block device"
                                  : "not a regular file") +
           ", expected a data file";
  return "";
}

namespace {

// Opens with zlib (which reads plain files transparently); a clear message when
// the file is missing or unreadable.
gzFile open_gz(const std::string& path) {
  if (std::string problem = data_file_problem(path); !problem.empty()) throw ConfigError(problem);
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw ConfigError(path + ": cannot open data file: " + std::strerror(errno));
  gzbuffer(f, 1 << 18);
  return f;
}

// After gzread returned <= 0: end of data, or an error for a stream that ended
// before its trailer (Z_BUF_ERROR) or failed its CRC (Z_DATA_ERROR).
void check_gz_end(gzFile f, const std::string& path, size_t line) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    data_error(path, line,
               std::string("truncated or corrupt gzip stream (") + (msg ? msg : "zlib error") +
                   "); re-download or re-compress the file");
  }
}

}  // namespace

struct LineReader::Impl {
  gzFile f = nullptr;
  std::vector<char> buf = std::vector<char>(1 << 18);
  size_t pos = 0, len = 0;
  bool eof = false;
  ~Impl() {
    if (f) gzclose(f);
  }
};

LineReader::LineReader(const std::string& path) : impl_(std::make_unique<Impl>()), path_(path) {
  impl_->f = open_gz(path);
}

LineReader::~LineReader() = default;

bool LineReader::next(std::string& line) {
  Impl& m = *impl_;
  line.clear();
  bool got_any = false;
  for (;;) {
    if (m.pos == m.len) {
      if (m.eof) break;
      int n = gzread(m.f, m.buf.data(), static_cast<unsigned>(m.buf.size()));
      if (n <= 0) {
        check_gz_end(m.f, path_, line_no_ + 1);
        m.eof = true;
        break;
      }
      m.pos = 0;
      m.len = static_cast<size_t>(n);
      // text has no NUL byte: a binary file is named at once, not read as one endless line
      if (const char* nul = static_cast<const char*>(std::memchr(m.buf.data(), '\0', m.len))) {
        size_t at =
            line_no_ + 1 +
            static_cast<size_t>(std::count(static_cast<const char*>(m.buf.data()), nul, '\n'));
        data_error(path_, at, "a NUL byte: binary data, not a text file");
      }
    }
    const char* begin = m.buf.data() + m.pos;
    const char* end = m.buf.data() + m.len;
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', end - begin));
    got_any = true;
    if (nl) {
      line.append(begin, nl);
      m.pos += static_cast<size_t>(nl - begin) + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      ++line_no_;
      return true;
    }
    if (line.size() + static_cast<size_t>(end - begin) > kMaxLineBytes)
      data_error(path_, line_no_ + 1,
                 "a line longer than " + std::to_string(kMaxLineBytes >> 20) +
                     " MiB: not a line-oriented text file (wrap long FASTA sequences over "
                     "several lines)");
    line.append(begin, end);
    m.pos = m.len;
  }
  // a final "\n" leaves nothing behind: that is the end, not an empty line
  if (!got_any || line.empty()) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_no_;
  return true;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  gzFile f = open_gz(path);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n <= 0) {
      try {
        check_gz_end(f, path, 0);
      } catch (...) {
        gzclose(f);
        throw;
      }
      break;
    }
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(f);
  return out;
}

void write_file(const std::string& path, const std::string& text, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) throw RuntimeError(path + ": cannot write: " + std::strerror(errno));
    int n = text.empty() ? 0 : gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    int rc = gzclose(f);
    if ((!text.empty() && n <= 0) || rc != Z_OK) throw RuntimeError(path + ": write failed");
    return;
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw RuntimeError(path + ": cannot write: " + std::strerror(errno));
  size_t n = std::fwrite(text.data(), 1, text.size(), f);
  int rc = std::fclose(f);
  if (n != text.size() || rc != 0) throw RuntimeError(path + ": write failed");
}

std::vector<std::string> split_fields(const std::string& line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t p = line.find(sep, start);
    if (p == std::string::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, p - start));
    start = p + 1;
  }
}

TsvHeader::TsvHeader(std::vector<std::string> columns, std::string path)
    : columns_(std::move(columns)), path_(std::move(path)) {}

size_t TsvHeader::index(const std::string& name, const std::string& option) const {
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i] == name) return i;
  }
  std::ostringstream os;
  os << "no column `" << name << "`";
  if (!option.empty()) os << " (option " << option << ")";
  os << " in the header; columns:";
  for (const auto& c : columns_) os << " " << c;
  std::string guess = did_you_mean(name, columns_);
  if (!guess.empty()) os << "; did you mean `" << guess << "`?";
  data_error(path_, 1, os.str());
}

}  // namespace gf
