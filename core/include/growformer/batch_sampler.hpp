// Which examples a training step sees, and how they become a padded batch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "growformer/dataset.hpp"
#include "growformer/model.hpp"

namespace gf {

/// Epoch-wise shuffled order of a split of N examples. The indices of a step are a pure
/// function of (seed, step): a resumed run sees exactly the data the uninterrupted run saw.
class BatchSampler {
 public:
  BatchSampler(uint64_t seed, size_t num_examples, size_t batch_size);
  /// The example indices of training step STEP (1-based).
  std::vector<size_t> indices(long step);

 private:
  uint64_t seed_;
  size_t n_, batch_;
  long epoch_ = -1;  // the epoch `perm_` holds
  std::vector<size_t> perm_;
};

/// A padded batch of SPLIT[idx...], each sequence cut to MAX_TOKENS, padded with PAD_ID.
Batch make_batch(const std::vector<Example>& split, const std::vector<size_t>& idx,
                 size_t max_tokens, int32_t pad_id);

/// The rows [first, second) of a batch of N rows that RANK of SIZE processes takes: contiguous,
/// in rank order, sizes differing by at most one.
std::pair<size_t, size_t> shard_range(size_t n, int rank, int size);

/// Rows [BEGIN, END) of WHOLE as a batch of their own, padded to WHOLE's length and marked as a
/// shard of it (Batch::row_offset, Batch::global_rows).
Batch shard_rows(const Batch& whole, size_t begin, size_t end);

/// Consecutive batches [0, B), [B, 2B), ... of a split of N examples (evaluation order).
std::vector<std::vector<size_t>> sequential_batches(size_t num_examples, size_t batch_size,
                                                    long max_batches = 0);

}  // namespace gf
