#include "growformer/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "growformer/blas.hpp"
#include "growformer/kernels.hpp"
#include "growformer/parallel.hpp"
#include "growformer/rng.hpp"
#include "growformer/tensor_xt.hpp"

namespace gf {

namespace ops {

namespace {

[[noreturn]] void shape_error(const char* op, const std::string& msg) {
  throw std::invalid_argument(std::string(op) + ": " + msg);
}

size_t last_dim(const Var& x) { return x.shape().empty() ? 1 : x.shape().back(); }

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
constexpr size_t kBlock = 1 << 14;
size_t fixed_blocks(size_t n) { return (n + kBlock - 1) / kBlock; }

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
void add_column_sums(const float* G, size_t rows, size_t d, float* gb) {
  const std::vector<float> sum = fixed_row_block_sums(rows, d, [&](size_t r0, size_t r1, float* part) {
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

}  // namespace

// ---------------------------------------------------------------------------
namespace {
// dW (in x n) += X^T G and db (n) += column sums of G for X (m x in), G (m x n); either output
// may be null. Columns split over the pool, rows summed in fixed blocks of 64 in order, so a
// column's sums depend neither on the thread count nor on the columns beside it.
void weight_grads(const float* X, size_t m, size_t in, const float* G, size_t n, float* dW,
                  float* db) {
  if (!dW && !db) return;
  constexpr size_t kRows = 64;
  parallel_chunks_even(n, 16, [&](size_t c0, size_t c1) {
    for (size_t r0 = 0; r0 < m; r0 += kRows) {
      const size_t rows = std::min(kRows, m - r0);
      if (dW)
        kernels::gemm_acc_tnd(rows, in, c1 - c0, 1.0f, X + r0 * in, in, G + r0 * n + c0, n,
                              dW + c0, n);
      if (db)
        for (size_t r = r0; r < r0 + rows; ++r)
          for (size_t j = c0; j < c1; ++j) db[j] += G[r * n + j];
    }
  });
}

// dX (m x in) (+)= G (m x n) W^T for W (in x n), W transposed once, rows split over the pool in
// blocks of 64: a fresh gradient is written (the same FMA chains), not zeroed and added to.
void add_input_grad(Var& x, const float* G, size_t m, size_t in, size_t n, const float* W) {
  std::vector<float> WT(n * in);
  // rows of W^T over the pool (a serial transpose was 2 % of a d 512 step)
  parallel_chunks(n, 16, [&](size_t j0, size_t j1) {
    for (size_t r = 0; r < in; ++r)
      for (size_t j = j0; j < j1; ++j) WT[j * in + r] = W[r * n + j];
  });
  bool fresh = false;
  float* gx = x.grad_buf_for_write(fresh).data();
  parallel_chunks(m, 64, [&](size_t r0, size_t r1) {
    if (fresh)
      kernels::gemm_short_k(r1 - r0, in, n, 1.0f, G + r0 * n, n, WT.data(), in, gx + r0 * in, in);
    else
      kernels::gemm_acc_nd(r1 - r0, n, in, 1.0f, G + r0 * n, n, WT.data(), in, gx + r0 * in, in);
  });
}
}  // namespace

Var linear(const Var& x, const Var& w, const Var* bias) {
  if (w.shape().size() != 2)
    shape_error("linear", "weight must be 2-D, got " + shape_str(w.shape()));
  size_t in = w.dim(0), out = w.dim(1);
  if (last_dim(x) != in)
    shape_error("linear", "input " + shape_str(x.shape()) + " vs weight " + shape_str(w.shape()));
  size_t m = x.size() / in;
  Shape os = x.shape();
  os.back() = out;
  Tensor y = Tensor::empty(os);
  // Forward in registers (each element one FMA chain over `in`, bias added last): at the
  // model widths (in, out <= 256, k = 64) this runs at 1.4-2.5x OpenBLAS, which packs both
  // operands for a short inner dimension; rows split over the pool in blocks of 64.
  const float* X = x.value().data();
  const float* W = w.value().data();
  const float* bp = bias ? bias->value().data() : nullptr;
  parallel_chunks(m, 64, [&](size_t r0, size_t r1) {
    kernels::gemm_bias(r1 - r0, out, in, X + r0 * in, in, W, out, bp, y.data() + r0 * out, out);
  });
  // Backward in registers too (measured at 16384 rows, one core: dW 1.1-2x and dX 1-1.5x
  // OpenBLAS at these widths). dX += G W^T with rows split over the pool; dW += X^T G and
  // db in fixed blocks of 64 rows, in order, with the columns split over the pool: every
  // element's sums are the same whatever the thread count.
  auto grad_fn = [xx = x, ww = w, bb = bias ? *bias : Var(), m, in, out](const Tensor& g,
                                                                         const Tensor&) mutable {
    const float* G = g.data();
    if (xx.requires_grad()) add_input_grad(xx, G, m, in, out, ww.value().data());
    float* gw = ww.requires_grad() ? ww.grad_buf().data() : nullptr;
    float* gb = bb.defined() && bb.requires_grad() ? bb.grad_buf().data() : nullptr;
    weight_grads(xx.value().data(), m, in, G, out, gw, gb);
  };
  return finish(std::move(y), {&x, &w, bias}, grad_fn);
}

namespace {
// The parts' columns side by side: part i's are off[i] .. off[i + 1] - 1 of off.back(); a shape
// error when a weight does not take X's width or a bias does not fit its weight.
std::vector<size_t> part_columns(const Var& x, const std::vector<Var>& w, const std::vector<Var>& b) {
  const size_t in = last_dim(x), parts = w.size();
  if (!b.empty() && b.size() != parts)
    shape_error("linear_parts", std::to_string(parts) + " weights but " + std::to_string(b.size()) +
                                    " biases");
  std::vector<size_t> off(parts + 1, 0);
  for (size_t i = 0; i < parts; ++i) {
    if (w[i].shape().size() != 2 || w[i].dim(0) != in)
      shape_error("linear_parts", "input " + shape_str(x.shape()) + " vs weight " +
                                      shape_str(w[i].shape()));
    if (!b.empty() && b[i].size() != w[i].dim(1))
      shape_error("linear_parts", "bias " + shape_str(b[i].shape()) + " for weight " +
                                      shape_str(w[i].shape()));
    off[i + 1] = off[i] + w[i].dim(1);
  }
  return off;
}

// The gradients of OUTS side by side (m x N, the columns of OFF; every element written, an
// absent gradient as zeros), rows split over the pool.
std::unique_ptr<float[]> joined_grads(const std::vector<Var>& outs, const std::vector<size_t>& off,
                                      size_t m, size_t N) {
  std::unique_ptr<float[]> Gbuf(new float[m * N]);
  float* const G = Gbuf.get();
  parallel_chunks(m, 256, [&](size_t r0, size_t r1) {
    for (size_t i = 0; i < outs.size(); ++i) {
      const size_t ni = off[i + 1] - off[i], o = off[i];
      const Tensor& gi = outs[i].grad();
      for (size_t r = r0; r < r1; ++r) {
        if (gi.defined())
          std::memcpy(G + r * N + o, gi.data() + r * ni, ni * sizeof(float));
        else
          std::memset(G + r * N + o, 0, ni * sizeof(float));
      }
    }
  });
  return Gbuf;
}

// dW_i += X^T G_i and db_i += the column sums of G_i for the parts whose weights or biases need
// them, from the joined gradient G (m x N): the columns split over the pool, rows summed in fixed
// blocks in order, so a column's sums do not depend on the columns beside it.
void add_part_param_grads(const Var& x, std::vector<Var>& w, std::vector<Var>& b, const float* G,
                          const std::vector<size_t>& off, size_t m, size_t in, size_t N) {
  const size_t parts = w.size();
  bool wgrad = false, bgrad = false;
  for (size_t i = 0; i < parts; ++i) {
    wgrad = wgrad || w[i].requires_grad();
    bgrad = bgrad || (!b.empty() && b[i].requires_grad());
  }
  if (!wgrad && !bgrad) return;
  std::vector<float> dW(wgrad ? in * N : 0, 0.0f), db(bgrad ? N : 0, 0.0f);
  weight_grads(x.value().data(), m, in, G, N, wgrad ? dW.data() : nullptr,
               bgrad ? db.data() : nullptr);
  for (size_t i = 0; i < parts; ++i) {
    const size_t ni = off[i + 1] - off[i], o = off[i];
    if (w[i].requires_grad()) {
      float* gw = w[i].grad_buf().data();
      for (size_t r = 0; r < in; ++r)
        for (size_t j = 0; j < ni; ++j) gw[r * ni + j] += dW[r * N + o + j];
    }
    if (!b.empty() && b[i].requires_grad()) {
      float* gb = b[i].grad_buf().data();
      for (size_t j = 0; j < ni; ++j) gb[j] += db[o + j];
    }
  }
}
}  // namespace

std::vector<Var> linear_parts(const Var& x, const std::vector<Var>& w, const std::vector<Var>& b) {
  const size_t in = last_dim(x), m = x.size() / in, parts = w.size();
  auto off = std::make_shared<std::vector<size_t>>(part_columns(x, w, b));
  const size_t N = off->back();
  // the weights side by side (in x N) and the biases
  auto W = std::make_shared<std::vector<float>>(in * N);
  std::vector<float> bias(b.empty() ? 0 : N);
  for (size_t i = 0; i < parts; ++i) {
    const size_t ni = w[i].dim(1), o = (*off)[i];
    for (size_t r = 0; r < in; ++r)
      std::memcpy(W->data() + r * N + o, w[i].value().data() + r * ni, ni * sizeof(float));
    if (!b.empty()) std::memcpy(bias.data() + o, b[i].value().data(), ni * sizeof(float));
  }
  bool requires = x.requires_grad();
  for (size_t i = 0; i < parts; ++i)
    requires = requires || w[i].requires_grad() || (!b.empty() && b[i].requires_grad());
  requires = requires && grad_enabled();
  std::vector<Var> outs;
  outs.reserve(parts);
  for (size_t i = 0; i < parts; ++i) {
    Shape os = x.shape();
    os.back() = w[i].dim(1);
    outs.emplace_back(Tensor::empty(os), requires);
  }
  // One product, each part's columns stored straight into its own output (no copy of the
  // product); rows split over the pool in blocks of 64.
  const float* X = x.value().data();
  const float* bp = b.empty() ? nullptr : bias.data();
  parallel_chunks(m, 64, [&](size_t r0, size_t r1) {
    std::vector<float*> dst(parts);
    for (size_t i = 0; i < parts; ++i)
      dst[i] = outs[i].value().data() + r0 * ((*off)[i + 1] - (*off)[i]);
    kernels::gemm_bias_parts(r1 - r0, N, in, X + r0 * in, in, W->data(), N, bp, off->data(),
                             parts, dst.data());
  });
  if (!requires) return outs;
  // Backward: dX += G W^T and the parameters' gradients from the outputs' gradients side by side.
  record([x = Var(x), w = std::vector<Var>(w), b = std::vector<Var>(b), outs, off, W, m, in,
          N]() mutable {
    bool any = false;
    for (const Var& o : outs) any = any || o.grad().defined();
    if (!any) return;
    const std::unique_ptr<float[]> G = joined_grads(outs, *off, m, N);
    if (x.requires_grad()) add_input_grad(x, G.get(), m, in, N, W->data());
    add_part_param_grads(x, w, b, G.get(), *off, m, in, N);
  });
  return outs;
}

namespace {
// The inputs' rows stacked: part i's are koff[i] .. koff[i + 1] - 1 of koff.back() (the width of
// its input and the rows of its weight); a shape error when a part does not fit N outputs, M
// rows or the bias.
std::vector<size_t> stacked_rows(const std::vector<Var>& x, const std::vector<Var>& w,
                                 const Var* bias, size_t n, size_t m) {
  const size_t parts = x.size();
  std::vector<size_t> koff(parts + 1, 0);
  for (size_t i = 0; i < parts; ++i) {
    if (w[i].shape().size() != 2 || w[i].dim(1) != n || last_dim(x[i]) != w[i].dim(0) ||
        x[i].size() / last_dim(x[i]) != m)
      shape_error("linear_sum", "input " + shape_str(x[i].shape()) + " vs weight " +
                                    shape_str(w[i].shape()) + " (part " + std::to_string(i) + ")");
    koff[i + 1] = koff[i] + w[i].dim(0);
  }
  if (bias && bias->size() != n)
    shape_error("linear_sum", "bias " + shape_str(bias->shape()) + " for " + std::to_string(n) +
                                  " outputs");
  return koff;
}

// dX_i (+)= G W_i^T for the inputs that need it, W (K x n) the weights stacked at KOFF: one
// product per block of 64 rows over all parts (each element one FMA chain over n, as
// ops::linear's), stored into fresh gradients or added to earlier ones.
void add_part_input_grads(std::vector<Var>& xs, const float* G, const std::vector<float>& W,
                          const std::vector<size_t>& koff, size_t m, size_t n, size_t K) {
  const size_t parts = xs.size();
  std::vector<float> WT(n * K);
  for (size_t r = 0; r < K; ++r)
    for (size_t j = 0; j < n; ++j) WT[j * K + r] = W[r * n + j];
  std::vector<float*> gx(parts, nullptr);
  std::vector<char> fresh(parts, 0);
  for (size_t i = 0; i < parts; ++i)
    if (xs[i].requires_grad()) {
      bool f = false;
      gx[i] = xs[i].grad_buf_for_write(f).data();
      fresh[i] = f;
    }
  constexpr size_t kRows = 64;
  parallel_chunks(m, kRows, [&](size_t r0, size_t r1) {
    thread_local std::vector<float> D;
    if (D.size() < kRows * K) D.resize(kRows * K);
    for (size_t s0 = r0; s0 < r1; s0 += kRows) {
      const size_t rows = std::min(kRows, r1 - s0);
      kernels::gemm_short_k(rows, K, n, 1.0f, G + s0 * n, n, WT.data(), K, D.data(), K);
      for (size_t i = 0; i < parts; ++i) {
        if (!gx[i]) continue;
        const size_t ki = koff[i + 1] - koff[i];
        for (size_t r = 0; r < rows; ++r) {
          float* dst = gx[i] + (s0 + r) * ki;
          const float* src = D.data() + r * K + koff[i];
          if (fresh[i])
            std::memcpy(dst, src, ki * sizeof(float));
          else
            for (size_t c = 0; c < ki; ++c) dst[c] += src[c];
        }
      }
    }
  });
}
}  // namespace

Var linear_sum(const std::vector<Var>& x, const std::vector<Var>& w, const Var* bias) {
  const size_t parts = x.size();
  if (parts == 0 || w.size() != parts)
    shape_error("linear_sum", std::to_string(parts) + " inputs but " + std::to_string(w.size()) +
                                  " weights");
  const size_t n = w[0].shape().size() == 2 ? w[0].dim(1) : 0;
  const size_t m = x[0].size() / std::max<size_t>(1, last_dim(x[0]));
  const std::vector<size_t> koff = stacked_rows(x, w, bias, n, m);
  const size_t K = koff.back();
  // the weights stacked (K x n): part i's rows koff[i] .. koff[i + 1] - 1
  auto W = std::make_shared<std::vector<float>>(K * n);
  for (size_t i = 0; i < parts; ++i)
    std::memcpy(W->data() + koff[i] * n, w[i].value().data(), w[i].size() * sizeof(float));
  Shape os = x[0].shape();
  os.back() = n;
  Tensor y = Tensor::empty(os);
  // Blocks of 64 rows: the inputs side by side in a per-thread buffer (L1-sized at these
  // widths), then one product with the stacked weights, + bias last.
  constexpr size_t kRows = 64;
  const float* bp = bias ? bias->value().data() : nullptr;
  parallel_chunks(m, kRows, [&](size_t r0, size_t r1) {
    thread_local std::vector<float> X;
    if (X.size() < kRows * K) X.resize(kRows * K);
    for (size_t s0 = r0; s0 < r1; s0 += kRows) {
      const size_t rows = std::min(kRows, r1 - s0);
      for (size_t i = 0; i < parts; ++i) {
        const size_t ki = koff[i + 1] - koff[i];
        const float* xi = x[i].value().data() + s0 * ki;
        for (size_t r = 0; r < rows; ++r)
          std::memcpy(X.data() + r * K + koff[i], xi + r * ki, ki * sizeof(float));
      }
      kernels::gemm_bias(rows, n, K, X.data(), K, W->data(), n, bp, y.data() + s0 * n, n);
    }
  });
  bool requires = bias && bias->requires_grad();
  for (size_t i = 0; i < parts; ++i) requires = requires || x[i].requires_grad() || w[i].requires_grad();
  auto grad_fn = [xs = std::vector<Var>(x), ws = std::vector<Var>(w), bb = bias ? *bias : Var(),
                  koff, W, m, n, K](const Tensor& g, const Tensor&) mutable {
    const float* G = g.data();
    bool any_x = false;
    for (const Var& v : xs) any_x = any_x || v.requires_grad();
    if (any_x) add_part_input_grads(xs, G, *W, koff, m, n, K);
    // dW_i = X_i^T G, each weight from its own input alone (fixed row blocks, weight_grads)
    for (size_t i = 0; i < xs.size(); ++i)
      if (ws[i].requires_grad())
        weight_grads(xs[i].value().data(), m, koff[i + 1] - koff[i], G, n,
                     ws[i].grad_buf().data(), nullptr);
    // d bias: column sums in fixed row blocks, as ops::add's broadcast bias
    if (bb.defined() && bb.requires_grad()) add_column_sums(G, m, n, bb.grad_buf().data());
  };
  return finish(std::move(y), requires, grad_fn);
}

Var matmul(const Var& a, const Var& b, bool ta, bool tb) {
  if (a.shape().size() < 2 || b.shape().size() < 2) shape_error("matmul", "inputs must be >= 2-D");
  size_t ar = a.shape().size(), br = b.shape().size();
  size_t am = a.shape()[ar - 2], ak = a.shape()[ar - 1];
  size_t bk = b.shape()[br - 2], bn = b.shape()[br - 1];
  size_t m = ta ? ak : am, k = ta ? am : ak;
  size_t k2 = tb ? bn : bk, n = tb ? bk : bn;
  if (k != k2)
    shape_error("matmul", shape_str(a.shape()) + " x " + shape_str(b.shape()) + " inner mismatch");
  size_t batch = a.size() / (am * ak);
  size_t bbatch = b.size() / (bk * bn);
  if (bbatch != batch && bbatch != 1)
    shape_error("matmul", "batch mismatch " + shape_str(a.shape()) + " x " + shape_str(b.shape()));
  Shape os(a.shape().begin(), a.shape().end() - 2);
  os.push_back(m);
  os.push_back(n);
  Tensor y = Tensor::empty(os);
  size_t sa = am * ak, sb = bbatch == 1 ? 0 : bk * bn;
  const float* A = a.value().data();
  const float* B = b.value().data();
  float* Y = y.data();
  parallel_for(batch, [&](size_t i) {
    sgemm(ta, tb, m, n, k, 1.0f, A + i * sa, ak, B + i * sb, bn, 0.0f, Y + i * m * n, n);
  });
  auto grad_fn = [aa = a, bb = b, ta, tb, m, n, k, ak, bn, batch, sa, sb](const Tensor& g,
                                                                          const Tensor&) mutable {
    const float* G = g.data();
    if (aa.requires_grad()) {
      float* GA = aa.grad_buf().data();
      const float* B = bb.value().data();
      parallel_for(batch, [&](size_t i) {
        // dA = G op(B)^T  (or its transpose when ta)
        if (!ta)
          sgemm(false, !tb, m, k, n, 1.0f, G + i * m * n, n, B + i * sb, bn, 1.0f, GA + i * sa, ak);
        else
          sgemm(tb, true, k, m, n, 1.0f, B + i * sb, bn, G + i * m * n, n, 1.0f, GA + i * sa, ak);
      });
    }
    if (bb.requires_grad()) {
      float* GB = bb.grad_buf().data();
      const float* A = aa.value().data();
      // a shared 2-D b accumulates over the batch: serial for determinism
      auto one = [&](size_t i) {
        if (!tb)
          sgemm(!ta, false, k, n, m, 1.0f, A + i * sa, ak, G + i * m * n, n, 1.0f, GB + i * sb, bn);
        else
          sgemm(true, ta, n, k, m, 1.0f, G + i * m * n, n, A + i * sa, ak, 1.0f, GB + i * sb, bn);
      };
      if (sb == 0)
        for (size_t i = 0; i < batch; ++i) one(i);
      else
        parallel_for(batch, one);
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

// ---------------------------------------------------------------------------
Var add(const Var& a, const Var& b) {
  bool same = a.size() == b.size();
  size_t d = b.size();
  if (!same && (a.size() % d != 0 || last_dim(a) != d))
    shape_error("add", shape_str(a.shape()) + " + " + shape_str(b.shape()));
  Tensor y = Tensor::empty(a.shape());
  const float* A = a.value().data();
  const float* Bv = b.value().data();
  float* Y = y.data();
  if (same) {
    parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) Y[i] = A[i] + Bv[i];
    });
  } else {  // b over the rows of a
    parallel_chunks(a.size() / d, 256, [&](size_t r0, size_t r1) {
      for (size_t i = r0; i < r1; ++i)
        for (size_t j = 0; j < d; ++j) Y[i * d + j] = A[i * d + j] + Bv[j];
    });
  }
  auto grad_fn = [aa = a, bb = b, same, d](const Tensor& g, const Tensor&) mutable {
    if (aa.requires_grad()) aa.add_grad(g);
    if (bb.requires_grad()) {
      if (same) {
        bb.add_grad(g);
      } else {
        add_column_sums(g.data(), g.size() / d, d, bb.grad_buf().data());
      }
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

Var sub(const Var& a, const Var& b) {
  if (a.size() != b.size()) shape_error("sub", shape_str(a.shape()) + " - " + shape_str(b.shape()));
  Tensor y = a.value().clone();
  auto yx = xflat(y);
  yx -= xflat(b.value());
  auto grad_fn = [aa = a, bb = b](const Tensor& g, const Tensor&) mutable {
    if (aa.requires_grad()) aa.add_grad(g);
    if (bb.requires_grad()) {
      auto gb = xflat(bb.grad_buf());
      gb -= xflat(g);
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

Var mul(const Var& a, const Var& b) {
  bool scalar = b.size() == 1 && a.size() != 1;
  if (!scalar && a.size() != b.size())
    shape_error("mul", shape_str(a.shape()) + " * " + shape_str(b.shape()));
  Tensor y = Tensor::empty(a.shape());
  if (scalar) {
    const float s = b.value()[0];
    const float* A = a.value().data();
    float* Y = y.data();
    parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) Y[i] = A[i] * s;
    });
  } else {
    const float* A = a.value().data();
    const float* Bv = b.value().data();
    float* Y = y.data();
    parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) Y[i] = A[i] * Bv[i];
    });
  }
  auto grad_fn = [aa = a, bb = b, scalar](const Tensor& g, const Tensor&) mutable {
    size_t n = g.size();
    if (scalar) {
      const float s = bb.value()[0];
      if (aa.requires_grad()) {
        float* ga = aa.grad_buf().data();
        const float* G = g.data();
        parallel_elementwise(n, [&](size_t lo, size_t hi) {
          for (size_t i = lo; i < hi; ++i) ga[i] += G[i] * s;
        });
      }
      if (bb.requires_grad()) {
        const float* G = g.data();
        const float* A = aa.value().data();
        bb.grad_buf()[0] += static_cast<float>(
            fixed_block_sum(n, [&](size_t i) { return static_cast<double>(G[i]) * A[i]; }));
      }
      return;
    }
    const float* G = g.data();
    if (aa.requires_grad()) {
      float* ga = aa.grad_buf().data();
      const float* Bv = bb.value().data();
      parallel_elementwise(n, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) ga[i] += G[i] * Bv[i];
      });
    }
    if (bb.requires_grad()) {
      float* gb = bb.grad_buf().data();
      const float* A = aa.value().data();
      parallel_elementwise(n, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) gb[i] += G[i] * A[i];
      });
    }
  };
  return finish(std::move(y), {&a, &b}, grad_fn);
}

Var lerp(const Var& a, const Var& b, const Var& t) {
  if (a.size() != b.size())
    shape_error("lerp", shape_str(a.shape()) + " vs " + shape_str(b.shape()));
  if (t.size() != 1) shape_error("lerp", "t must be a scalar, got " + shape_str(t.shape()));
  Tensor y = Tensor::empty(a.shape());
  const float s = t.value()[0];
  const float* A = a.value().data();
  const float* Bv = b.value().data();
  float* Y = y.data();
  parallel_elementwise(y.size(), [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) Y[i] = A[i] + (Bv[i] - A[i]) * s;
  });
  auto grad_fn = [aa = a, bb = b, tt = t](const Tensor& g, const Tensor&) mutable {
    const size_t n = g.size();
    const float s = tt.value()[0];
    const float* G = g.data();
    if (aa.requires_grad()) add_grad_terms(aa, n, [&](size_t i) { return G[i] - G[i] * s; });
    if (bb.requires_grad()) add_grad_terms(bb, n, [&](size_t i) { return G[i] * s; });
    if (tt.requires_grad()) {
      const float* A = aa.value().data();
      const float* Bv = bb.value().data();
      tt.grad_buf()[0] += static_cast<float>(fixed_block_sum(
          n, [&](size_t i) { return static_cast<double>(G[i]) * (Bv[i] - A[i]); }));
    }
  };
  return finish(std::move(y), {&a, &b, &t}, grad_fn);
}

