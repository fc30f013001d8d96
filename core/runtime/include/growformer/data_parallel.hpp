// Data-parallel training: what the processes of one run exchange each step. Every process
// holds the whole model and takes its shard of each global batch; after the backward pass the
// gradients (and head-mask gradients, and the step's loss and accuracy counts) are summed
// across processes, so every process applies the same update.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <vector>

#include "growformer/distributed.hpp"
#include "growformer/module.hpp"
#include "growformer/tensor.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class GradientSync {
 public:
  /// Sums in buckets of at most BUCKET_BYTES (one allreduce each).
  explicit GradientSync(Communicator& comm, size_t bucket_bytes = size_t(4) << 20);

  /// After the backward pass of a shard: every gradient of PARAMS and EXTRA times SCALE
  /// (the shard's share of the global batch, so that the sum is the global batch's mean
  /// gradient) summed across processes, in place. A gradient no process computed stays
  /// undefined; one that some process computed is defined everywhere. SCALARS are summed too.
  /// Every process must pass the same names and shapes in the same order.
  void reduce(NamedParams& params, const std::vector<Var>& extra, double scale,
              std::vector<double>& scalars);

  /// Timing runs (GROWFORMER_DP_TIMING=1): reduce() first waits at a barrier for the slowest
  /// process, timed apart, so that seconds() is the exchange alone and wait_seconds() the
  /// imbalance between processes.
  void set_measure_wait(bool on) { measure_wait_ = on; }
  bool measure_wait() const { return measure_wait_; }
  /// Seconds spent in reduce() so far (packing, communication and unpacking), and calls.
  double seconds() const { return seconds_; }
  double wait_seconds() const { return wait_seconds_; }
  long calls() const { return calls_; }
  /// Elements and buckets of the last reduce().
  size_t last_elements() const { return last_elements_; }
  size_t last_buckets() const { return last_buckets_; }

 private:
  Communicator& comm_;
  size_t bucket_elems_;
  std::vector<float> bucket_;
  std::vector<double> flags_;
  bool measure_wait_ = false;
  double seconds_ = 0, wait_seconds_ = 0;
  long calls_ = 0;
  size_t last_elements_ = 0, last_buckets_ = 0;
};

/// ROWS of a batch (leading dimension) from every process into one tensor of GLOBAL_ROWS rows:
/// this process's LOCAL goes at row OFFSET, the others' at theirs (a sum of zero-padded copies,
/// which is exact). Every process gets the same tensor.
Tensor gather_rows(Communicator& comm, const Tensor& local, size_t offset, size_t global_rows);

/// A 64-bit hash of the parameters' names and shapes, and with VALUES of their bytes too:
/// compared across processes to catch ranks whose models diverged.
uint64_t parameters_hash(const NamedParams& params, bool values);

}  // namespace gf

GROWFORMER_API_END
