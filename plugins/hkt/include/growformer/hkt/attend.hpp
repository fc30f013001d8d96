// The fused multi-level attention op of the `hkt` block, in the plugin's library gf_hkt so
// that tests/test_hkt.cpp can check it on its own (finite differences, a reference built
// from core ops).
//
//   S_ij = sum_l lambda_l * scale * q_l[i / s^l] . k_l[j / s^l]     (up(S_l) via the index map)
//   P    = softmax_j(S + mask),   out = P v
//
// Streaming: tiles of query rows (a multiple of the coarsest block s^(L-1)) see all
// (causal: all earlier) keys. A tile's level-0 scores come from one GEMM; each coarse
// level adds its (tile blocks x T_l) product through the index map, so no T x T matrix
// is ever made. Only the row log-sum-exp (B x T) is kept; the backward pass recomputes
// each tile's probabilities, and reduces dS into each level's grid by summing blocks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <growformer/autograd.hpp>
#include <growformer/kernels.hpp>
#include <growformer/parallel.hpp>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels.hpp"

namespace gf_hkt {

/// Masking and geometry of one fused call.
struct FusedSpec {
  size_t stride = 2;    // s: level l pools s^l tokens
  bool causal = false;  // mask j > i; coarse scores only for past blocks
  const std::vector<uint8_t>* key_valid = nullptr;  // (B*T), 1 = real token; null = all real
  float scale = 1.0f;                               // 1/sqrt(d_k)
};

/// T_l = ceil(T / s^l).
inline size_t level_length(size_t T, size_t stride, size_t level) {
  size_t block = 1;
  for (size_t l = 0; l < level; ++l) block *= stride;
  return (T + block - 1) / block;
}

/// Number of level-l key blocks J a causal query i may use: those whose whole
/// block [J s^l, (J+1) s^l) lies at or before i, i.e. J < (i + 1) / s^l.
inline size_t causal_blocks(size_t i, size_t block) { return (i + 1) / block; }

namespace detail {

inline void softmax_logits(const float* z, size_t n, float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) m = std::max(m, z[i]);
  float s = 0.0f;
  for (size_t i = 0; i < n; ++i) s += (out[i] = std::exp(z[i] - m));
  for (size_t i = 0; i < n; ++i) out[i] /= s;
}

// The per-thread scratch buffers, each with one meaning in both passes.
enum class Buf {
  tile,        // a tile's score rows: S (forward), P = exp(S - lse) (backward)
  row_inv,     // forward: 1 / sum per row of the tile, scales its output row
  up_row,      // a T-wide row of a coarse level expanded to the fine grid
  coarse,      // the coarse levels' score rows of a tile (tile_scores)
  pad_bias,    // 0 at a valid key, -inf at padding
  score_grad,  // backward: dS of the tile
  v_t,         // backward: v^T of the sample (d_v x T)
  count
};

// Per-thread scratch, grown on demand and kept between calls.
inline std::vector<float>& scratch(Buf which, size_t n) {
  thread_local std::vector<float> bufs[static_cast<size_t>(Buf::count)];
  std::vector<float>& b = bufs[static_cast<size_t>(which)];
  if (b.size() < n) b.resize(n);
  return b;
}

// Everything a tile needs, shared by the forward and the backward pass.
struct Geom {
  size_t B, T, L, dk, dv, br;
  std::vector<size_t> Tl, blk;
  float scale;
  bool causal;
  const uint8_t* valid;  // (B*T) or null
  size_t tiles() const { return (T + br - 1) / br; }
};

// xt (d x T) = x^T for x (T x d).
inline void transpose_into(const float* x, size_t T, size_t d, float* xt) {
  gf::kernels::transpose(x, T, d, xt);
}

// up[j] = sr[j / bs] for j < lim: each coarse score repeated over its block. Strides 2
// and 4 have constant-width loops the compiler vectorises.
template <size_t BS>
inline void expand_fixed(const float* sr, size_t n, float* up) {
  for (size_t J = 0; J < n; ++J)
    for (size_t t = 0; t < BS; ++t) up[J * BS + t] = sr[J];
}
// Calls f(std::integral_constant<size_t, BS>{}) for the block sizes with constant-width
// loops (2, 4, 8) and returns true; false for any other size.
template <class F>
inline bool with_fixed_block(size_t bs, F&& f) {
  switch (bs) {
    case 2:
      f(std::integral_constant<size_t, 2>{});
      return true;
    case 4:
      f(std::integral_constant<size_t, 4>{});
      return true;
    case 8:
      f(std::integral_constant<size_t, 8>{});
      return true;
    default:
      return false;
  }
}

inline void expand_blocks(const float* sr, size_t bs, size_t lim, float* up) {
  const size_t full = lim / bs;
  if (!with_fixed_block(bs, [&](auto B) { expand_fixed<decltype(B)::value>(sr, full, up); }))
    for (size_t J = 0; J < full; ++J) std::fill(up + J * bs, up + (J + 1) * bs, sr[J]);
  std::fill(up + full * bs, up + lim, sr[full < (lim + bs - 1) / bs ? full : 0]);
}

// out[J] = sum of acc[j] over block J, for the blocks that start before lim (the last
// one may be cut at lim): the transpose of expand_blocks.
template <size_t BS>
inline void fold_fixed(const float* acc, size_t n, float* out) {
  for (size_t J = 0; J < n; ++J) {
    float sum = 0.0f;
    for (size_t t = 0; t < BS; ++t) sum += acc[J * BS + t];
    out[J] = sum;
  }
}
inline void fold_blocks(const float* acc, size_t bs, size_t lim, float* out) {
  const size_t full = lim / bs;
  if (!with_fixed_block(bs, [&](auto B) { fold_fixed<decltype(B)::value>(acc, full, out); }))
    for (size_t J = 0; J < full; ++J) {
      float sum = 0.0f;
      for (size_t j = J * bs; j < (J + 1) * bs; ++j) sum += acc[j];
      out[J] = sum;
    }
  if (full * bs < lim) {
    float sum = 0.0f;
    for (size_t j = full * bs; j < lim; ++j) sum += acc[j];
    out[full] = sum;
  }
}

// out[J] = the sum over block J (columns j < lim) of the column sums of NROWS rows (LD
// apart): each column summed over the rows in order, then the block's columns in order, as
// axpy into a zeroed ACC followed by fold_blocks. Two rows and blocks of 2 (stride 2) take
// one pass without ACC; the leading 0 + keeps the sign of an all-zero sum the same.
inline void fold_rows(const float* rows, size_t ld, size_t nrows, size_t bs, size_t lim, float* acc,
                      float* out) {
  if (bs == 2 && nrows == 2) {
    gf_hkt::kernels::fold_pairs2(out, rows, rows + ld, lim);
    return;
  }
  std::fill(acc, acc + lim, 0.0f);
  for (size_t a = 0; a < nrows; ++a) gf::kernels::axpy(acc, rows + a * ld, lim, 1.0f);
  fold_blocks(acc, bs, lim, out);
}

// k_l^T (d_k x T_l) of sample b for every level, into KT (d_k x sum T_l); KLT[l] points at
// level l's part.
inline void transpose_levels(const Geom& g, const std::vector<gf::Var>& k, size_t b, float* kt,
                             const float** klt) {
  for (size_t l = 0; l < g.L; ++l) {
    const size_t n = g.Tl[l];
    transpose_into(k[l].value().data() + b * n * g.dk, n, g.dk, kt);
    klt[l] = kt;
    kt += g.dk * n;
  }
}

// tile_scores without the causal limits and with coarse levels: every row of a level-l block
// adds the same row of S_l, so the coarse levels are summed coarse to fine on their own grids,
// C_{L-1} = S_{L-1}, C_l = S_l + up_s(C_{l+1}) (block indices nest: i / s^l = (i / s^(l-1)) / s),
// and each T-wide row takes a single add, of up_s(C_1) plus the padding bias, left to fin.
template <class Fin>
inline void nested_levels(const Geom& g, const std::vector<gf::Var>& q, const float* const* klt,
                          const float* lb, size_t b, size_t i0, size_t r, size_t jmax, float* S,
                          float* up, const float* bias, bool padded, Fin& fin) {
  const size_t dk = g.dk;
  const size_t s = g.blk[1];
  std::vector<size_t> off(g.L + 1, 0), I0(g.L), nI(g.L);
  for (size_t l = 1; l < g.L; ++l) {
    I0[l] = i0 / g.blk[l];  // a multiple of the coarsest block: the grids nest exactly
    nI[l] = (i0 + r + g.blk[l] - 1) / g.blk[l] - I0[l];
    off[l + 1] = off[l] + nI[l] * g.Tl[l];
  }
  float* cbuf = scratch(Buf::coarse, off[g.L]).data();
  for (size_t l = g.L - 1; l >= 1; --l) {
    const size_t n = g.Tl[l];
    float* cl = cbuf + off[l];
    gf::kernels::gemm_short_k(nI[l], n, dk, lb[l] * g.scale,
                              q[l].value().data() + (b * n + I0[l]) * dk, dk, klt[l], n, cl, n);
    if (l + 1 < g.L) {
      const float* cc = cbuf + off[l + 1];
      for (size_t I = 0; I < nI[l]; ++I) {
        const float* cr = cc + ((I0[l] + I) / s - I0[l + 1]) * g.Tl[l + 1];
        if (s == 2) {  // the same sums without writing the expanded row
          gf_hkt::kernels::add_up2(cl + I * n, cr, n);
        } else {
          expand_blocks(cr, s, n, up);
          gf::kernels::axpy(cl + I * n, up, n, 1.0f);
        }
      }
    }
  }
  const float* c1 = cbuf + off[1];
  const bool half = s == 2 && !padded;  // fin adds c1's rows on their own grid
  for (size_t I = 0; I < nI[1]; ++I) {
    const float* add = c1 + I * g.Tl[1];
    if (!half) {
      expand_blocks(add, s, jmax, up);
      if (padded) gf::kernels::axpy(up, bias, jmax, 1.0f);
      add = up;
    }
    const size_t a0 = (I0[1] + I) * s - i0, a1 = std::min(r, a0 + s);
    for (size_t a = a0; a < a1; ++a) fin(a, S + a * jmax, add, half);
  }
}

// Scores of query rows [i0, i0 + r) of sample b against keys [0, jmax) into S (r x jmax),
// masked entries -inf. KLT[l] is k_l^T (d_k x T_l) of this sample. Each row is handed to
// fin(a, row, up, half) as soon as it is ready (while it is still in L1): the score row is
// row + up, with up a T-wide row to add (the coarse levels and the padding), or, when half
// is true, row + up2(up) with up on the stride-2 grid (up2(c)[j] = c[j / 2], see
// gf_hkt::kernels::add_max_up2); up is null when the row is already complete.
template <class Fin>
inline void tile_scores(const Geom& g, const std::vector<gf::Var>& q, const float* const* klt,
                        const float* lb, size_t b, size_t i0, size_t r, size_t jmax, float* S,
                        Fin&& fin) {
  const size_t T = g.T, dk = g.dk;
  // every level's product has the short d_k inner dimension: in registers (see
  // kernels::gemm_short_k), without BLAS packing
  gf::kernels::gemm_short_k(r, jmax, dk, lb[0] * g.scale, q[0].value().data() + (b * T + i0) * dk,
                            dk, klt[0], T, S, jmax);
  float* up = scratch(Buf::up_row, T).data();
  const uint8_t* vb = g.valid ? g.valid + b * T : nullptr;
  float* bias = scratch(Buf::pad_bias, T).data();
  const bool padded = vb && std::find(vb, vb + jmax, uint8_t{0}) != vb + jmax;
  if (padded)
    for (size_t j = 0; j < jmax; ++j) bias[j] = vb[j] ? 0.0f : -INFINITY;
  if (!g.causal && g.L > 1) {
    nested_levels(g, q, klt, lb, b, i0, r, jmax, S, up, bias, padded, fin);
    return;
  }
  for (size_t l = 1; l < g.L; ++l) {
    const size_t n = g.Tl[l], bs = g.blk[l];
    const size_t I0 = i0 / bs, I1 = (i0 + r + bs - 1) / bs;  // tile rows cover whole blocks
    float* sl = scratch(Buf::coarse, (I1 - I0) * n).data();
    gf::kernels::gemm_short_k(I1 - I0, n, dk, lb[l] * g.scale,
                              q[l].value().data() + (b * n + I0) * dk, dk, klt[l], n, sl, n);
    for (size_t I = I0; I < I1; ++I) {
      // The rows of block I share S_l[I, :]: expand it once, add it to each row's usable prefix.
      const float* sr = sl + (I - I0) * n;
      const size_t i1 = std::min(i0 + r, (I + 1) * bs);
      const size_t lim_max = g.causal ? std::min(jmax, causal_blocks(i1 - 1, bs) * bs) : jmax;
      expand_blocks(sr, bs, lim_max, up);
      for (size_t i = I * bs; i < i1; ++i) {
        const size_t lim = g.causal ? std::min(jmax, causal_blocks(i, bs) * bs) : jmax;
        gf::kernels::axpy(S + (i - i0) * jmax, up, lim, 1.0f);
      }
    }
  }
  for (size_t a = 0; a < r; ++a) {
    float* row = S + a * jmax;
    if (padded) gf::kernels::axpy(row, bias, jmax, 1.0f);
    if (g.causal) std::fill(row + i0 + a + 1, row + jmax, -INFINITY);
    fin(a, row, static_cast<const float*>(nullptr), false);
  }
}

}  // namespace detail