namespace {
// y = f(x) elementwise with dy/dx = df(x, y).
template <class F, class DF>
Var unary(const Var& x, F f, DF df) {
  Tensor y = Tensor::empty(x.shape());
  const float* X = x.value().data();
  float* Y = y.data();
  size_t n = x.size();
  parallel_elementwise(n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) Y[i] = f(X[i]);
  });
  auto grad_fn = [xx = x, df, n](const Tensor& g, const Tensor& res) mutable {
    const float* X = xx.value().data();
    const float* Y = res.data();
    const float* G = g.data();
    add_grad_terms(xx, n, [&](size_t i) { return G[i] * df(X[i], Y[i]); });
  };
  return finish(std::move(y), {&x}, grad_fn);
}
}  // namespace

Var scale(const Var& a, float s) {
  return unary(
      a, [s](float x) { return x * s; }, [s](float, float) { return s; });
}

Var add_scalar(const Var& a, float s) {
  return unary(
      a, [s](float x) { return x + s; }, [](float, float) { return 1.0f; });
}

Var gelu(const Var& x) {
  Tensor y = Tensor::empty(x.shape());
  size_t n = x.size();
  const float* X = x.value().data();
  // fixed 16 Ki blocks: which elements take the vector path never depends on the thread count
  parallel_for(fixed_blocks(n), [&](size_t c) {
    size_t b = c * kBlock, e = std::min(n, b + kBlock);
    kernels::gelu(X + b, y.data() + b, e - b);
  });
  auto grad_fn = [xx = x, n](const Tensor& g, const Tensor&) mutable {
    bool fresh = false;
    float* gx = xx.grad_buf_for_write(fresh).data();  // written, not zeroed, when fresh
    const float* X = xx.value().data();
    parallel_for(fixed_blocks(n), [&](size_t c) {
      size_t b = c * kBlock, e = std::min(n, b + kBlock);
      kernels::gelu_grad(X + b, g.data() + b, gx + b, e - b, !fresh);
    });
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var sigmoid(const Var& x) {
  return unary(
      x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); },
      [](float, float y) { return y * (1.0f - y); });
}

