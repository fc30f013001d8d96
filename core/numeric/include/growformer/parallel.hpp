// One thread pool for the whole process. OpenBLAS runs single-threaded; the
// pool splits GEMM rows and batch x head loops, so the two never fight.
#pragma once
#include "growformer/export.hpp"

#include <cstddef>
#include <functional>

GROWFORMER_API_BEGIN

namespace gf {

/// Sets the number of worker threads (0 = hardware concurrency). Call before training.
void set_num_threads(size_t n);
size_t num_threads();

/// Runs fn(i) for i in [0, n), spread over the pool; returns when all are done.
/// Work items must not depend on which thread runs them (results stay deterministic).
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

/// Runs fn(begin, end) over contiguous chunks of [0, n), whole multiples of `grain` items
/// (the last may be shorter), several per thread, handed out in turn: a thread that runs
/// slower (a busy core of a virtual machine) takes fewer.
void parallel_chunks(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);
/// parallel_chunks with one chunk per thread, for work whose chunks each re-read a shared
/// input (column splits of a product).
void parallel_chunks_even(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

/// An elementwise pass fn(begin, end) over [0, n): one call below 65,536 items, else chunks
/// over the pool. Each item is handled by one thread, so the split changes no value.
void parallel_elementwise(size_t n, const std::function<void(size_t, size_t)>& fn);

}  // namespace gf

GROWFORMER_API_END