namespace detail {

// The geometry of a call, its inputs checked: levels' lengths and blocks, the tile rows.
inline Geom make_geom(const std::vector<gf::Var>& q, const std::vector<gf::Var>& k,
                      const gf::Var& v, const gf::Var& logits, const FusedSpec& spec) {
  const size_t L = q.size();
  if (L == 0 || k.size() != L) throw std::invalid_argument("hkt_attend: need L >= 1 q and k sets");
  if (v.shape().size() != 3) throw std::invalid_argument("hkt_attend: v must be (B, T, d_v)");
  if (spec.stride < 2 && L > 1) throw std::invalid_argument("hkt_attend: stride must be >= 2");
  const size_t B = v.dim(0), T = v.dim(1), dv = v.dim(2);
  const size_t dk = q[0].shape().size() == 3 ? q[0].dim(2) : 0;
  Geom g;
  g.B = B, g.T = T, g.L = L, g.dk = dk, g.dv = dv;
  g.Tl.resize(L);
  g.blk.resize(L);
  for (size_t l = 0; l < L; ++l) {
    g.blk[l] = l == 0 ? 1 : g.blk[l - 1] * spec.stride;
    g.Tl[l] = (T + g.blk[l] - 1) / g.blk[l];
    for (const gf::Var* x : {&q[l], &k[l]}) {
      const auto& s = x->shape();
      if (s.size() != 3 || s[0] != B || s[1] != g.Tl[l] || s[2] != dk)
        throw std::invalid_argument("hkt_attend: level " + std::to_string(l) + " q/k has shape " +
                                    gf::shape_str(s) + ", expected (" + std::to_string(B) + ", " +
                                    std::to_string(g.Tl[l]) + ", " + std::to_string(dk) + ")");
    }
  }
  const bool per_sample = logits.shape().size() == 2;
  if (logits.size() != (per_sample ? B * L : L) || (per_sample && logits.dim(0) != B))
    throw std::invalid_argument("hkt_attend: logits must be (L) or (B, L), got " +
                                gf::shape_str(logits.shape()));
  if (spec.key_valid && spec.key_valid->size() != B * T)
    throw std::invalid_argument("hkt_attend: key_valid must have B*T entries");
  // Tiles hold whole blocks of the coarsest level.
  const size_t top = g.blk[L - 1];
  g.br = std::max<size_t>(1, (gf::kernels::attention_block_rows() + top - 1) / top) * top;
  g.scale = spec.scale;
  g.causal = spec.causal;
  return g;
}

// The input the result's gradient goes through, or null when none requires one.
inline const gf::Var* grad_input(const std::vector<gf::Var>& q, const std::vector<gf::Var>& k,
                                 const gf::Var& v, const gf::Var& logits) {
  for (size_t l = 0; l < q.size(); ++l) {
    if (q[l].requires_grad()) return &q[l];
    if (k[l].requires_grad()) return &k[l];
  }
  if (v.requires_grad()) return &v;
  if (logits.requires_grad()) return &logits;
  return nullptr;
}

// The forward pass over every (sample, tile): OUT (B, T, d_v) and, when LSE is defined, each
// row's log-sum-exp (+inf for a row with no valid key). Every (sample, tile) is independent:
// the split does not change any result.
inline void forward_tiles(const Geom& g, const std::vector<gf::Var>& q, const float* const* klt,
                          const float* lam, const gf::Var& v, gf::Tensor& out, gf::Tensor& lse) {
  const size_t T = g.T, L = g.L, dv = g.dv, tiles = g.tiles();
  const bool keep_lse = lse.defined();
  gf::parallel_for(g.B * tiles, [&](size_t task) {
    const size_t b = task / tiles, i0 = (task % tiles) * g.br, r = std::min(g.br, T - i0);
    const size_t jmax = g.causal ? i0 + r : T;
    float* S = scratch(Buf::tile, r * jmax).data();
    float* inv = scratch(Buf::row_inv, r).data();
    tile_scores(g, q, klt + b * L, lam + b * L, b, i0, r, jmax, S,
                [&](size_t a, float* row, const float* up, bool half) {
                  const float mx = !up    ? gf::kernels::row_max(row, jmax)
                                   : half ? gf_hkt::kernels::add_max_up2(row, up, jmax)
                                          : gf_hkt::kernels::add_max(row, up, jmax);
                  if (mx == -INFINITY) {
                    std::fill(row, row + jmax, 0.0f);
                    if (keep_lse) lse[b * T + i0 + a] = INFINITY;
                    inv[a] = 0.0f;
                    return;
                  }
                  const float sum = gf::kernels::exp_shift_sum(row, jmax, mx);
                  inv[a] = 1.0f / sum;
                  if (keep_lse) lse[b * T + i0 + a] = mx + std::log(sum);
                });
    gf::kernels::gemm_acc_nd_rows(r, jmax, dv, inv, S, jmax, v.value().data() + b * T * dv, dv,
                                  out.data() + (b * T + i0) * dv, dv);
  });
}

// The backward pass of hkt_attend: what it keeps of the forward pass, and the gradients of one
// sample's tiles.
struct Backward {
  gf::Var res;
  std::vector<gf::Var> q, k;
  gf::Var v, logits;
  gf::Tensor lse;          // the rows' log-sum-exp
  std::vector<float> lam;  // lambda (B, L)
  Geom g;
  std::shared_ptr<std::vector<uint8_t>> keep;  // the key mask g.valid points into
  bool per_sample;
  gf::Tensor kt;  // every level's k_l^T per sample (d_k x sum T_l floats)
  size_t ktn;

