// Which examples a training step sees, and how they become a padded batch.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <utility>
#include <vector>

#include "growformer/dataset.hpp"
#include "growformer/model.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// Epoch-wise shuffled order of a split of N examples. The indices of a step are a pure
/// function of (seed, step): a resumed run sees exactly the data the uninterrupted run saw.
///
/// Length bucketing (BUCKET > 0, LENGTHS the examples' padded lengths): each window of
/// BUCKET x BATCH_SIZE consecutive examples of the shuffled epoch is sorted by length (stable),
/// cut into batches, and its whole batches are shuffled among themselves. Every example is still
/// seen once an epoch; a batch then holds examples of similar length, so it pads less.
class BatchSampler {
 public:
  BatchSampler(uint64_t seed, size_t num_examples, size_t batch_size, size_t bucket = 0,
               std::vector<size_t> lengths = {});
  /// The example indices of training step STEP (1-based).
  std::vector<size_t> indices(long step);

 private:
  void bucket_epoch(long epoch);
  uint64_t seed_;
  size_t n_, batch_, bucket_;
  std::vector<size_t> lengths_;
  long epoch_ = -1;  // the epoch `perm_` holds
  std::vector<size_t> perm_;
};

/// LENGTHS[i] = min(MAX_TOKENS, tokens of SPLIT[i]): the lengths a bucketing sampler sorts by.
std::vector<size_t> padded_lengths(const std::vector<Example>& split, size_t max_tokens);

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

GROWFORMER_API_END
