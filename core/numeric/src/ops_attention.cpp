// Streaming attention (forward and backward by tiles of query rows).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>

#include "growformer/blas.hpp"
#include "growformer/kernels.hpp"
#include "ops_impl.hpp"

namespace gf {
namespace ops {

using namespace detail;

// Streaming attention: tiles of `br` query rows see all (causal: all earlier) keys, in
// blocks of keys when a tile's scores pass kernels::attention_key_block_bytes() (key_block);
// only the row log-sum-exp (B x T) is kept, and the backward pass recomputes each
// tile's probabilities from it. Scratch is O(br x T) per thread, never O(T^2).
namespace {

struct AttnGeom {
  size_t B, T, dk, dv, br;
  size_t kb;  // K^T's and V^T's layout blocks (key_columns)
  float scale;
  bool causal;
  const uint8_t* valid;  // (B*T) or null
};

// Per-thread scratch buffers, grown on demand and kept between calls. Each starts on a 4 KiB
// boundary plus 256 bytes times its index, so P and dS (buffers 0 and 1), read and written at
// the same offsets by the softmax gradient, never fall at the same address modulo 4 KiB. Placed
// by the allocator, some runs of the op took 1.3x as long as others (likely that aliasing; the
// addresses were not inspected).
float* scratch(int which, size_t n) {
  constexpr size_t kPage = 4096 / sizeof(float), kStagger = 256 / sizeof(float);
  thread_local std::vector<float> bufs[5];
  const size_t pad = kPage + kStagger * static_cast<size_t>(which);
  if (bufs[which].size() < n + pad) bufs[which].resize(n + pad);
  const auto base = reinterpret_cast<std::uintptr_t>(bufs[which].data());
  const size_t skip = (kPage - base / sizeof(float) % kPage) % kPage;
  return bufs[which].data() + skip + kStagger * static_cast<size_t>(which);
}

// K^T and V^T (d x T) in blocks of KB key columns (key_columns): block j0 / KB, columns j0 ..
// j0 + bw - 1 (bw = min(KB, T - j0)), is a (d x bw) matrix of its own at xt + j0 d. Transposed
// whole, a block's d rows were T floats apart, 8 and 32 KiB at T 2,048 and 8,192, all in one
// set of the level-1 cache: the score product over a block of 512 keys ran at 57 % of the FMA
// peak against 81 % with rows 2 KiB apart (128 query rows, d_k 16, Zen 5). A sequence of at
// most KB keys is one block, the plain transpose.
void transpose_blocks(const float* x, size_t T, size_t d, size_t kb, float* xt) {
  for (size_t j0 = 0; j0 < T; j0 += kb)
    kernels::transpose(x + j0 * d, std::min(kb, T - j0), d, xt + j0 * d);
}

// C (r x w, ldc) = alpha A (r x d) XT[:, j0 .. j0 + w) for XT from transpose_blocks: a product
// for each layout block the columns touch. Each element is the same chain over d whichever
// call computes it, so the split does not change a bit. ROWMAX (null: not wanted): each row's
// maximum, max-combined into rowmax[0 .. r) (kernels::gemm_short_k_max).
void short_k_blocks(size_t r, size_t j0, size_t w, size_t d, float alpha, const float* a,
                    const float* xt, size_t T, size_t kb, float* c, size_t ldc,
                    float* rowmax = nullptr) {
  for (size_t j = j0; j < j0 + w;) {
    const size_t b0 = j / kb * kb, bw = std::min(kb, T - b0), n = std::min(b0 + bw, j0 + w) - j;
    const float* bt = xt + b0 * d + (j - b0);
    if (rowmax)
      kernels::gemm_short_k_max(r, n, d, alpha, a, d, bt, bw, c + (j - j0), ldc, rowmax);
    else
      kernels::gemm_short_k(r, n, d, alpha, a, d, bt, bw, c + (j - j0), ldc);
    j += n;
  }
}

// Key bias of one sample (0, or -inf for a padded key) into BIAS (T); false when no key
// in [0, jmax) is padded (BIAS is then not written).
bool key_bias(const uint8_t* vb, size_t jmax, float* bias) {
  if (!vb || std::find(vb, vb + jmax, uint8_t{0}) == vb + jmax) return false;
  for (size_t j = 0; j < jmax; ++j) bias[j] = vb[j] ? 0.0f : -INFINITY;
  return true;
}

// Masks keys J0..J0+W-1 of one score row of query QUERY (ROW holds just those W keys): padded
// keys through BIAS (null when none is padded) and, when causal, every key after the query.
void mask_block(float* row, size_t j0, size_t w, const float* bias, bool causal, size_t query) {
  if (bias) kernels::axpy(row, bias + j0, w, 1.0f);
  if (causal && query + 1 < j0 + w)
    std::fill(row + std::max(query + 1, j0) - j0, row + w, -INFINITY);
}

// How many keys the forward and backward passes take at a time for a tile of R query rows and
// JMAX keys: all of them while the tile's scores fit kernels::attention_key_block_bytes()
// (256 KiB: the bench shape, T 512 at 128 rows, is one block, and keeps its bits), else blocks
// of that size, so the scores (forward) and P and dS (backward) stay in L2 through the passes
// that read them instead of streaming from L3 (a 128-row tile is 1 MiB of scores at T 2,048,
// 4 MiB at T 8,192).
size_t key_block(size_t r, size_t jmax) {
  const size_t kc =
      std::max<size_t>(16, kernels::attention_key_block_bytes() / sizeof(float) / r / 16 * 16);
  return jmax <= kc ? jmax : kc;
}

// The layout blocks of K^T and V^T (transpose_blocks): a full tile's key block, so that its
// products read one layout block each.
size_t key_columns(size_t br, size_t T) { return key_block(std::min(br, T), T); }

// attn_forward_tile over a tile whose rows are longer than one key block: the keys a block at
// a time (key_block), each block's scores, exponentials and P V in L2 (a 128-row tile is 4 MiB
// of scores at T 8,192, streamed from L3 by three passes when whole). The softmax runs online:
// each row keeps its running maximum M and sum L, and when a block raises M, L and the row's
// output so far are scaled by exp(M_old - M_new); at the end the output is divided by L.
// The result equals the one-block form's up to rounding (the exponentials are taken against a
// running maximum, and P V sums block by block), as the one-block form is used up to 256 KiB.
void attn_forward_tile_blocks(const AttnGeom& g, const float* Qb, const float* KTb, const float* Vb,
                              const uint8_t* vb, size_t i0, float* lseb, float* outb) {
  const size_t r = std::min(g.br, g.T - i0), dv = g.dv;
  const size_t jmax = g.causal ? i0 + r : g.T, kc = key_block(r, jmax);
  float* S = scratch(0, r * kc);
  float* run = scratch(1, 3 * r);  // M (r), L (r), then a block's row maxima (r)
  float* bias = scratch(2, jmax);
  float *M = run, *L = run + r, *bmax = run + 2 * r;
  std::fill(M, M + r, -INFINITY);
  std::fill(L, L + r, 0.0f);
  float* O = outb + i0 * dv;  // this tile's rows alone
  std::memset(O, 0, r * dv * sizeof(float));
  const float* kb = key_bias(vb, jmax, bias) ? bias : nullptr;
  for (size_t j0 = 0; j0 < jmax; j0 += kc) {
    const size_t w = std::min(kc, jmax - j0);
    // no key of the block masked for any row of the tile: its maxima come with the product
    const bool open = !kb && (!g.causal || j0 + w <= i0 + 1);
    if (open) std::fill(bmax, bmax + r, -INFINITY);
    short_k_blocks(r, j0, w, g.dk, g.scale, Qb + i0 * g.dk, KTb, g.T, g.kb, S, w,
                   open ? bmax : nullptr);
    for (size_t a = 0; a < r; ++a) {
      float* row = S + a * w;
      if (!open) mask_block(row, j0, w, kb, g.causal, i0 + a);
      const float mx = std::max(M[a], open ? bmax[a] : kernels::row_max(row, w));
      if (mx == -INFINITY) {  // no valid key yet: the block adds nothing
        std::memset(row, 0, w * sizeof(float));
        continue;
      }
      if (mx > M[a] && M[a] != -INFINITY) {
        const float c = std::exp(M[a] - mx);
        L[a] *= c;
        kernels::scale_row(O + a * dv, dv, c);
      }
      M[a] = mx;
      L[a] += kernels::exp_shift_sum(row, w, mx);
    }
    kernels::gemm_acc_nd(r, w, dv, 1.0f, S, w, Vb + j0 * dv, dv, O, dv);
  }
  for (size_t a = 0; a < r; ++a) {
    if (M[a] == -INFINITY) {  // no valid key at all: output 0, as the one-block form
      if (lseb) lseb[i0 + a] = INFINITY;
      continue;
    }
    kernels::scale_row(O + a * dv, dv, 1.0f / L[a]);
    if (lseb) lseb[i0 + a] = M[a] + std::log(L[a]);
  }
}

// Forward of one tile of sample b: rows i0..i0+r-1 of its output (OUTB, T x dv) and of its
// row log-sum-exp (LSEB, T; +inf marks a row with no valid key; null when no backward pass
// will read it). KTb is k^T (dk x T) in layout blocks (transpose_blocks).
// The probabilities stay unnormalised in the tile; each output row is scaled by 1 / sum.
void attn_forward_tile(const AttnGeom& g, const float* Qb, const float* KTb, const float* Vb,
                       const uint8_t* vb, size_t i0, float* lseb, float* outb) {
  size_t r = std::min(g.br, g.T - i0);
  size_t jmax = g.causal ? i0 + r : g.T;
  if (key_block(r, jmax) < jmax)
    return attn_forward_tile_blocks(g, Qb, KTb, Vb, vb, i0, lseb, outb);
  std::memset(outb + i0 * g.dv, 0, r * g.dv * sizeof(float));  // zeroed here, while in cache
  float* S = scratch(0, r * jmax);
  float* inv = scratch(1, 2 * r);  // 1 / sum (r), then the row maxima (r)
  float* rmax = inv + r;
  float* bias = scratch(2, jmax);
  const float* kb = key_bias(vb, jmax, bias) ? bias : nullptr;
  // no key masked for any row of the tile: the maxima come with the product
  const bool open = !kb && !g.causal;
  if (open) std::fill(rmax, rmax + r, -INFINITY);
  short_k_blocks(r, 0, jmax, g.dk, g.scale, Qb + i0 * g.dk, KTb, g.T, g.kb, S, jmax,
                 open ? rmax : nullptr);
  for (size_t a = 0; a < r; ++a) {
    float* row = S + a * jmax;
    if (!open) mask_block(row, 0, jmax, kb, g.causal, i0 + a);
    float mx = open ? rmax[a] : kernels::row_max(row, jmax);
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
  // (T x dk), (dk x T) = K^T in layout blocks, (T x dk), (T x dv), (T x dv), (T x dv), (T)
  const float *Q, *KT, *K, *V, *O, *G, *lse;
  const uint8_t* valid;  // (T) or null
  float *gq, *gk, *gv;
  // a gradient buffer fresh from the tape, not zeroed: the task that first adds into a part
  // of it zeroes that part (dQ a tile's rows, dK and dV a sample's), while it is in cache
  bool zero_q, zero_k, zero_v;
};

// Backward of tiles T0..T1-1 of one sample, in order, so dK and dV sum in a fixed order
// (dQ's rows of each tile are its own).
void attn_backward_tiles(const AttnGeom& g, size_t t0, size_t t1, const AttnSample& s) {
  const size_t T = g.T, dk = g.dk, dv = g.dv;
  const float* KTb = s.KT;  // kept from the forward pass
  if (s.zero_k) std::memset(s.gk, 0, T * dk * sizeof(float));
  if (s.zero_v) std::memset(s.gv, 0, T * dv * sizeof(float));
  float* VTb = scratch(4, dv * T);
  transpose_blocks(s.V, T, dv, g.kb, VTb);
  float* bias = scratch(2, T + g.br);
  float* dots = bias + T;
  const float* kb = key_bias(s.valid, T, bias) ? bias : nullptr;
  for (size_t t = t0; t < t1; ++t) {
    size_t i0 = t * g.br, r = std::min(g.br, T - i0);
    size_t jmax = g.causal ? i0 + r : T;
    const size_t kc = key_block(r, jmax);
    const float* G = s.G + i0 * dv;
    if (s.zero_q) std::memset(s.gq + i0 * dk, 0, r * dk * sizeof(float));
    float* P = scratch(0, r * kc);
    float* dS = scratch(1, r * kc);
    if (s.gq || s.gk)
      for (size_t a = 0; a < r; ++a) dots[a] = kernels::dot(G + a * dv, s.O + (i0 + a) * dv, dv);
    for (size_t j0 = 0; j0 < jmax; j0 += kc) {
      const size_t w = std::min(kc, jmax - j0);
      short_k_blocks(r, j0, w, dk, g.scale, s.Q + i0 * dk, KTb, T, g.kb, P, w);
      for (size_t a = 0; a < r; ++a) {
        float* row = P + a * w;
        mask_block(row, j0, w, kb, g.causal, i0 + a);
        kernels::exp_shift(row, w, s.lse[i0 + a]);
      }
      if (s.gv) kernels::gemm_acc_tnd(r, w, dv, 1.0f, P, w, G, dv, s.gv + j0 * dv, dv);
      if (!s.gq && !s.gk) continue;
      // dP = dO V^T, then dS = P * (dP - <dO_i, O_i>) * scale
      short_k_blocks(r, j0, w, dv, 1.0f, G, VTb, T, g.kb, dS, w);
      for (size_t a = 0; a < r; ++a)
        kernels::softmax_grad_row(dS + a * w, P + a * w, w, dots[a], g.scale);
      if (s.gq) kernels::gemm_acc_nd(r, w, dk, 1.0f, dS, w, s.K + j0 * dk, dk, s.gq + i0 * dk, dk);
      if (s.gk) kernels::gemm_acc_tnd(r, w, dk, 1.0f, dS, w, s.Q + i0 * dk, dk, s.gk + j0 * dk, dk);
    }
  }
}

// Into how many groups of consecutive tiles one sample's backward pass is split. One group
// per sample when the batch alone gives enough tasks (B >= 8: dK and dV then sum tile by
// tile into the gradient, as ever); a small batch (1 at long T) would otherwise leave every
// thread but one idle. The count follows from the shape alone, never from the thread
// count, so a run's gradients do not depend on how many threads compute them.
size_t backward_groups(size_t B, size_t tiles) {
  constexpr size_t kTasks = 8;
  if (B >= kTasks) return 1;
  return std::min(tiles, (kTasks + B - 1) / B);
}

// The backward pass of every sample, split into GROUPS groups of tiles per sample: each
// group sums its dK and dV into a buffer of its own, then the groups add into the
// gradients in group order (a fixed order, whatever the threads).
void attn_backward(const AttnGeom& g, size_t tiles, size_t groups,
                   const std::function<AttnSample(size_t)>& sample) {
  if (groups <= 1) {
    parallel_for(g.B, [&](size_t b) { attn_backward_tiles(g, 0, tiles, sample(b)); });
    return;
  }
  const size_t T = g.T, dk = g.dk, dv = g.dv, per = (tiles + groups - 1) / groups;
  const AttnSample first = sample(0);
  Tensor part_k = first.gk ? Tensor(Shape{g.B * groups, T, dk}, 0.0f) : Tensor();
  Tensor part_v = first.gv ? Tensor(Shape{g.B * groups, T, dv}, 0.0f) : Tensor();
  parallel_for(g.B * groups, [&](size_t task) {
    AttnSample s = sample(task / groups);
    s.gk = s.gk ? part_k.data() + task * T * dk : nullptr;
    s.gv = s.gv ? part_v.data() + task * T * dv : nullptr;
    s.zero_k = s.zero_v = false;  // the parts are zeroed; the sums below zero the gradients
    const size_t t0 = (task % groups) * per;
    attn_backward_tiles(g, std::min(t0, tiles), std::min(t0 + per, tiles), s);
  });
  parallel_for(g.B, [&](size_t b) {
    const AttnSample s = sample(b);
    if (s.zero_k) std::memset(s.gk, 0, T * dk * sizeof(float));
    if (s.zero_v) std::memset(s.gv, 0, T * dv * sizeof(float));
    for (size_t grp = 0; grp < groups; ++grp) {
      if (s.gk) kernels::axpy(s.gk, part_k.data() + (b * groups + grp) * T * dk, T * dk, 1.0f);
      if (s.gv) kernels::axpy(s.gv, part_v.data() + (b * groups + grp) * T * dv, T * dv, 1.0f);
    }
  });
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
             0,
             scale,
             mask.causal,
             mask.key_valid ? mask.key_valid->data() : nullptr};
  g.kb = key_columns(g.br, T);
  size_t tiles = (T + g.br - 1) / g.br;
  Tensor out = Tensor::empty({B, T, dv});  // every tile zeroes its own rows
  // log-sum-exp per row (+inf marks a row with no valid key), for the backward pass only
  const bool backward_pass =
      grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  Tensor lse = backward_pass ? Tensor::empty({B, T}) : Tensor();
  const float* Q = q.value().data();
  const float* K = k.value().data();
  const float* V = v.value().data();
  Tensor KT = Tensor::empty({B, dk, T});
  parallel_for(
      B, [&](size_t b) { transpose_blocks(K + b * T * dk, T, dk, g.kb, KT.data() + b * dk * T); });
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
    // A fresh gradient buffer comes unzeroed and the tasks zero their parts of it in cache
    // (zero-filled here, 12 MiB at the bench shape, it was 3 % of the op and scaled 1.7x over
    // 2 threads); q, k and v that share a node share one buffer and take it zero-filled.
    const bool shared = qq.node() == kk.node() || qq.node() == vv.node() || kk.node() == vv.node();
    bool zq = false, zk = false, zv = false;
    auto buffer = [&](Var& x, bool& zero) -> float* {
      if (!x.requires_grad()) return nullptr;
      return shared ? x.grad_buf().data() : x.grad_buf_for_write(zero).data();
    };
    float* gq = buffer(qq, zq);
    float* gk = buffer(kk, zk);
    float* gv = buffer(vv, zv);
    auto sample = [&](size_t b) {
      return AttnSample{qq.value().data() + b * T * dk,
                        KT.data() + b * dk * T,
                        kk.value().data() + b * T * dk,
                        vv.value().data() + b * T * dv,
                        res.data() + b * T * dv,
                        gr.data() + b * T * dv,
                        lse.data() + b * T,
                        g.valid ? g.valid + b * T : nullptr,
                        gq ? gq + b * T * dk : nullptr,
                        gk ? gk + b * T * dk : nullptr,
                        gv ? gv + b * T * dv : nullptr,
                        zq,
                        zk,
                        zv};
    };
    attn_backward(g, tiles, backward_groups(g.B, tiles), sample);
  };
  return finish(std::move(out), {&q, &k, &v}, grad_fn);
}

}  // namespace ops
}  // namespace gf
