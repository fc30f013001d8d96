#include "log_lines.hpp"

#include <sys/stat.h>

#include <fstream>

#include "growformer/errors.hpp"

namespace gf {

bool for_each_log_line(const std::string& path,
                       const std::function<void(size_t line_no, const std::string& line)>& fn) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (!S_ISREG(st.st_mode))
    throw RuntimeError(path + ": the run log is not a regular file; remove or replace it");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError(path + ": cannot read the run log");
  std::string line;
  for (size_t line_no = 1;; ++line_no) {
    line.clear();
    bool got = false;
    for (char c; in.get(c);) {  // bounded: a line over kMaxLogLine is not a log line
      got = true;
      if (c == '\n') break;
      if (line.size() >= kMaxLogLine)
        throw RuntimeError(
            path + ":" + std::to_string(line_no) +
            ": a line longer than 1 MiB: not a growformer log; remove or replace it");
      line.push_back(c);
    }
    if (!got) break;
    if (line.find_first_not_of(" \t\r") != std::string::npos) fn(line_no, line);
  }
  if (in.bad()) throw RuntimeError(path + ": read failed");
  return true;
}

}  // namespace gf