Var relu(const Var& x) {
  return unary(
      x, [](float v) { return v > 0.0f ? v : 0.0f; },
      [](float v, float) { return v > 0.0f ? 1.0f : 0.0f; });
}

Var tanh(const Var& x) {
  return unary(
      x, [](float v) { return std::tanh(v); }, [](float, float y) { return 1.0f - y * y; });
}

Var dropout(const Var& x, float p, Rng& rng) { return dropout(x, p, rng, 0, 0); }

Var dropout(const Var& x, float p, Rng& rng, size_t rows_before, size_t rows_after) {
  if (p <= 0.0f) return x;
  if (p >= 1.0f) throw std::invalid_argument("dropout: p must be < 1");
  Tensor mask = Tensor::empty(x.shape());
  size_t per_row = x.shape().empty() || x.dim(0) == 0 ? 0 : x.size() / x.dim(0);
  float keep = 1.0f / (1.0f - p);
  rng.discard(static_cast<uint64_t>(rows_before) * per_row);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = rng.uniform() < p ? 0.0f : keep;
  rng.discard(static_cast<uint64_t>(rows_after) * per_row);
  return mul(x, constant(mask));
}

// ---------------------------------------------------------------------------
Var sum(const Var& x) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x.value()[i];
  auto grad_fn = [xx = x](const Tensor& g, const Tensor&) mutable {
    float g0 = g[0];
    float* gx = xx.grad_buf().data();
    for (size_t i = 0; i < xx.size(); ++i) gx[i] += g0;
  };
  return finish(Tensor::scalar(static_cast<float>(s)), {&x}, grad_fn);
}