  // the gradient buffers of the inputs that require one (null otherwise)
  struct Grads {
    std::vector<float*> q, k;
    float* v = nullptr;
    std::vector<double> lam;  // d lambda (B, L)
  };
  // per thread and kept between calls: freed and reallocated per sample, these went back to
  // the system and page-faulted again (17,305 against 2,887 faults for 60 calls at L = 3
  // against L = 1)
  struct LevelBufs {
    std::vector<float> dsl, dsl_prev, G, acc;
  };
  // one tile of a sample
  struct Tile {
    size_t b, i0, r, jmax;
    const float* gob;  // dO rows of the tile
    const float* ob;   // the sample's output rows
    float* ds;         // dS (r x jmax)
  };
  // a level's dS_l of a tile: NI rows of NCOLS (leading dimension LD)
  struct LevelGrad {
    const float* dsp;
    size_t ncols, ld;
  };

  void operator()() {
    if (!res.grad().defined()) return;
    Grads gr;
    gr.q.assign(g.L, nullptr);
    gr.k.assign(g.L, nullptr);
    for (size_t l = 0; l < g.L; ++l) {
      if (q[l].requires_grad()) gr.q[l] = q[l].node()->grad_buf().data();
      if (k[l].requires_grad()) gr.k[l] = k[l].node()->grad_buf().data();
    }
    gr.v = v.requires_grad() ? v.node()->grad_buf().data() : nullptr;
    gr.lam.assign(g.B * g.L, 0.0);
    // One task per sample: its tiles run in order, so every sum has a fixed order.
    gf::parallel_for(g.B, [&](size_t b) { sample(b, gr); });
    if (logits.requires_grad()) logits_backward(gr.lam);
  }

