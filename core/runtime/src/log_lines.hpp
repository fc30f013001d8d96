// Bounded line reading of the run logs (metrics.jsonl, events.jsonl), shared by their readers
// and by the run directory's rewind: a line over 1 MiB is refused without being read whole.
#pragma once

#include <functional>
#include <string>

namespace gf {

/// The longest line a run log may hold.
constexpr size_t kMaxLogLine = size_t(1) << 20;

/// Calls FN(LINE_NO, LINE) for every line of PATH that is not blank, in order (LINE_NO counts
/// from 1, blank lines included). False when PATH does not exist. RuntimeError naming PATH when
/// it is not a regular file or cannot be read, and "PATH:LINE: a line longer than 1 MiB ..."
/// for an over-long line.
bool for_each_log_line(const std::string& path,
                       const std::function<void(size_t line_no, const std::string& line)>& fn);

}  // namespace gf