Var mean(const Var& x) { return scale(sum(x), 1.0f / static_cast<float>(x.size())); }

Var softmax(const Var& x) {
  size_t d = last_dim(x), rows = x.size() / d;
  Tensor y = x.value().clone();
  parallel_chunks(rows, 64, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) kernels::softmax_row(y.data() + i * d, d, nullptr);
  });
  auto grad_fn = [xx = x, d, rows](const Tensor& g, const Tensor& res) mutable {
    float* gx = xx.grad_buf().data();
    const float* Y = res.data();
    for (size_t i = 0; i < rows; ++i) {
      double dot = 0;
      for (size_t j = 0; j < d; ++j) dot += static_cast<double>(g[i * d + j]) * Y[i * d + j];
      for (size_t j = 0; j < d; ++j)
        gx[i * d + j] += Y[i * d + j] * (g[i * d + j] - static_cast<float>(dot));
    }
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, float eps) {
  size_t d = last_dim(x), rows = x.size() / d;
  if (gamma.size() != d || beta.size() != d) shape_error("layer_norm", "gamma/beta size");
  Tensor y = Tensor::empty(x.shape());
  Tensor stats = Tensor::empty({rows, 2});  // mean, rstd
  const float* X = x.value().data();
  const float* G = gamma.value().data();
  const float* Bt = beta.value().data();
  parallel_chunks(rows, 256, [&](size_t b, size_t e) {
    kernels::layer_norm_rows(X + b * d, e - b, d, G, Bt, eps, y.data() + b * d,
                             stats.data() + 2 * b);
  });
  auto grad_fn = [xx = x, gg = gamma, bb = beta, stats, d, rows](const Tensor& g,
                                                                 const Tensor&) mutable {
    const float* X = xx.value().data();
    const float* G = gg.value().data();
    if (xx.requires_grad()) {
      float* gx = xx.grad_buf().data();
      parallel_chunks(rows, 256, [&](size_t b, size_t e) {
        kernels::layer_norm_grad_rows(X + b * d, g.data() + b * d, stats.data() + 2 * b, e - b, d,
                                      G, gx + b * d);
      });
    }
    float* ggam = gg.requires_grad() ? gg.grad_buf().data() : nullptr;
    float* gbet = bb.requires_grad() ? bb.grad_buf().data() : nullptr;
    if (ggam || gbet) {  // fixed blocks of rows: the sums do not depend on the split
      const float* Gr = g.data();
      const float* st = stats.data();
      const std::vector<float> sum =
          fixed_row_block_sums(rows, 2 * d, [&](size_t r0, size_t r1, float* part) {
            kernels::layer_norm_param_grad(X + r0 * d, Gr + r0 * d, st + 2 * r0, r1 - r0, d,
                                           ggam ? part : nullptr, gbet ? part + d : nullptr);
          });
      for (size_t j = 0; j < d; ++j) {
        if (ggam) ggam[j] += sum[j];
        if (gbet) gbet[j] += sum[d + j];
      }
    }
  };
  return finish(std::move(y), {&x, &gamma, &beta}, grad_fn);
}

