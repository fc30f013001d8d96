// A run's events.jsonl read back as typed records (the reporter writes them), so that tools
// ask for a policy's quantities by name instead of parsing the log themselves.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "growformer/growth.hpp"

namespace gf {

/// One line of events.jsonl: the step it was stamped with and the event as the policy emitted
/// it (a non-finite number, logged as null, reads back as NaN).
struct RunEvent {
  long step = 0;
  Event event;
  /// The number KEY, if the event has one.
  std::optional<double> number(const std::string& key) const;
  /// The string KEY, or "" when the event has none.
  std::string text(const std::string& key) const;
};

/// Every event of PATH in order. RuntimeError "PATH:LINE: ..." on a line that is not an event
/// (not a JSON object, no step or type, a field that is no number, string or list of numbers).
std::vector<RunEvent> read_run_events(const std::string& path);

}  // namespace gf
