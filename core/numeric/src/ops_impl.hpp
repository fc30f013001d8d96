// Private to the ops' translation units (core/src/ops_*.cpp): the shared ending of every op
// (the result and its tape entry) and the fixed-order reductions that keep results independent
// of the thread count. Not installed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"

namespace gf {
namespace ops {
namespace detail {

[[noreturn]] inline void shape_error(const char* op, const std::string& msg) {
  throw std::invalid_argument(std::string(op) + ": " + msg);
}

inline size_t last_dim(const Var& x) { return x.shape().empty() ? 1 : x.shape().back(); }

template <class F>
Var finish_with(Var r, F bwd) {
  if (r.requires_grad())
    record([r, bwd]() mutable {
      const Tensor& g = r.grad();
      if (g.defined()) bwd(g, r.value());
    });
  return r;
}

// The shared ending of every op: the result `y` of `inputs` and, when it needs a
// gradient, a tape entry that runs bwd(g, y) with the result's gradient g (skipped when
// no gradient reached the result). Each op is then its maths only.
template <class F>
Var finish(Tensor y, std::initializer_list<const Var*> inputs, F bwd) {
  return finish_with(make_result(std::move(y), inputs), std::move(bwd));
}
/// The same for ops over a list of inputs: `requires` says whether any needs a gradient.
template <class F>
Var finish(Tensor y, bool requires, F bwd) {
  return finish_with(Var(std::move(y), requires && grad_enabled()), std::move(bwd));
}

// Elementwise kernels split into blocks of a fixed size (a multiple of every SIMD width).
inline constexpr size_t kBlock = 1 << 14;
inline size_t fixed_blocks(size_t n) { return (n + kBlock - 1) / kBlock; }

// Column sums over rows in fixed blocks of 256: fn(r0, r1, part) adds rows [r0, r1) into a
// zeroed part (width floats) for each block in parallel; the blocks are then summed in order,
// so the result does not depend on the thread count.
template <class F>
std::vector<float> fixed_row_block_sums(size_t rows, size_t width, F fn) {
  constexpr size_t kRows = 256;
  const size_t nb = (rows + kRows - 1) / kRows;
  std::vector<float> part(nb * width, 0.0f), sum(width, 0.0f);
  parallel_for(nb, [&](size_t c) {
    fn(c * kRows, std::min(rows, (c + 1) * kRows), part.data() + c * width);
  });
  for (size_t c = 0; c < nb; ++c)
    for (size_t j = 0; j < width; ++j) sum[j] += part[c * width + j];
  return sum;
}

// gb[j] += sum over rows of G[r * d + j] (a bias broadcast over the rows of its input), in
// fixed row blocks: the same bits with any thread count.
inline void add_column_sums(const float* G, size_t rows, size_t d, float* gb) {
  const std::vector<float> sum =
      fixed_row_block_sums(rows, d, [&](size_t r0, size_t r1, float* part) {
        for (size_t i = r0; i < r1; ++i)
          for (size_t j = 0; j < d; ++j) part[j] += G[i * d + j];
      });
  for (size_t j = 0; j < d; ++j) gb[j] += sum[j];
}

// v's gradient (+)= term(i) for i < n, elementwise over the pool: a first gradient is written
// as 0 + term (the bits of adding onto zeros) instead of being zero-filled and added to.
template <class F>
void add_grad_terms(Var& v, size_t n, F term) {
  bool fresh = false;
  float* gv = v.grad_buf_for_write(fresh).data();
  const float z = 0.0f;
  parallel_elementwise(n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) gv[i] = (fresh ? z : gv[i]) + term(i);
  });
}

// sum_i term(i) over [0, n) in double: partial sums of fixed blocks (over the pool, four
// chains each), then the blocks in order, so the bits do not depend on the thread count.
template <class F>
double fixed_block_sum(size_t n, F term) {
  std::vector<double> part(fixed_blocks(n), 0.0);
  parallel_for(part.size(), [&](size_t c) {
    const size_t b = c * kBlock, e = std::min(n, b + kBlock);
    double d4[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = b;
    for (; i + 4 <= e; i += 4)
      for (size_t u = 0; u < 4; ++u) d4[u] += term(i + u);
    for (; i < e; ++i) d4[0] += term(i);
    part[c] = (d4[0] + d4[1]) + (d4[2] + d4[3]);
  });
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}

}  // namespace detail
}  // namespace ops
}  // namespace gf