// ---------------------------------------------------------------------------
Var embedding(const std::vector<int32_t>& ids, size_t batch, size_t seq, const Var& table) {
  if (ids.size() != batch * seq) shape_error("embedding", "ids size != batch * seq");
  size_t vocab = table.dim(0), d = table.dim(1);
  Tensor y = Tensor::empty({batch, seq, d});
  const float* W = table.value().data();
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= vocab)
      shape_error("embedding", "token id " + std::to_string(id) + " outside the vocabulary of " +
                                   std::to_string(vocab));
    std::memcpy(y.data() + i * d, W + static_cast<size_t>(id) * d, d * sizeof(float));
  }
  auto grad_fn = [tt = table, idv = std::make_shared<std::vector<int32_t>>(ids), d](
                     const Tensor& g, const Tensor&) mutable {
    float* gw = tt.grad_buf().data();
    for (size_t i = 0; i < idv->size(); ++i) {
      float* row = gw + static_cast<size_t>((*idv)[i]) * d;
      for (size_t j = 0; j < d; ++j) row[j] += g[i * d + j];
    }
  };
  return finish(std::move(y), {&table}, grad_fn);
}

Var add_positions(const Var& x, const Var& pos) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (pos.dim(0) < T || pos.dim(1) != d)
    shape_error("add_positions", "sequence of " + std::to_string(T) + " positions but only " +
                                     std::to_string(pos.dim(0)) + " learned (model.max_len)");
  Tensor y = x.value().clone();
  const float* P = pos.value().data();
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < T * d; ++i) y[b * T * d + i] += P[i];
  auto grad_fn = [xx = x, pp = pos, B, T, d](const Tensor& g, const Tensor&) mutable {
    if (xx.requires_grad()) xx.add_grad(g);
    if (pp.requires_grad()) {
      float* gp = pp.grad_buf().data();
      for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < T * d; ++i) gp[i] += g[b * T * d + i];
    }
  };
  return finish(std::move(y), {&x, &pos}, grad_fn);
}

Var prepend(const Var& x, const Var& v) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (v.size() != d) shape_error("prepend", "vector size != d");
  Tensor y = Tensor::empty({B, T + 1, d});
  for (size_t b = 0; b < B; ++b) {
    std::memcpy(y.data() + b * (T + 1) * d, v.value().data(), d * 4);
    std::memcpy(y.data() + b * (T + 1) * d + d, x.value().data() + b * T * d, T * d * 4);
  }
  auto grad_fn = [xx = x, vv = v, B, T, d](const Tensor& g, const Tensor&) mutable {
    for (size_t b = 0; b < B; ++b) {
      const float* gb = g.data() + b * (T + 1) * d;
      if (vv.requires_grad())
        for (size_t j = 0; j < d; ++j) vv.grad_buf()[j] += gb[j];
      if (xx.requires_grad()) {
        float* gx = xx.grad_buf().data() + b * T * d;
        for (size_t i = 0; i < T * d; ++i) gx[i] += gb[d + i];
      }
    }
  };
  return finish(std::move(y), {&x, &v}, grad_fn);
}

Var masked_mean_pool(const Var& x, const std::vector<uint8_t>& mask) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (!mask.empty() && mask.size() != B * T) shape_error("masked_mean_pool", "mask size");
  Tensor y(Shape{B, d}, 0.0f);
  std::vector<float> inv(B);
  for (size_t b = 0; b < B; ++b) {
    size_t cnt = 0;
    for (size_t t = 0; t < T; ++t) {
      if (!mask.empty() && !mask[b * T + t]) continue;
      cnt++;
      const float* xr = x.value().data() + (b * T + t) * d;
      for (size_t j = 0; j < d; ++j) y[b * d + j] += xr[j];
    }
    inv[b] = cnt ? 1.0f / cnt : 0.0f;
    for (size_t j = 0; j < d; ++j) y[b * d + j] *= inv[b];
  }
  auto grad_fn = [xx = x, m = std::make_shared<std::vector<uint8_t>>(mask), inv, B, T, d](
                     const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T; ++t) {
        if (!m->empty() && !(*m)[b * T + t]) continue;
        for (size_t j = 0; j < d; ++j) gx[(b * T + t) * d + j] += g[b * d + j] * inv[b];
      }
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var select_position(const Var& x, size_t t) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (t >= T) shape_error("select_position", "position out of range");
  Tensor y = Tensor::empty({B, d});
  for (size_t b = 0; b < B; ++b)
    std::memcpy(y.data() + b * d, x.value().data() + (b * T + t) * d, d * 4);
  auto grad_fn = [xx = x, B, T, d, t](const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t b = 0; b < B; ++b)
      for (size_t j = 0; j < d; ++j) gx[(b * T + t) * d + j] += g[b * d + j];
  };
  return finish(std::move(y), {&x}, grad_fn);
}

