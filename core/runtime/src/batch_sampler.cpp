#include "growformer/batch_sampler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "growformer/rng.hpp"

namespace gf {

BatchSampler::BatchSampler(uint64_t seed, size_t num_examples, size_t batch_size, size_t bucket,
                           std::vector<size_t> lengths)
    : seed_(seed),
      n_(num_examples),
      batch_(batch_size),
      bucket_(bucket),
      lengths_(std::move(lengths)) {
  if (bucket_ > 0 && lengths_.size() != n_)
    throw std::invalid_argument("length bucketing needs one length per example (" +
                                std::to_string(lengths_.size()) + " for " + std::to_string(n_) +
                                " examples)");
}

void BatchSampler::bucket_epoch(long epoch) {
  const size_t window = bucket_ * batch_;
  for (size_t w = 0; w < n_; w += window) {
    const size_t end = std::min(n_, w + window);
    std::stable_sort(perm_.begin() + static_cast<std::ptrdiff_t>(w),
                     perm_.begin() + static_cast<std::ptrdiff_t>(end),
                     [&](size_t a, size_t b) { return lengths_[a] < lengths_[b]; });
    // shuffle the whole batches of the window (a partial last batch stays last)
    const size_t whole = (end - w) / batch_;
    Rng r(seed_, "data_buckets." + std::to_string(epoch) + "." + std::to_string(w));
    for (size_t j = whole; j > 1; --j) {
      size_t k = r.below(j);
      if (k != j - 1)
        std::swap_ranges(perm_.begin() + static_cast<std::ptrdiff_t>(w + (j - 1) * batch_),
                         perm_.begin() + static_cast<std::ptrdiff_t>(w + j * batch_),
                         perm_.begin() + static_cast<std::ptrdiff_t>(w + k * batch_));
    }
  }
}

std::vector<size_t> padded_lengths(const std::vector<Example>& split, size_t max_tokens) {
  std::vector<size_t> out(split.size());
  for (size_t i = 0; i < split.size(); ++i)
    out[i] = std::max<size_t>(1, std::min(max_tokens, split[i].tokens.size()));
  return out;
}

std::vector<size_t> BatchSampler::indices(long step) {
  std::vector<size_t> idx(batch_);
  for (size_t i = 0; i < batch_; ++i) {
    size_t sample = static_cast<size_t>(step - 1) * batch_ + i;
    long epoch = static_cast<long>(sample / n_);
    if (epoch != epoch_) {
      perm_.resize(n_);
      for (size_t j = 0; j < n_; ++j) perm_[j] = j;
      Rng r(seed_, "data_order." + std::to_string(epoch));
      for (size_t j = n_; j > 1; --j) std::swap(perm_[j - 1], perm_[r.below(j)]);
      if (bucket_ > 0) bucket_epoch(epoch);
      epoch_ = epoch;
    }
    idx[i] = perm_[sample % n_];
  }
  return idx;
}

Batch make_batch(const std::vector<Example>& split, const std::vector<size_t>& idx,
                 size_t max_tokens, int32_t pad_id) {
  Batch b;
  b.batch = idx.size();
  size_t T = 1;
  for (size_t i : idx) T = std::max(T, std::min(max_tokens, split[i].tokens.size()));
  b.seq = T;
  b.ids.assign(b.batch * T, pad_id);
  b.valid.assign(b.batch * T, 0);
  b.labels.resize(b.batch);
  for (size_t r = 0; r < idx.size(); ++r) {
    const Example& e = split[idx[r]];
    size_t n = std::min(T, e.tokens.size());
    for (size_t t = 0; t < n; ++t) {
      b.ids[r * T + t] = e.tokens[t];
      b.valid[r * T + t] = 1;
    }
    if (n == 0) b.valid[r * T] = 1;  // an empty sequence still pools one (pad) position
    b.labels[r] = e.label;
  }
  return b;
}

std::pair<size_t, size_t> shard_range(size_t n, int rank, int size) {
  size_t r = static_cast<size_t>(rank), s = static_cast<size_t>(std::max(1, size));
  size_t base = n / s, extra = n % s;
  size_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

Batch shard_rows(const Batch& whole, size_t begin, size_t end) {
  Batch b;
  size_t T = whole.seq;
  b.batch = end - begin;
  b.seq = T;
  b.ids.assign(whole.ids.begin() + begin * T, whole.ids.begin() + end * T);
  b.valid.assign(whole.valid.begin() + begin * T, whole.valid.begin() + end * T);
  b.labels.assign(whole.labels.begin() + begin, whole.labels.begin() + end);
  b.row_offset = whole.row_offset + begin;
  b.global_rows = whole.global_rows ? whole.global_rows : whole.batch;
  return b;
}

std::vector<std::vector<size_t>> sequential_batches(size_t num_examples, size_t batch_size,
                                                    long max_batches) {
  std::vector<std::vector<size_t>> out;
  for (size_t start = 0; start < num_examples; start += batch_size) {
    if (max_batches > 0 && static_cast<long>(out.size()) >= max_batches) break;
    std::vector<size_t> idx;
    for (size_t i = start; i < std::min(num_examples, start + batch_size); ++i) idx.push_back(i);
    out.push_back(std::move(idx));
  }
  return out;
}

}  // namespace gf