  void sample(size_t b, Grads& gr) const {
    const size_t T = g.T, L = g.L, dk = g.dk, dv = g.dv;
    const float* lb = lam.data() + b * L;
    const float* vb = v.value().data() + b * T * dv;
    thread_local LevelBufs bufs;
    if (bufs.acc.size() < T) bufs.acc.resize(T);
    std::vector<const float*> klt(L);
    const float* ktb = kt.data() + b * ktn;
    for (size_t l = 0; l < L; ++l) {
      klt[l] = ktb;
      ktb += dk * g.Tl[l];
    }
    float* vt = scratch(Buf::v_t, dv * T).data();
    transpose_into(vb, T, dv, vt);
    for (size_t t = 0; t < g.tiles(); ++t) {
      Tile tl;
      tl.b = b;
      tl.i0 = t * g.br;
      tl.r = std::min(g.br, T - tl.i0);
      tl.jmax = g.causal ? tl.i0 + tl.r : T;
      tl.gob = res.grad().data() + (b * T + tl.i0) * dv;
      tl.ob = res.value().data() + b * T * dv;
      float* P = scratch(Buf::tile, tl.r * tl.jmax).data();
      tl.ds = scratch(Buf::score_grad, tl.r * tl.jmax).data();
      const size_t jmax = tl.jmax, i0 = tl.i0;
      // P = exp(S - lse), the coarse addend folded into the exp's pass
      tile_scores(g, q, klt.data(), lb, b, i0, tl.r, jmax, P,
                  [&](size_t a, float* row, const float* up, bool half) {
                    const float shift = lse[b * T + i0 + a];
                    if (!up)
                      gf::kernels::exp_shift(row, jmax, shift);
                    else if (half)
                      gf_hkt::kernels::exp_add_up2_shift(row, up, jmax, shift);
                    else
                      gf_hkt::kernels::exp_add_shift(row, up, jmax, shift);
                  });
      if (gr.v)  // dV = P^T dO
        gf::kernels::gemm_acc_tnd(tl.r, jmax, dv, 1.0f, P, jmax, tl.gob, dv, gr.v + b * T * dv, dv);
      // dP = dO v^T, then dS = P * (dP - rowsum(P * dP)); rowsum(P * dP) = dO_i . out_i.
      gf::kernels::gemm_short_k(tl.r, jmax, dv, 1.0f, tl.gob, dv, vt, T, tl.ds, jmax);
      score_grads(tl, P, bufs);
      size_t prev_cols = 0;  // columns of the previous level's dS_l
      for (size_t l = 0; l < L; ++l) {
        const LevelGrad lg = level_grad(tl, l, prev_cols, bufs);
        prev_cols = lg.ncols;
        level_backward(tl, l, lg, lb, gr, bufs);
      }
    }
  }