namespace {
// The taps of a causal depthwise convolution of width K and stride STRIDE over T input rows
// (To output rows): tap j of output row `to` reads input row to * stride - (K - 1) + j.
struct CausalTaps {
  size_t K, stride, T, To;
  // The output rows [lo, hi) whose tap j falls inside the input; the first reads input row in0.
  struct Span {
    size_t lo, hi, in0;
  };
  Span span(size_t j) const {
    const size_t back = K - 1 - j;
    Span sp{(back + stride - 1) / stride, T ? std::min(To, (T - 1 + back) / stride + 1) : 0, 0};
    if (sp.lo > sp.hi) sp.lo = sp.hi;
    sp.in0 = sp.lo * stride - back;
    return sp;
  }
};

// One sample's output Y (To x C) from its input X (T x C), WT the weights as (K, C): the bias
// (or zeros) in every row, then the taps in order, each one vector kernel over rows of C channels.
void conv_sample_forward(float* Y, const float* X, const float* wt, const float* bias,
                         const CausalTaps& taps, size_t C) {
  const size_t To = taps.To;
  if (!bias) {
    std::memset(Y, 0, To * C * sizeof(float));
  } else if (To) {  // the bias in every row: one row, then copies that double
    std::memcpy(Y, bias, C * sizeof(float));
    for (size_t done = 1; done < To;) {
      const size_t n = std::min(done, To - done);
      std::memcpy(Y + done * C, Y, n * C * sizeof(float));
      done += n;
    }
  }
  for (size_t j = 0; j < taps.K; ++j) {  // each output sums its taps in order
    const auto sp = taps.span(j);
    if (sp.lo < sp.hi)
      kernels::mul_add_rows(Y + sp.lo * C, C, X + sp.in0 * C, taps.stride * C, wt + j * C,
                            sp.hi - sp.lo, C);
  }
}

// gw (C x K) += sum_b sum_to G X over each tap's rows and gb (C) += the column sums of G, for
// G (B x To x C), X (B x T x C); either may be null. One partial sum per sample (over its rows in
// order) in parallel, then the samples in order: the same bits with any thread count.
void conv_param_grads(const float* X, const float* G, size_t B, size_t C, const CausalTaps& taps,
                      float* gw, float* gb) {
  const size_t K = taps.K, T = taps.T, To = taps.To, stride = taps.stride;
  std::vector<float> part(B * (K + 1) * C, 0.0f);
  parallel_for(B, [&](size_t b) {
    float* pb = part.data() + b * (K + 1) * C;
    if (gw)
      for (size_t j = 0; j < K; ++j) {
        const auto sp = taps.span(j);
        if (sp.lo < sp.hi)
          kernels::dot_rows(pb + j * C, G + (b * To + sp.lo) * C, C, X + (b * T + sp.in0) * C,
                            stride * C, sp.hi - sp.lo, C);
      }
    if (gb) {
      float* __restrict a = pb + K * C;
      for (size_t to = 0; to < To; ++to) {
        const float* __restrict gr = G + (b * To + to) * C;
        for (size_t c = 0; c < C; ++c) a[c] += gr[c];
      }
    }
  });
  std::vector<float> sum((K + 1) * C, 0.0f);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[b * (K + 1) * C + i];
  for (size_t c = 0; c < C; ++c) {
    if (gw)
      for (size_t j = 0; j < K; ++j) gw[c * K + j] += sum[j * C + c];
    if (gb) gb[c] += sum[K * C + c];
  }
}
}  // namespace

Var depthwise_conv1d_causal(const Var& x, const Var& w, const Var* bias, size_t stride) {
  if (x.shape().size() != 3) shape_error("depthwise_conv1d_causal", "x must be (B, T, C)");
  size_t B = x.dim(0), T = x.dim(1), C = x.dim(2), K = w.dim(1);
  if (w.dim(0) != C) shape_error("depthwise_conv1d_causal", "weight must be (C, k)");
  if (stride == 0) shape_error("depthwise_conv1d_causal", "stride must be >= 1");
  const CausalTaps taps{K, stride, T, (T + stride - 1) / stride};
  const size_t To = taps.To;
  Tensor y = Tensor::empty({B, To, C});
  const float* X = x.value().data();
  // the weights as (k, C), so each tap is one vector kernel over rows of C channels
  auto wt = std::make_shared<std::vector<float>>(K * C);
  {
    const float* W = w.value().data();
    for (size_t c = 0; c < C; ++c)
      for (size_t j = 0; j < K; ++j) (*wt)[j * C + c] = W[c * K + j];
  }
  const float* bv = bias ? bias->value().data() : nullptr;
  parallel_for(B, [&](size_t b) {
    conv_sample_forward(y.data() + b * To * C, X + b * T * C, wt->data(), bv, taps, C);
  });
  auto grad_fn = [xx = x, ww = w, bb = bias ? *bias : Var(), wt, taps, B, C](
                     const Tensor& g, const Tensor&) mutable {
    const float* G = g.data();
    const size_t T = taps.T, To = taps.To, stride = taps.stride;
    float* gx = xx.requires_grad() ? xx.grad_buf().data() : nullptr;
    if (gx)  // the transposed taps, in order
      parallel_for(B, [&](size_t b) {
        for (size_t j = 0; j < taps.K; ++j) {
          const auto sp = taps.span(j);
          if (sp.lo < sp.hi)
            kernels::mul_add_rows(gx + (b * T + sp.in0) * C, stride * C, G + (b * To + sp.lo) * C,
                                  C, wt->data() + j * C, sp.hi - sp.lo, C);
        }
      });
    float* gw = ww.requires_grad() ? ww.grad_buf().data() : nullptr;
    float* gb = bb.defined() && bb.requires_grad() ? bb.grad_buf().data() : nullptr;
    if (gw || gb) conv_param_grads(xx.value().data(), G, B, C, taps, gw, gb);
  };
  return finish(std::move(y), {&x, &w, bias}, grad_fn);
}

// ---------------------------------------------------------------------------
Var reshape(const Var& x, Shape shape) {
  Tensor y = x.value().reshaped(std::move(shape));
  auto grad_fn = [xx = x](const Tensor& g, const Tensor&) mutable { xx.add_grad(g); };
  return finish(y, {&x}, grad_fn);
}

