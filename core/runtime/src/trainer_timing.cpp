// Where the training loop's time went: the structure decisions' cost (console line and
// decision_cost.json) and the per-step timing line of GROWFORMER_DP_TIMING=1 and of runs on
// several processes.
#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "trainer_impl.hpp"

namespace gf {
namespace trainer_detail {

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string decision_cost_line(const PhaseTimes& t) {
  const double spent = t.probe + t.policy + t.twin;
  std::ostringstream o;
  o.precision(3);
  o << "structure decisions: validation probes " << t.probe << " s, policy checks " << t.policy
    << " s";
  if (t.twin > 0) o << ", the twin's training " << t.twin << " s";
  o << ": " << 100.0 * spent / t.train << " % of the training steps' " << t.train << " s\n";
  return o.str();
}

std::string decision_cost_json(const PhaseTimes& t, long from_step) {
  const nlohmann::json j = {{"train_s", t.train},
                            {"probe_s", t.probe},
                            {"check_s", t.policy},
                            {"twin_s", t.twin},
                            {"decision_share", (t.probe + t.policy + t.twin) / t.train},
                            {"from_step", from_step}};
  return j.dump() + "\n";
}

std::string timing_lines(const PhaseTimes& t, long steps, double total_s, double cpu_s,
                         bool per_phase, int processes, const GradientSync& sync) {
  std::ostringstream o;
  o.precision(3);
  if (per_phase)
    o << "timing: " << 1e3 * total_s / steps << " ms wall, " << 1e3 * cpu_s / steps
      << " ms CPU (this process, all threads) per step, validation included; of the wall time: "
      << "training " << 1e3 * t.train / steps << " ms, validation probes " << 1e3 * t.probe / steps
      << " ms, growth and pruning checks " << 1e3 * t.policy / steps << " ms, the twin "
      << 1e3 * t.twin / steps << " ms, validation " << 1e3 * t.validation / steps
      << " ms, checkpoints " << 1e3 * t.checkpoint / steps << " ms\n";
  if (processes == 1) return o.str();
  o << "data-parallel: " << processes << " processes, " << sync.last_elements()
    << " gradient values in " << sync.last_buckets() << " bucket(s) per step; allreduce "
    << 1e3 * sync.seconds() / steps << " ms";
  if (sync.wait_seconds() > 0)
    o << " after waiting " << 1e3 * sync.wait_seconds() / steps << " ms for the slowest process";
  o << ", of " << 1e3 * total_s / steps << " ms per step (rank 0)\n";
  return o.str();
}

}  // namespace trainer_detail
}  // namespace gf