  // Two-way: each level-1 block of dS rows is folded into dS_1 as soon as its rows are done,
  // while they are in L1 (the same sums as folding the tile afterwards).
  bool fold_now() const { return !g.causal && g.L > 1; }

  // dS = P * (dP - rowsum(P * dP)) row by row, and (fold_now) dS_1 of the finished blocks.
  void score_grads(const Tile& tl, const float* P, LevelBufs& bufs) const {
    const size_t jmax = tl.jmax, dv = g.dv, i0 = tl.i0;
    const size_t s1 = fold_now() ? g.blk[1] : 1, I0_1 = i0 / s1;
    const size_t ncols1 = (jmax + s1 - 1) / s1;
    if (fold_now()) bufs.dsl.resize(((i0 + tl.r + s1 - 1) / s1 - I0_1) * ncols1);
    for (size_t a = 0; a < tl.r; ++a) {
      const float rs = gf::kernels::dot(tl.gob + a * dv, tl.ob + (i0 + a) * dv, dv);
      gf::kernels::softmax_grad_row(tl.ds + a * jmax, P + a * jmax, jmax, rs, 1.0f);
      if (fold_now() && ((i0 + a + 1) % s1 == 0 || a + 1 == tl.r)) {
        const size_t I = (i0 + a) / s1, a0 = I * s1 - i0;
        fold_rows(tl.ds + a0 * jmax, jmax, a + 1 - a0, s1, jmax, bufs.acc.data(),
                  bufs.dsl.data() + (I - I0_1) * ncols1);
      }
    }
  }