Var transpose_last2(const Var& x) {
  size_t nd = x.shape().size();
  if (nd < 2) shape_error("transpose_last2", "need >= 2 dims");
  size_t m = x.shape()[nd - 2], n = x.shape()[nd - 1], batch = x.size() / (m * n);
  Shape os = x.shape();
  std::swap(os[nd - 2], os[nd - 1]);
  Tensor y = Tensor::empty(os);
  const float* X = x.value().data();
  for (size_t b = 0; b < batch; ++b)
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) y[b * m * n + j * m + i] = X[b * m * n + i * n + j];
  auto grad_fn = [xx = x, m, n, batch](const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t b = 0; b < batch; ++b)
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) gx[b * m * n + i * n + j] += g[b * m * n + j * m + i];
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var slice_last(const Var& x, size_t begin, size_t end) {
  size_t d = last_dim(x), rows = x.size() / d;
  if (begin > end || end > d) shape_error("slice_last", "range out of bounds");
  size_t w = end - begin;
  Shape os = x.shape();
  os.back() = w;
  Tensor y = Tensor::empty(os);
  for (size_t i = 0; i < rows; ++i)
    std::memcpy(y.data() + i * w, x.value().data() + i * d + begin, w * 4);
  auto grad_fn = [xx = x, rows, d, w, begin](const Tensor& g, const Tensor&) mutable {
    float* gx = xx.grad_buf().data();
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < w; ++j) gx[i * d + begin + j] += g[i * w + j];
  };
  return finish(std::move(y), {&x}, grad_fn);
}

Var concat_last(const std::vector<Var>& xs) {
  if (xs.empty()) shape_error("concat_last", "no inputs");
  size_t rows = xs[0].size() / last_dim(xs[0]);
  size_t total = 0;
  for (auto& x : xs) {
    if (x.size() / last_dim(x) != rows) shape_error("concat_last", "row count mismatch");
    total += last_dim(x);
  }
  Shape os = xs[0].shape();
  os.back() = total;
  Tensor y = Tensor::empty(os);
  size_t off = 0;
  for (auto& x : xs) {
    size_t w = last_dim(x);
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(y.data() + i * total + off, x.value().data() + i * w, w * 4);
    off += w;
  }
  bool req = false;
  for (auto& x : xs) req = req || x.requires_grad();
  auto grad_fn = [ins = std::make_shared<std::vector<Var>>(xs), rows, total](
                     const Tensor& g, const Tensor&) mutable {
    size_t off = 0;
    for (auto& x : *ins) {
      size_t w = last_dim(x);
      if (x.requires_grad()) {
        float* gx = x.grad_buf().data();
        for (size_t i = 0; i < rows; ++i)
          for (size_t j = 0; j < w; ++j) gx[i * w + j] += g[i * total + off + j];
      }
      off += w;
    }
  };
  return finish(std::move(y), req, grad_fn);
}

Var sum_all(const std::vector<Var>& xs) {
  if (xs.empty()) shape_error("sum_all", "no inputs");
  Tensor y = xs[0].value().clone();
  for (size_t i = 1; i < xs.size(); ++i) {
    if (xs[i].size() != y.size()) shape_error("sum_all", "shape mismatch");
    y.add_(xs[i].value());
  }
  bool req = false;
  for (auto& x : xs) req = req || x.requires_grad();
  auto grad_fn = [ins = std::make_shared<std::vector<Var>>(xs)](const Tensor& g,
                                                                const Tensor&) mutable {
    for (auto& x : *ins)
      if (x.requires_grad()) x.add_grad(g);
  };
  return finish(std::move(y), req, grad_fn);
}

// ---------------------------------------------------------------------------
Var cross_entropy(const Var& logits, const std::vector<int32_t>& labels) {
  size_t B = logits.dim(0), C = logits.dim(1);
  if (labels.size() != B) shape_error("cross_entropy", "labels size != batch");
  Tensor p = logits.value().clone();
  double loss = 0;
  for (size_t b = 0; b < B; ++b) {
    float* row = p.data() + b * C;
    int32_t y = labels[b];
    if (y < 0 || static_cast<size_t>(y) >= C)
      shape_error("cross_entropy",
                  "label " + std::to_string(y) + " outside [0, " + std::to_string(C) + ")");
    float mx = *std::max_element(row, row + C);
    double s = 0;
    for (size_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(row[c] - mx));
    double lse = mx + std::log(s);
    loss += lse - row[y];
    for (size_t c = 0; c < C; ++c) row[c] = static_cast<float>(std::exp(row[c] - lse));
  }
  auto grad_fn = [ll = logits, p, lab = std::make_shared<std::vector<int32_t>>(labels), B, C](
                     const Tensor& g, const Tensor&) mutable {
    float g0 = g[0] / B;
    float* gl = ll.grad_buf().data();
    for (size_t b = 0; b < B; ++b)
      for (size_t c = 0; c < C; ++c)
        gl[b * C + c] += g0 * (p[b * C + c] - (static_cast<int32_t>(c) == (*lab)[b] ? 1.0f : 0.0f));
  };
  return finish(Tensor::scalar(static_cast<float>(loss / B)), {&logits}, grad_fn);
}

