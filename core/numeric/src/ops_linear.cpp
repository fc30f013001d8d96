// Linear maps and products: linear, its fused forms over parts and sums of inputs, matmul.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "growformer/blas.hpp"
#include "growformer/kernels.hpp"
#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

namespace {
// Rows of X longer than this (4 KiB) make panels of Y 64 columns wide (a panel is at most
// 512 KiB), so a call re-reads its X once per panel: 8 times at 2,048 x 512.
constexpr size_t kLongRow = 1024;
// The rows such a product takes at a time, Y packed once for them all: X's 512 rows at 2,048
// floats are 4 MiB, re-read from the last level for each panel; the whole X of d 512's MLP
// (4,096 x 2,048, 32 MiB) came from memory each time. One thread, Zen 5, interleaved, medians
// of 9..11: 0.89..0.93x the time of one call at 2,048 x 512 (X W and G W^T), 0.94..0.97x at
// 1,536 (the joined QKV's G W^T), level at 1,024 and at 512 (docs/results/speed.md).
constexpr size_t kLongRowSpan = 512;

// Y packed once for a product whose rows parallel_chunks splits over the threads (four chunks a
// thread, each of which packed Y whole on its own), or that takes long rows in spans; on one
// thread a call over short rows packs its panels one at a time into a scratch that stays in
// L2, which a whole copy made first would not.
kernels::Panels split_panels(size_t m, size_t len, size_t n, const float* y, size_t ldy,
                             bool short_k = false) {
  if ((num_threads() <= 1 && len <= kLongRow) || m <= 64) return kernels::Panels();
  return kernels::pack_panels(m, len, n, y, ldy, short_k);
}

// FN(r0, r1) over rows R0..R1-1: in spans of kLongRowSpan when X's rows (LEN) are long, else
// at once. Each row is its own products, so the spans do not change a bit.
template <class F>
void row_spans(size_t r0, size_t r1, size_t len, F&& fn) {
  const size_t span = len > kLongRow ? kLongRowSpan : r1 - r0;
  for (size_t s0 = r0; s0 < r1; s0 += span) fn(s0, std::min(r1, s0 + span));
}

// dW (in x n) += X^T G and db (n) += column sums of G for X (m x in), G (m x n); either output
// may be null. Columns split over the pool; the rows in fixed spans of 512, each span's sum one
// FMA chain per element, added to dW in order, so a column's sums depend neither on the thread
// count nor on the columns beside it (the rows are never split). A span's G panel stays in L2.
// Spans of 512 summed in 64-row blocks, each block's sum added to dW, cost 10 % of the product
// (a tile's chains restarted and its part of dW loaded and stored every 64 rows); 256..512-row
// spans as one chain were the fastest at 1 and 2 threads (docs/results/speed.md).
//
// Long rows of X (over kLongRow): each span of X transposed first (its rows over the pool), so
// that the product reads X^T along its rows (gemm_acc_nd) instead of X down its columns, whose
// floats lie a row (8 KiB at 2,048) apart and fall in a few cache sets. The same chains, added
// in the same order: the same bits (a chunk too narrow for gemm_acc_nd's column layout, and an
// output of 8 columns or fewer, which is never transposed for, read X as before). One thread, Zen
// 5, interleaved, medians of 9: 0.92..0.96x the time at 2,048 x 512, level at 512 wide (not taken
// there).
void weight_grads(const float* X, size_t m, size_t in, const float* G, size_t n, float* dW,
                  float* db) {
  if (!dW && !db) return;
  constexpr size_t kSpan = 512;
  // the span of ROWS rows from R0, columns C0..C1: from XT (that span's X^T) when given and the
  // chunk is wider than half of any register (gemm_acc_nd's column layout), else X read down
  // its columns
  auto span = [&](size_t r0, size_t rows, size_t c0, size_t c1, const float* xt) {
    if (dW && xt && c1 - c0 > 8)
      kernels::gemm_acc_nd(in, rows, c1 - c0, 1.0f, xt, rows, G + r0 * n + c0, n, dW + c0, n);
    else if (dW)
      kernels::gemm_acc_tnd(rows, in, c1 - c0, 1.0f, X + r0 * in, in, G + r0 * n + c0, n, dW + c0,
                            n);
    if (db)
      for (size_t r = r0; r < r0 + rows; ++r)
        for (size_t j = c0; j < c1; ++j) db[j] += G[r * n + j];
  };
  if (dW && in > kLongRow && n > 8) {
    Tensor XT = Tensor::empty({in * std::min(kSpan, m)});
    float* const xt = XT.data();
    for (size_t r0 = 0; r0 < m; r0 += kSpan) {
      const size_t rows = std::min(kSpan, m - r0);
      parallel_chunks(in, 16, [&](size_t i0, size_t i1) {
        kernels::transpose_tiled(X + r0 * in + i0, rows, i1 - i0, in, xt + i0 * rows, rows);
      });
      parallel_chunks_even(n, 16, [&](size_t c0, size_t c1) { span(r0, rows, c0, c1, xt); });
    }
    return;
  }
  parallel_chunks_even(n, 16, [&](size_t c0, size_t c1) {
    for (size_t r0 = 0; r0 < m; r0 += kSpan) span(r0, std::min(kSpan, m - r0), c0, c1, nullptr);
  });
}

// dX (m x in) (+)= G (m x n) W^T for W (in x n), W transposed once, rows split over the pool in
// blocks of 64: a fresh gradient is written (the same FMA chains), not zeroed and added to.
void add_input_grad(Var& x, const float* G, size_t m, size_t in, size_t n, const float* W) {
  // W^T in a pooled buffer (every element written: no zero fill first), its rows over the pool
  // (a serial transpose was 2 % of a d 512 step), in 16 x 16 tiles (column by column it took
  // 18.6 ms of a d 512 layer's backward pass at 1 thread, tiled 1.6 ms)
  Tensor WT = Tensor::empty({n * in});
  parallel_chunks(n, 16, [&](size_t j0, size_t j1) {
    kernels::transpose_tiled(W + j0, in, j1 - j0, n, WT.data() + j0 * in, in);
  });
  bool fresh = false;
  float* gx = x.grad_buf_for_write(fresh).data();
  // W^T in the kernels' panels once, for every block of rows on every thread
  const kernels::Panels pw = split_panels(m, n, in, WT.data(), in, fresh);
  parallel_chunks(m, 64, [&](size_t c0, size_t c1) {
    row_spans(c0, c1, n, [&](size_t r0, size_t r1) {
      if (fresh)
        kernels::gemm_short_k(r1 - r0, in, n, 1.0f, G + r0 * n, n, WT.data(), in, gx + r0 * in, in,
                              &pw);
      else
        kernels::gemm_acc_nd(r1 - r0, n, in, 1.0f, G + r0 * n, n, WT.data(), in, gx + r0 * in, in,
                             &pw);
    });
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
  // a weight the kernels would pack is packed once here, shared by every chunk and thread
  const kernels::Panels pw = split_panels(m, in, out, W, out);
  parallel_chunks(m, 64, [&](size_t c0, size_t c1) {
    row_spans(c0, c1, in, [&](size_t r0, size_t r1) {
      kernels::gemm_bias(r1 - r0, out, in, X + r0 * in, in, W, out, bp, y.data() + r0 * out, out,
                         &pw);
    });
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
std::vector<size_t> part_columns(const Var& x, const std::vector<Var>& w,
                                 const std::vector<Var>& b) {
  const size_t in = last_dim(x), parts = w.size();
  if (!b.empty() && b.size() != parts)
    shape_error("linear_parts",
                std::to_string(parts) + " weights but " + std::to_string(b.size()) + " biases");
  std::vector<size_t> off(parts + 1, 0);
  for (size_t i = 0; i < parts; ++i) {
    if (w[i].shape().size() != 2 || w[i].dim(0) != in)
      shape_error("linear_parts",
                  "input " + shape_str(x.shape()) + " vs weight " + shape_str(w[i].shape()));
    if (!b.empty() && b[i].size() != w[i].dim(1))
      shape_error("linear_parts",
                  "bias " + shape_str(b[i].shape()) + " for weight " + shape_str(w[i].shape()));
    off[i + 1] = off[i] + w[i].dim(1);
  }
  return off;
}

// The gradients of OUTS side by side (m x N, the columns of OFF; every element written, an
// absent gradient as zeros), rows split over the pool.
// (A pooled tensor: a fresh allocation of this size each backward pass cost its page faults.)
Tensor joined_grads(const std::vector<Var>& outs, const std::vector<size_t>& off, size_t m,
                    size_t N) {
  Tensor Gbuf = Tensor::empty({m * N});
  float* const G = Gbuf.data();
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
  const kernels::Panels pw = split_panels(m, in, N, W->data(), N);
  parallel_chunks(m, 64, [&](size_t c0, size_t c1) {
    row_spans(c0, c1, in, [&](size_t r0, size_t r1) {
      std::vector<float*> dst(parts);
      for (size_t i = 0; i < parts; ++i)
        dst[i] = outs[i].value().data() + r0 * ((*off)[i + 1] - (*off)[i]);
      kernels::gemm_bias_parts(r1 - r0, N, in, X + r0 * in, in, W->data(), N, bp, off->data(),
                               parts, dst.data(), &pw);
    });
  });
  if (!requires) return outs;
  // Backward: dX += G W^T and the parameters' gradients from the outputs' gradients side by side.
  record([x = Var(x), w = std::vector<Var>(w), b = std::vector<Var>(b), outs, off, W, m, in,
          N]() mutable {
    bool any = false;
    for (const Var& o : outs) any = any || o.grad().defined();
    if (!any) return;
    const Tensor G = joined_grads(outs, *off, m, N);
    if (x.requires_grad()) add_input_grad(x, G.data(), m, in, N, W->data());
    add_part_param_grads(x, w, b, G.data(), *off, m, in, N);
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
    shape_error("linear_sum",
                "bias " + shape_str(bias->shape()) + " for " + std::to_string(n) + " outputs");
  return koff;
}

// dX_i (+)= G W_i^T for the inputs that need it, W (K x n) the weights stacked at KOFF: one
// product per block of 64 rows over all parts (each element one FMA chain over n, as
// ops::linear's), stored into fresh gradients or added to earlier ones.
void add_part_input_grads(std::vector<Var>& xs, const float* G, const std::vector<float>& W,
                          const std::vector<size_t>& koff, size_t m, size_t n, size_t K) {
  const size_t parts = xs.size();
  Tensor WT = Tensor::empty({n * K});
  parallel_chunks(n, 16, [&](size_t j0, size_t j1) {  // rows of W^T over the pool
    kernels::transpose_tiled(W.data() + j0, K, j1 - j0, n, WT.data() + j0 * K, K);
  });
  std::vector<float*> gx(parts, nullptr);
  std::vector<char> fresh(parts, 0);
  for (size_t i = 0; i < parts; ++i)
    if (xs[i].requires_grad()) {
      bool f = false;
      gx[i] = xs[i].grad_buf_for_write(f).data();
      fresh[i] = f;
    }
  constexpr size_t kRows = 64;
  // W^T packed once for all the 64-row blocks on every thread (split_panels: on one thread
  // only for long rows)
  const kernels::Panels pw = split_panels(m, n, K, WT.data(), K, true);
  parallel_chunks(m, kRows, [&](size_t r0, size_t r1) {
    thread_local std::vector<float> D;
    if (D.size() < kRows * K) D.resize(kRows * K);
    for (size_t s0 = r0; s0 < r1; s0 += kRows) {
      const size_t rows = std::min(kRows, r1 - s0);
      kernels::gemm_short_k(rows, K, n, 1.0f, G + s0 * n, n, WT.data(), K, D.data(), K, &pw);
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
    shape_error("linear_sum",
                std::to_string(parts) + " inputs but " + std::to_string(w.size()) + " weights");
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
  const kernels::Panels pw = split_panels(m, K, n, W->data(), n);
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
      kernels::gemm_bias(rows, n, K, X.data(), K, W->data(), n, bp, y.data() + s0 * n, n, &pw);
    }
  });
  bool requires = bias && bias->requires_grad();
  for (size_t i = 0; i < parts; ++i)
  requires = requires || x[i].requires_grad() || w[i].requires_grad();
  auto grad_fn = [xs = std::vector<Var>(x), ws = std::vector<Var>(w), bb = bias ? *bias : Var(),
                  koff, W, m, n, K](const Tensor& g, const Tensor&) mutable {
    const float* G = g.data();
    bool any_x = false;
    for (const Var& v : xs) any_x = any_x || v.requires_grad();
    if (any_x) add_part_input_grads(xs, G, *W, koff, m, n, K);
    // dW_i = X_i^T G, each weight from its own input alone (fixed row blocks, weight_grads)
    for (size_t i = 0; i < xs.size(); ++i)
      if (ws[i].requires_grad())
        weight_grads(xs[i].value().data(), m, koff[i + 1] - koff[i], G, n, ws[i].grad_buf().data(),
                     nullptr);
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

}  // namespace ops
}  // namespace gf