  // dS_l of the tile: this tile's blocks of dS summed.
  LevelGrad level_grad(const Tile& tl, size_t l, size_t prev_cols, LevelBufs& bufs) const {
    const size_t jmax = tl.jmax, i0 = tl.i0, r = tl.r, bs = g.blk[l];
    const size_t I0 = i0 / bs, I1 = (i0 + r + bs - 1) / bs, nI = I1 - I0;
    if (l == 0) return {tl.ds, jmax, jmax};
    if (fold_now() && l == 1) {  // folded in score_grads
      const size_t s1 = g.blk[1], ncols1 = (jmax + s1 - 1) / s1;
      return {bufs.dsl.data(), ncols1, ncols1};
    }
    if (!g.causal) {  // l >= 2
      // Without the causal limits the blocks nest: dS_l is dS_{l-1} summed over s x s blocks
      // (rows first, then columns), not a second pass over dS.
      const size_t st = g.blk[1], prev_rows = bufs.dsl.size() / prev_cols;
      std::swap(bufs.dsl, bufs.dsl_prev);
      const size_t ncols = (prev_cols + st - 1) / st;
      bufs.dsl.resize(nI * ncols);  // fold_rows writes every element
      for (size_t I = 0; I < nI; ++I)
        fold_rows(bufs.dsl_prev.data() + I * st * prev_cols, prev_cols,
                  std::min(prev_rows, (I + 1) * st) - I * st, st, prev_cols, bufs.acc.data(),
                  bufs.dsl.data() + I * ncols);
      return {bufs.dsl.data(), ncols, ncols};
    }
    // Causal: each row of block I adds its usable prefix (the rows first, contiguous adds),
    // then the columns fold into blocks; columns past the limits stay 0.
    const size_t ncols = (jmax + bs - 1) / bs;
    bufs.dsl.assign(nI * ncols, 0.0f);
    for (size_t I = I0; I < I1; ++I) {
      const size_t i1 = std::min(i0 + r, (I + 1) * bs);
      const size_t lim_max = std::min(jmax, causal_blocks(i1 - 1, bs) * bs);
      std::fill(bufs.acc.begin(), bufs.acc.begin() + lim_max, 0.0f);
      for (size_t i = I * bs; i < i1; ++i) {
        const size_t lim = std::min(jmax, causal_blocks(i, bs) * bs);
        gf::kernels::axpy(bufs.acc.data(), tl.ds + (i - i0) * jmax, lim, 1.0f);
      }
      fold_blocks(bufs.acc.data(), bs, lim_max, bufs.dsl.data() + (I - I0) * ncols);
    }
    return {bufs.dsl.data(), ncols, ncols};
  }