// ---------------------------------------------------------------------------
// Streaming attention: tiles of `br` query rows see all (causal: all earlier) keys;
// only the row log-sum-exp (B x T) is kept, and the backward pass recomputes each
// tile's probabilities from it. Scratch is O(br x T) per thread, never O(T^2).
namespace {

struct AttnGeom {
  size_t B, T, dk, dv, br;
  float scale;
  bool causal;
  const uint8_t* valid;  // (B*T) or null
};

// Per-thread scratch buffers, grown on demand and kept between calls.
std::vector<float>& scratch(int which, size_t n) {
  thread_local std::vector<float> bufs[5];
  if (bufs[which].size() < n) bufs[which].resize(n);
  return bufs[which];
}

// xt (d x T) = x^T for x (T x d).
void transpose_into(const float* x, size_t T, size_t d, float* xt) {
  kernels::transpose(x, T, d, xt);
}

// Key bias of one sample (0, or -inf for a padded key) into BIAS (T); false when no key
// in [0, jmax) is padded (BIAS is then not written).
bool key_bias(const uint8_t* vb, size_t jmax, float* bias) {
  if (!vb || std::find(vb, vb + jmax, uint8_t{0}) == vb + jmax) return false;
  for (size_t j = 0; j < jmax; ++j) bias[j] = vb[j] ? 0.0f : -INFINITY;
  return true;
}

// Masks one score row of query QUERY: padded keys through BIAS (null when none is padded)
// and, when causal, every key after the query.
void mask_row(float* row, size_t jmax, const float* bias, bool causal, size_t query) {
  if (bias) kernels::axpy(row, bias, jmax, 1.0f);
  if (causal) std::fill(row + query + 1, row + jmax, -INFINITY);
}

// Forward of one tile of sample b: rows i0..i0+r-1 of its output (OUTB, T x dv) and of its
// row log-sum-exp (LSEB, T; +inf marks a row with no valid key; null when no backward pass
// will read it). KTb is k^T (dk x T).
// The probabilities stay unnormalised in the tile; each output row is scaled by 1 / sum.
void attn_forward_tile(const AttnGeom& g, const float* Qb, const float* KTb, const float* Vb,
                       const uint8_t* vb, size_t i0, float* lseb, float* outb) {
  size_t r = std::min(g.br, g.T - i0);
  size_t jmax = g.causal ? i0 + r : g.T;
  float* S = scratch(0, r * jmax).data();
  float* inv = scratch(1, r).data();
  float* bias = scratch(2, jmax).data();
  kernels::gemm_short_k(r, jmax, g.dk, g.scale, Qb + i0 * g.dk, g.dk, KTb, g.T, S, jmax);
  const float* kb = key_bias(vb, jmax, bias) ? bias : nullptr;
  for (size_t a = 0; a < r; ++a) {
    float* row = S + a * jmax;
    mask_row(row, jmax, kb, g.causal, i0 + a);
    float mx = kernels::row_max(row, jmax);
    if (mx == -INFINITY) {
      std::memset(row, 0, jmax * sizeof(float));
      if (lseb) lseb[i0 + a] = INFINITY;
      inv[a] = 0.0f;
      continue;
    }
    float sum = kernels::exp_shift_sum(row, jmax, mx);
    inv[a] = 1.0f / sum;
    if (lseb) lseb[i0 + a] = mx + std::log(sum);
  }
  kernels::gemm_acc_nd_rows(r, jmax, g.dv, inv, S, jmax, Vb, g.dv, outb + i0 * g.dv, g.dv);
}

// One sample's view of the attention's tensors and gradients (a null gradient is not wanted).
struct AttnSample {
  // (T x dk), (dk x T) = K^T, (T x dk), (T x dv), (T x dv), (T x dv), (T)
  const float *Q, *KT, *K, *V, *O, *G, *lse;
  const uint8_t* valid;                  // (T) or null
  float *gq, *gk, *gv;
};

// Backward of one sample: its tiles in order, so dK and dV sum in a fixed order.
void attn_backward_sample(const AttnGeom& g, size_t tiles, const AttnSample& s) {
  const size_t T = g.T, dk = g.dk, dv = g.dv;
  const float* KTb = s.KT;  // kept from the forward pass
  float* VTb = scratch(4, dv * T).data();
  transpose_into(s.V, T, dv, VTb);
  float* bias = scratch(2, T + g.br).data();
  float* dots = bias + T;
  const float* kb = key_bias(s.valid, T, bias) ? bias : nullptr;
  for (size_t t = 0; t < tiles; ++t) {
    size_t i0 = t * g.br, r = std::min(g.br, T - i0);
    size_t jmax = g.causal ? i0 + r : T;
    const float* G = s.G + i0 * dv;
    float* P = scratch(0, r * jmax).data();
    float* dS = scratch(1, r * jmax).data();
    kernels::gemm_short_k(r, jmax, dk, g.scale, s.Q + i0 * dk, dk, KTb, T, P, jmax);
    for (size_t a = 0; a < r; ++a) {
      float* row = P + a * jmax;
      mask_row(row, jmax, kb, g.causal, i0 + a);
      kernels::exp_shift(row, jmax, s.lse[i0 + a]);
    }
    if (s.gv) kernels::gemm_acc_tnd(r, jmax, dv, 1.0f, P, jmax, G, dv, s.gv, dv);
    if (!s.gq && !s.gk) continue;
    // dP = dO V^T, then dS = P * (dP - <dO_i, O_i>) * scale
    for (size_t a = 0; a < r; ++a) dots[a] = kernels::dot(G + a * dv, s.O + (i0 + a) * dv, dv);
    kernels::gemm_short_k(r, jmax, dv, 1.0f, G, dv, VTb, T, dS, jmax);
    for (size_t a = 0; a < r; ++a)
      kernels::softmax_grad_row(dS + a * jmax, P + a * jmax, jmax, dots[a], g.scale);
    if (s.gq) kernels::gemm_acc_nd(r, jmax, dk, 1.0f, dS, jmax, s.K, dk, s.gq + i0 * dk, dk);
    if (s.gk) kernels::gemm_acc_tnd(r, jmax, dk, 1.0f, dS, jmax, s.Q + i0 * dk, dk, s.gk, dk);
  }
}

}  // namespace

// The head widths d_k, d_v are short (16 at d 64 with 4 heads): every product below has
// one short dimension and runs in registers (kernels::gemm_*), without BLAS packing.
Var attention(const Var& q, const Var& k, const Var& v, float scale, const AttentionMask& mask) {
  if (q.shape().size() != 3 || k.shape().size() != 3 || v.shape().size() != 3)
    shape_error("attention", "q, k, v must be (B, T, d)");
  size_t B = q.dim(0), T = q.dim(1), dk = q.dim(2), dv = v.dim(2);
  if (k.dim(0) != B || k.dim(1) != T || k.dim(2) != dk || v.dim(0) != B || v.dim(1) != T)
    shape_error("attention", "q " + shape_str(q.shape()) + " k " + shape_str(k.shape()) + " v " +
                                 shape_str(v.shape()));
  if (mask.key_valid && mask.key_valid->size() != B * T) shape_error("attention", "mask size");
  AttnGeom g{B,
             T,
             dk,
             dv,
             std::max<size_t>(1, kernels::attention_block_rows()),
             scale,
             mask.causal,
             mask.key_valid ? mask.key_valid->data() : nullptr};
  size_t tiles = (T + g.br - 1) / g.br;
  Tensor out(Shape{B, T, dv}, 0.0f);
  // log-sum-exp per row (+inf marks a row with no valid key), for the backward pass only
  const bool backward_pass =
      grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  Tensor lse = backward_pass ? Tensor::empty({B, T}) : Tensor();
  const float* Q = q.value().data();
  const float* K = k.value().data();
  const float* V = v.value().data();
  Tensor KT = Tensor::empty({B, dk, T});
  parallel_for(B, [&](size_t b) { transpose_into(K + b * T * dk, T, dk, KT.data() + b * dk * T); });
  // Every (sample, tile) is independent: the split does not change any result.
  parallel_for(B * tiles, [&](size_t task) {
    size_t b = task / tiles;
    attn_forward_tile(g, Q + b * T * dk, KT.data() + b * dk * T, V + b * T * dv,
                      g.valid ? g.valid + b * T : nullptr, (task % tiles) * g.br,
                      backward_pass ? lse.data() + b * T : nullptr, out.data() + b * T * dv);
  });
  // the caller's mask may be gone by the backward pass: keep a copy
  auto keep = mask.key_valid ? std::make_shared<std::vector<uint8_t>>(*mask.key_valid) : nullptr;
  g.valid = keep ? keep->data() : nullptr;
  // the backward pass recomputes the scores from the same K^T (kept: O(B T d_k) floats)
  auto grad_fn = [qq = q, kk = k, vv = v, lse, g, tiles, keep, KT](const Tensor& gr,
                                                                   const Tensor& res) mutable {
    const size_t T = g.T, dk = g.dk, dv = g.dv;
    float* gq = qq.requires_grad() ? qq.grad_buf().data() : nullptr;
    float* gk = kk.requires_grad() ? kk.grad_buf().data() : nullptr;
    float* gv = vv.requires_grad() ? vv.grad_buf().data() : nullptr;
    parallel_for(g.B, [&](size_t b) {
      AttnSample s{qq.value().data() + b * T * dk, KT.data() + b * dk * T,
                   kk.value().data() + b * T * dk,
                   vv.value().data() + b * T * dv, res.data() + b * T * dv,
                   gr.data() + b * T * dv, lse.data() + b * T,
                   g.valid ? g.valid + b * T : nullptr,
                   gq ? gq + b * T * dk : nullptr, gk ? gk + b * T * dk : nullptr,
                   gv ? gv + b * T * dv : nullptr};
      attn_backward_sample(g, tiles, s);
    });
  };
  return finish(std::move(out), {&q, &k, &v}, grad_fn);
}

}  // namespace ops
}  // namespace gf