  // G = dS_l k_l; dq_l = c_l G, dk_l = c_l dS_l^T q_l, d lambda_l = scale * sum_I q_l[I] . G[I].
  void level_backward(const Tile& tl, size_t l, const LevelGrad& lg, const float* lb, Grads& gr,
                      LevelBufs& bufs) const {
    const size_t b = tl.b, n = g.Tl[l], bs = g.blk[l], dk = g.dk;
    const size_t I0 = tl.i0 / bs, I1 = (tl.i0 + tl.r + bs - 1) / bs, nI = I1 - I0;
    const float c = lb[l] * g.scale;
    const float* qb = q[l].value().data() + (b * n + I0) * dk;
    const float* kb = k[l].value().data() + b * n * dk;
    std::vector<float>& G = bufs.G;
    G.assign(nI * dk, 0.0f);
    gf::kernels::gemm_acc_nd(nI, lg.ncols, dk, 1.0f, lg.dsp, lg.ld, kb, dk, G.data(), dk);
    // four independent chains (one serial chain of double adds was a quarter of this loop
    // body's time), summed in a fixed order
    double d4[4] = {0.0, 0.0, 0.0, 0.0};
    size_t x = 0;
    for (; x + 4 <= nI * dk; x += 4)
      for (size_t u = 0; u < 4; ++u) d4[u] += static_cast<double>(qb[x + u]) * G[x + u];
    for (; x < nI * dk; ++x) d4[0] += static_cast<double>(qb[x]) * G[x];
    gr.lam[b * g.L + l] += ((d4[0] + d4[1]) + (d4[2] + d4[3])) * g.scale;
    if (gr.q[l]) gf::kernels::axpy(gr.q[l] + (b * n + I0) * dk, G.data(), nI * dk, c);
    if (gr.k[l])
      gf::kernels::gemm_acc_tnd(nI, lg.ncols, dk, c, lg.dsp, lg.ld, qb, dk, gr.k[l] + b * n * dk,
                                dk);
  }

  // Softmax backward: d z = lambda * (d lambda - sum lambda d lambda).
  void logits_backward(const std::vector<double>& dlam) const {
    const size_t L = g.L;
    float* gz = logits.node()->grad_buf().data();
    for (size_t b = 0; b < g.B; ++b) {
      const float* lb = lam.data() + b * L;
      const double* db = dlam.data() + b * L;
      double dot = 0.0;
      for (size_t l = 0; l < L; ++l) dot += lb[l] * db[l];
      float* gzb = gz + (per_sample ? b * L : 0);
      for (size_t l = 0; l < L; ++l) gzb[l] += static_cast<float>(lb[l] * (db[l] - dot));
    }
  }
};

}  // namespace detail

/// q[l], k[l]: (B, T_l, d_k); v: (B, T, d_v); logits: (L) shared or (B, L) per sample
/// (lambda = softmax(logits)). Returns (B, T, d_v). Gradients reach every q_l, k_l, v
/// and the logits. A query row with no valid key gives 0.
inline gf::Var hkt_attend(const std::vector<gf::Var>& q, const std::vector<gf::Var>& k,
                          const gf::Var& v, const gf::Var& logits, const FusedSpec& spec) {
  detail::Geom g = detail::make_geom(q, k, v, logits, spec);
  const size_t B = g.B, T = g.T, L = g.L, dk = g.dk;
  const bool per_sample = logits.shape().size() == 2;
  // the caller's mask may be gone by the backward pass: keep a copy
  auto keep = spec.key_valid ? std::make_shared<std::vector<uint8_t>>(*spec.key_valid) : nullptr;
  g.valid = keep ? keep->data() : nullptr;

  // lambda per sample (B, L)
  std::vector<float> lam(B * L);
  for (size_t b = 0; b < B; ++b)
    detail::softmax_logits(logits.value().data() + (per_sample ? b * L : 0), L, lam.data() + b * L);

  // Any input with a gradient makes the result require one.
  const gf::Var* any = detail::grad_input(q, k, v, logits);
  const bool backward_pass = any && gf::grad_enabled();

  gf::Tensor out(gf::Shape{B, T, g.dv}, 0.0f);
  // the row log-sum-exp, for the backward pass only; +inf marks a row with no valid key
  gf::Tensor lse = backward_pass ? gf::Tensor::empty({B, T}) : gf::Tensor();
  size_t ktn = 0;  // d_k x sum T_l floats per sample: every level's k_l^T
  for (size_t l = 0; l < L; ++l) ktn += dk * g.Tl[l];
  gf::Tensor kt = gf::Tensor::empty({B, ktn});
  std::vector<const float*> klt(B * L);
  gf::parallel_for(B, [&](size_t b) {
    detail::transpose_levels(g, k, b, kt.data() + b * ktn, klt.data() + b * L);
  });
  detail::forward_tiles(g, q, klt.data(), lam.data(), v, out, lse);

  gf::Var res = gf::make_result(std::move(out), {any});
  if (!res.requires_grad()) return res;
  // the backward pass recomputes the scores from the same k_l^T (kept: O(B T d_k) floats)
  gf::record(detail::Backward{res, q, k, v, logits, lse, lam, g, keep, per_sample, kt, ktn});
  return res;
}

}  // namespace gf_hkt
