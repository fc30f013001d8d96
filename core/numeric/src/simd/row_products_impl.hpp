// Row kernels, part 2 of 3: the products (one short dimension, the linear layers' packed
// panels, bias epilogues). Included through row_kernels_impl.hpp; see row_elementwise_impl.hpp.
#pragma once

#include "row_elementwise_impl.hpp"

namespace gf {
namespace kernels {
namespace simd {
namespace {

// ---- products with one short dimension ------------------------------------------
// Register tiles of R rows x NC vectors; the short dimension d is walked in chunks of
// NC * W columns, its remainder (d % W) by scalar loops. Every output element sums its
// products in order (one FMA chain from 0), whatever the tile it falls in, so the row
// tiling changes no result.

// The products' multiply-adds, vector and scalar, fused exactly where the set has FMA (a
// multiply and an add on SSE2), so that a column's bits do not depend on whether it falls in
// a vector or in the scalar tail; neither is left to the compiler (why: growformer/simd_exp.hpp).
inline B vfma(B a, B b, B c) { return gf::simd_exp::vfma<A>(a, b, c); }
inline float lane_fma(float a, float b, float c) {
#ifdef __FMA__
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// Rows per register tile: RM x 2 vectors of accumulators plus 2 loaded vectors and one
// broadcast fit the 16 registers of SSE2/AVX2 (AVX-512 has 32). Twelve independent FMA
// chains cover the FMA latency x throughput of current x86 cores (e.g. 5 x 2); eight did not.
constexpr size_t RM = 6;
// Vectors per tile row where n allows: AVX-512's 32 registers hold RM x 4 accumulators, 4
// loaded vectors and a broadcast (6 broadcasts per 24 multiply-adds instead of per 12).
constexpr size_t NCW = W == 16 ? 4 : 2;

// acc[r][v] = sum_q X[row i + r, q] Y[q, c0 + v W : ...] (R x NC vectors) over q < len, with
// TRANS the rows are columns of X: X[q, i + r]; then EPI(acc[r][v], row i + r, column c0 + v W)
// consumes each vector.
template <size_t R, size_t NC, bool TRANS, class Epi>
inline void fma_tile(size_t i, size_t c0, size_t len, const float* x, size_t ldx, const float* y,
                     size_t ldy, Epi& epi) {
  // Every loop over the tile fully unrolled: GCC left a 6 x 4 tile's accumulators in memory
  // outside the q loop (zeroed, stored and reloaded through the stack for the epilogue).
  B acc[R][NC];
#pragma GCC unroll 32
  for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (size_t v = 0; v < NC; ++v) acc[r][v] = B(0.0f);
  for (size_t q = 0; q < len; ++q) {
    B yv[NC];
#pragma GCC unroll 8
    for (size_t v = 0; v < NC; ++v) yv[v] = B::load_unaligned(y + q * ldy + c0 + v * W);
#pragma GCC unroll 32
    for (size_t r = 0; r < R; ++r) {
      B xv(TRANS ? x[q * ldx + i + r] : x[(i + r) * ldx + q]);
#pragma GCC unroll 8
      for (size_t v = 0; v < NC; ++v) acc[r][v] = vfma(xv, yv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (size_t v = 0; v < NC; ++v) epi(acc[r][v], i + r, c0 + v * W);
}

// Columns past the last whole vector (n % W of them: a head narrower than a register, or a
// width's remainder) run in vector lanes too: the product's caller copies them, zero-padded to
// W, into YTAIL (len x W), and only their lanes are handed to ES. A lane's chain is the
// scalar loop's (lane_fma in the same order), so a column's bits do not depend on whether it
// falls in a whole vector, a padded one or neither; the padded lanes' sums are dropped.
template <class ES>
struct TailEpi {
  ES& es;
  size_t c0, nt;
  inline void operator()(B acc, size_t r, size_t) {
    alignas(64) float lanes[W];
    acc.store_aligned(lanes);
    for (size_t u = 0; u < nt; ++u) es(lanes[u], r, c0 + u);
  }
};

// Rows i .. i + R - 1 of OUT (m x n) = epi(X (m x len) Y (len x n)), or with TRANS X^T;
// EV(vector, row, column) takes W columns, ES(sum, row, column) one (the last n % W).
// Column chunks of NC vectors (NC * R chains in registers), then 2, then 1.
template <size_t R, size_t NC, bool TRANS, class EV, class ES>
inline void product_rows(size_t i, size_t n, size_t len, const float* x, size_t ldx, const float* y,
                         size_t ldy, const float* ytail, EV& ev, ES& es) {
  size_t c0 = 0;
  if (NC > 2)
    for (; c0 + NC * W <= n; c0 += NC * W) fma_tile<R, NC, TRANS>(i, c0, len, x, ldx, y, ldy, ev);
  for (; c0 + 2 * W <= n; c0 += 2 * W) fma_tile<R, 2, TRANS>(i, c0, len, x, ldx, y, ldy, ev);
  for (; c0 + W <= n; c0 += W) fma_tile<R, 1, TRANS>(i, c0, len, x, ldx, y, ldy, ev);
  if (c0 >= n) return;
  if (ytail) {
    TailEpi<ES> te{es, c0, n - c0};
    fma_tile<R, 1, TRANS>(i, 0, len, x, ldx, ytail, W, te);
    return;
  }
  for (; c0 < n; ++c0)
    for (size_t r = 0; r < R; ++r) {
      float s = 0.0f;
      for (size_t q = 0; q < len; ++q)
        s = lane_fma(TRANS ? x[q * ldx + i + r] : x[(i + r) * ldx + q], y[q * ldy + c0], s);
      es(s, i + r, c0);
    }
}

// product_rows as a function of its own: each tile shape gets its own register allocation
// (inlined into one caller, the 6-row loop of dQ += dS K ran at 62 instead of 97 GFLOP/s,
// its row pointers spilled to the stack).
template <size_t R, size_t NC, bool TRANS, class EV, class ES>
__attribute__((noinline)) void product_rows_call(size_t i, size_t n, size_t len, const float* x,
                                                 size_t ldx, const float* y, size_t ldy,
                                                 const float* ytail, EV& ev, ES& es) {
  product_rows<R, NC, TRANS>(i, n, len, x, ldx, y, ldy, ytail, ev, es);
}

// A per-thread scratch buffer of at least N floats, 64-byte aligned, kept between calls (plain
// C allocation: no std:: templates in this translation unit).
struct TailScratch {
  float* buf = nullptr;
  size_t cap = 0;
  ~TailScratch() { ::free(buf); }  // at thread exit (a leak checker sees no lost block)
};
inline float* grown_to(TailScratch& s, size_t n) {
  if (s.cap < n) {
    ::free(s.buf);
    s.cap = n + n / 2 + 64;
    s.buf = static_cast<float*>(::aligned_alloc(64, (s.cap * sizeof(float) + 63) / 64 * 64));
  }
  return s.buf;
}
inline float* tail_scratch(size_t n) {
  static thread_local TailScratch s;
  return grown_to(s, n);
}
// A second per-thread buffer, for product's column panels (pad_tail uses the first).
inline float* panel_scratch(size_t n) {
  static thread_local TailScratch s;
  return grown_to(s, n);
}

// The last n % W columns of Y (len x n, ldy) zero-padded to W, or null when there are none.
inline const float* pad_tail(size_t n, size_t len, const float* y, size_t ldy) {
  const size_t nt = n % W;
  if (nt == 0 || len == 0) return nullptr;
  float* yp = tail_scratch(len * W);
  const float* ys = y + (n - nt);
  for (size_t q = 0; q < len; ++q) {
    float* o = yp + q * W;
    for (size_t u = 0; u < nt; ++u) o[u] = ys[q * ldy + u];
    for (size_t u = nt; u < W; ++u) o[u] = 0.0f;
  }
  return yp;
}

template <bool TRANS, size_t R0, class EV, class ES>
inline void product_block(size_t m, size_t n, size_t len, const float* x, size_t ldx,
                          const float* y, size_t ldy, EV& ev, ES& es) {
  const float* yt = pad_tail(n, len, y, ldy);
  size_t i = 0;
  // One vector of columns or less (a head width of 16 at AVX-512): 6 rows would be only 6 FMA
  // chains; 12 rows x 1 vector keep 12 (14 registers, so AVX2 too). 1.37x at 128 x 512 x 16.
  if (n < 2 * W) {
    for (; i + 2 * RM <= m; i += 2 * RM)
      product_rows_call<2 * RM, 1, TRANS>(i, n, len, x, ldx, y, ldy, yt, ev, es);
    // the 8 rows left of a 128-row attention tile: 8 chains, not a 6-row and a 2-row tile
    for (; i + 8 <= m; i += 8)
      product_rows_call<8, 1, TRANS>(i, n, len, x, ldx, y, ldy, yt, ev, es);
  }
  for (; i + R0 <= m; i += R0)
    product_rows_call<R0, R0 == RM ? NCW : 2, TRANS>(i, n, len, x, ldx, y, ldy, yt, ev, es);
  // Few rows and wide rows (a narrow head's product turned on its side): more vectors per
  // row keep 8 to 12 chains in flight.
  for (; i + 4 <= m; i += 4) product_rows_call<4, 3, TRANS>(i, n, len, x, ldx, y, ldy, yt, ev, es);
  for (; i + 2 <= m; i += 2) product_rows_call<2, 4, TRANS>(i, n, len, x, ldx, y, ldy, yt, ev, es);
  for (; i < m; ++i) product_rows_call<1, 8, TRANS>(i, n, len, x, ldx, y, ldy, yt, ev, es);
}

// A large Y (len x n over 256 KiB) is copied, in panels of columns that stay in the level-2
// cache (512 KiB), to contiguous rows, and every row tile passes over a panel before the next.
// Read in place, each 6-row tile streamed all of Y from the last level, its rows a power of two
// apart (8 KiB at n 2048) and so in a few cache sets that evicted each other: the linear layers
// of d 512 ran at 40..65 GFLOP/s on an Intel Xeon (one core, AVX-512), packed at 150..165
// (docs/results/speed.md). A panel is whole 4-vector tiles wide, so each column keeps its FMA chain
// (the same q order) and the bits do not change.
// PV: Y packed once by the caller (kernels::pack_panels, the same panels) for every thread of a
// product split by rows; Y's column 0 is the packed column COL0. Read as they are, no copy.
constexpr size_t kPanelBytes = 512 * 1024;
constexpr size_t kPackBytes = 256 * 1024;
// The panel width for Y (len x n) over m rows of tiles of R0, or 0: read in place.
inline size_t panel_cols(size_t m, size_t len, size_t n, size_t r0) {
  constexpr size_t kTile = NCW * W;
  // one pass of the rows, or a Y small enough to stay cached as it is: read in place, whole
  if (!(m > r0 && len * n * sizeof(float) > kPackBytes)) return 0;
  size_t nb = kPanelBytes / (len * sizeof(float)) / kTile * kTile;
  return nb < kTile ? kTile : (nb > n ? n : nb);
}
// An epilogue (EV or ES) for a block of columns that starts at column CB of the whole product.
// One named type for the packed, the caller-packed and the in-place paths, so that each epilogue
// instantiates the tile functions once (two lambda types doubled this file's object code).
template <class E>
struct ColumnsFrom {
  E e;
  size_t cb;
  template <class V>
  void operator()(V v, size_t r, size_t j) const {
    e(v, r, cb + j);
  }
};
template <bool TRANS, size_t R0 = RM, class EV, class ES>
inline void product(size_t m, size_t n, size_t len, const float* x, size_t ldx, const float* y,
                    size_t ldy, EV ev, ES es, const PanelView* pv = nullptr, size_t col0 = 0) {
  if (pv && pv->data) {
    for (size_t cb = 0; cb < n;) {
      const size_t g = col0 + cb, p0 = g / pv->nb * pv->nb;
      const size_t pw = pv->n - p0 < pv->nb ? pv->n - p0 : pv->nb;  // the panel's width
      const size_t w = pw - (g - p0) < n - cb ? pw - (g - p0) : n - cb;
      ColumnsFrom<EV> evb{ev, cb};
      ColumnsFrom<ES> esb{es, cb};
      product_block<TRANS, R0>(m, w, len, x, ldx, pv->data + pv->len * p0 + (g - p0), pw, evb, esb);
      cb += w;
    }
    return;
  }
  const size_t pc = panel_cols(m, len, n, R0);
  const bool pack = pc > 0;
  const size_t nb = pack ? pc : n;
  float* panel = pack ? panel_scratch(len * nb) : nullptr;
  for (size_t cb = 0; cb < n; cb += nb) {
    const size_t w = n - cb < nb ? n - cb : nb;
    const float* yb = y + cb;
    size_t ldb = ldy;
    if (pack) {
      for (size_t q = 0; q < len; ++q)
        for (size_t j = 0; j < w; ++j) panel[q * w + j] = y[q * ldy + cb + j];
      yb = panel;
      ldb = w;
    }
    ColumnsFrom<EV> evb{ev, cb};
    ColumnsFrom<ES> esb{es, cb};
    product_block<TRANS, R0>(m, w, len, x, ldx, yb, ldb, evb, esb);
  }
}

// gemm_short_k; with MAX also rowmax[i] = max(rowmax[i], max_j C[i, j]) over the m rows, taken
// from the accumulators as they are stored (the row tiles' epilogues keep a vector maximum a
// row), so that the attention's forward pass does not read its scores again for their maxima.
// The stored products are the same either way.
// Fold: alpha is a power of two, at most 1 (the attention's 1 / sqrt(d_k) at d_k 4, 16, 64; 1 for
// dP and the linear layers), so it goes into the copied rows of A instead of a multiply per stored
// vector. A product scaled by 2^k rounds as the unscaled one scaled, so each element's chain over
// the scaled row is the unscaled chain times alpha, bit for bit, as long as no product or partial
// sum falls below the normal range (2^-126); the rows of A read in place (the last m % RM) keep
// the multiply. At d_k 16 the 12 multiplies per 6 x 2 tile were 1..10 % of its time.
template <bool Max, bool Fold>
void short_k_impl(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                  const float* bt, size_t ldb, float* c, size_t ldc, const PanelView* pv,
                  float* rowmax) {
  const B al(alpha);
  size_t i = 0;
  // RM rows of A at a time, copied transposed (d x RM) so that the tile's broadcasts share
  // one base address: with RM row pointers the loop runs out of general registers. The
  // chains are the same (q = 0 .. d - 1 in order), so the bits do not change. The epilogues
  // capture by value: through references every store reloaded c, ldc and alpha (47 against
  // 76 GFLOP/s at d_k 16).
  constexpr size_t kMaxD = 256;
  if (d <= kMaxD) {
    alignas(64) float xp[RM * kMaxD];
    // Bt of 1 MiB or more (the keys of a long sequence: d 64 at T 8,192 is 2 MiB) in blocks of
    // columns of 256 KiB, each read by every row tile while it stays in L2; read whole, every
    // 6-row tile streamed all of it from the last level. Each element's chain is the same, so
    // are the bits. One thread, Zen 5, 128 rows, interleaved: 0.71..0.85x the time at T 8,192 x
    // d 64 and x 32, 4,096 x 128, 2,048 x 256 and 32,768 x 16 (e.g. 169 -> 208 GFLOP/s at d 64).
    constexpr size_t kWholeBytes = 1 << 20, kBlockBytes = 256 * 1024;
    const size_t nb = d * n * sizeof(float) >= kWholeBytes ? kBlockBytes / sizeof(float) / d : n;
    const size_t mt = m / RM * RM;
    // each tile row's running maxima (vector lanes, scalar tail), through pointers so that the
    // by-value epilogues share them
    B vmaxs[RM];
    float smaxs[RM];
    B* const vm = vmaxs;
    float* const sm = smaxs;
    for (size_t cb = 0; cb < n; cb += nb) {
      const size_t w = n - cb < nb ? n - cb : nb;
      const float* btb = bt + cb;
      const float* yt = mt ? pad_tail(w, d, btb, ldb) : nullptr;
      for (i = 0; i < mt; i += RM) {
        for (size_t q = 0; q < d; ++q)
          for (size_t r = 0; r < RM; ++r)
            xp[q * RM + r] = Fold ? a[(i + r) * lda + q] * alpha : a[(i + r) * lda + q];
        float* ci = c + i * ldc + cb;
        if constexpr (Max)
          for (size_t r = 0; r < RM; ++r) {
            vm[r] = B(-HUGE_VALF);
            sm[r] = -HUGE_VALF;
          }
        auto ev = [=](B acc, size_t r, size_t j) {
          const B v = Fold ? acc : acc * al;
          v.store_unaligned(ci + r * ldc + j);
          if constexpr (Max) vm[r] = vmax(vm[r], v);
        };
        auto es = [=](float s, size_t r, size_t j) {
          const float v = Fold ? s : alpha * s;
          ci[r * ldc + j] = v;
          if constexpr (Max) sm[r] = fmax_(sm[r], v);
        };
        // 4 vectors a row only for a longer d: at d_k 16 the 6 x 4 tile ran at 0.9x the 6 x 2
        // (its 24 stores per 16 multiply-adds a chain), at d 64 at 1.15x.
        if (d >= 32)
          product_rows_call<RM, NCW, true>(0, w, d, xp, RM, btb, ldb, yt, ev, es);
        else
          product_rows<RM, 2, true>(0, w, d, xp, RM, btb, ldb, yt, ev, es);
        if constexpr (Max)
          for (size_t r = 0; r < RM; ++r) {
            alignas(64) float lanes[W];
            vm[r].store_aligned(lanes);
            float mx = fmax_(rowmax[i + r], sm[r]);
            for (size_t u = 0; u < W; ++u) mx = fmax_(mx, lanes[u]);
            rowmax[i + r] = mx;
          }
      }
    }
    i = mt;
  }
  float* ci = c + i * ldc;
  auto ev = [=](B acc, size_t r, size_t j) { (acc * al).store_unaligned(ci + r * ldc + j); };
  auto es = [=](float s, size_t r, size_t j) { ci[r * ldc + j] = alpha * s; };
  if (d <= kMaxD)  // the last rows, fewer than RM
    product<false, 4>(m - i, n, d, a + i * lda, lda, bt, ldb, ev, es, pv);
  else  // a long d (a fresh input gradient of a wide linear layer): RM rows a tile
    product<false>(m - i, n, d, a + i * lda, lda, bt, ldb, ev, es, pv);
  if constexpr (Max)  // those rows' maxima from the stored products
    for (; i < m; ++i) rowmax[i] = fmax_(rowmax[i], k_max(c + i * ldc, n));
}

void k_gemm_short_k(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                    const float* bt, size_t ldb, float* c, size_t ldc, const PanelView* pv,
                    float* rowmax) {
  // a power of two in [2^-63, 1] (0, inf and NaN are not; over 1, a scaled row could overflow
  // where the products do not)
  int e = 0;
  const bool fold = ::frexpf(alpha, &e) == 0.5f && e <= 1 && e > -63;
  if (rowmax) {
    if (fold)
      short_k_impl<true, true>(m, n, d, alpha, a, lda, bt, ldb, c, ldc, pv, rowmax);
    else
      short_k_impl<true, false>(m, n, d, alpha, a, lda, bt, ldb, c, ldc, pv, rowmax);
  } else if (fold) {
    short_k_impl<false, true>(m, n, d, alpha, a, lda, bt, ldb, c, ldc, pv, nullptr);
  } else {
    short_k_impl<false, false>(m, n, d, alpha, a, lda, bt, ldb, c, ldc, pv, nullptr);
  }
}

size_t k_panel_width(size_t m, size_t len, size_t n, bool short_k) {
  // gemm_short_k reads a d of up to 256 in place (its tiles of RM rows; the last few rows alone
  // might pack, and take the panels when given)
  if (short_k && len <= 256) return 0;
  return panel_cols(m, len, n, RM);
}

template <bool TRANS>
void acc_product(size_t m, size_t n, size_t len, float alpha, const float* x, size_t ldx,
                 const float* y, size_t ldy, float* c, size_t ldc, const PanelView* pv = nullptr) {
  B al(alpha);
  product<TRANS>(
      m, n, len, x, ldx, y, ldy,
      [=](B acc, size_t r, size_t j) {
        vfma(al, acc, B::load_unaligned(c + r * ldc + j)).store_unaligned(c + r * ldc + j);
      },
      [=](float s, size_t r, size_t j) { c[r * ldc + j] = lane_fma(alpha, s, c[r * ldc + j]); },
      pv);
}

// ---- a narrow output over a long reduction -----------------------------------------
// C (m x d) from X (m x n) Y (n x d) with d <= W / 2 (a head of width 8 or less at AVX-512, 4 at
// AVX2, 2 at SSE2: P V and dS K of narrow heads). The column layout would leave at least half of
// every register's lanes padding (a head of width 4 used a quarter of them, and its P V was the
// largest product of a 16-head step); here the long n lies in the lanes instead: each element
// is W partial sums over n in steps of W (Y transposed once a call), added across the lanes in
// xsimd's fixed order, then the last n % W products in order. Every element is computed the same
// way whatever d, the rows beside it or the tile it falls in, so a head's bits depend on its own
// width alone (tested against a column computed by itself), but they are not the single chain
// of the wider outputs: a narrow head's sums are rounded in another order than before.
constexpr size_t kNarrowAcc = W == 16 ? 16 : 8;  // accumulators a tile (AVX-512 has 32 registers)

template <size_t D, size_t R, class ES>
__attribute__((noinline)) void narrow_rows(size_t i, size_t n, const float* x, size_t ldx,
                                           const float* yt, ES& es) {
  B acc[R][D];
#pragma GCC unroll 16
  for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (size_t c = 0; c < D; ++c) acc[r][c] = B(0.0f);
  const size_t nv = n / W * W;
  for (size_t q = 0; q < nv; q += W) {
    B yv[D];
#pragma GCC unroll 8
    for (size_t c = 0; c < D; ++c) yv[c] = B::load_aligned(yt + c * nv + q);
#pragma GCC unroll 16
    for (size_t r = 0; r < R; ++r) {
      const B xv = B::load_unaligned(x + (i + r) * ldx + q);
#pragma GCC unroll 8
      for (size_t c = 0; c < D; ++c) acc[r][c] = vfma(xv, yv[c], acc[r][c]);
    }
  }
  const float* ytail = yt + D * nv;  // the last n % W rows of Y, row-major (n % W x D)
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < D; ++c) {
      float s = xsimd::hadd(acc[r][c]);
      for (size_t q = nv; q < n; ++q)
        s = lane_fma(x[(i + r) * ldx + q], ytail[(q - nv) * D + c], s);
      es(s, i + r, c);
    }
}

template <size_t D, class ES>
void narrow_product_d(size_t m, size_t n, const float* x, size_t ldx, const float* yt, ES& es) {
  constexpr size_t R = kNarrowAcc / D > 8 ? 8 : kNarrowAcc / D;  // D <= 8 <= kNarrowAcc
  size_t i = 0;
  for (; i + R <= m; i += R) narrow_rows<D, R>(i, n, x, ldx, yt, es);
  for (; i < m; ++i) narrow_rows<D, 1>(i, n, x, ldx, yt, es);
}

// ES(sum, row, column) consumes each element; d <= W / 2 (narrow_output).
inline bool narrow_output(size_t d) { return d >= 1 && d <= W / 2; }
template <class ES>
void narrow_product(size_t m, size_t n, size_t d, const float* x, size_t ldx, const float* y,
                    size_t ldy, ES es) {
  // Y^T in whole vectors (d x nv, aligned rows), then the remainder rows as they are
  const size_t nv = n / W * W;
  float* yt = panel_scratch(d * n + W);
  for (size_t c = 0; c < d; ++c)
    for (size_t q = 0; q < nv; ++q) yt[c * nv + q] = y[q * ldy + c];
  for (size_t q = nv; q < n; ++q)
    for (size_t c = 0; c < d; ++c) yt[d * nv + (q - nv) * d + c] = y[q * ldy + c];
  switch (d) {
    case 1:
      narrow_product_d<1>(m, n, x, ldx, yt, es);
      break;
    case 2:
      narrow_product_d<2>(m, n, x, ldx, yt, es);
      break;
    case 3:
      narrow_product_d<3>(m, n, x, ldx, yt, es);
      break;
    case 4:
      narrow_product_d<4>(m, n, x, ldx, yt, es);
      break;
    case 5:
      narrow_product_d<5>(m, n, x, ldx, yt, es);
      break;
    case 6:
      narrow_product_d<6>(m, n, x, ldx, yt, es);
      break;
    case 7:
      narrow_product_d<7>(m, n, x, ldx, yt, es);
      break;
    default:
      narrow_product_d<8>(m, n, x, ldx, yt, es);
      break;
  }
}

void k_gemm_acc_nd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                   const float* y, size_t ldy, float* c, size_t ldc, const PanelView* pv) {
  if (narrow_output(d)) {
    narrow_product(m, n, d, x, ldx, y, ldy, [=](float s, size_t r, size_t j) {
      c[r * ldc + j] = lane_fma(alpha, s, c[r * ldc + j]);
    });
    return;
  }
  acc_product<false>(m, d, n, alpha, x, ldx, y, ldy, c, ldc, pv);
}

void k_gemm_acc_nd_rows(size_t m, size_t n, size_t d, const float* alpha, const float* x,
                        size_t ldx, const float* y, size_t ldy, float* c, size_t ldc) {
  if (narrow_output(d)) {
    narrow_product(m, n, d, x, ldx, y, ldy, [=](float s, size_t r, size_t j) {
      c[r * ldc + j] = lane_fma(alpha[r], s, c[r * ldc + j]);
    });
    return;
  }
  product<false>(
      m, d, n, x, ldx, y, ldy,
      [=](B acc, size_t r, size_t j) {
        vfma(B(alpha[r]), acc, B::load_unaligned(c + r * ldc + j)).store_unaligned(c + r * ldc + j);
      },
      [=](float s, size_t r, size_t j) { c[r * ldc + j] = lane_fma(alpha[r], s, c[r * ldc + j]); });
}

// Fraction of the lanes of ceil(n / W) vectors that n columns use.
inline double lane_use(size_t n) { return double(n) / double((n + W - 1) / W * W); }

void k_gemm_acc_tnd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                    const float* y, size_t ldy, float* c, size_t ldc) {
  // A narrow d (a head narrower than a register: d_v = 8 at AVX-512) would leave most lanes
  // empty; C^T (d x n) = Y^T X puts the long n in the lanes instead, and each vector is added
  // into its column of C. Every element is the same chain (the same products, q = 0 .. m - 1
  // in order; a fused product does not depend on its operands' order), so the bits are those
  // of the other orientation.
  if (n >= W && lane_use(n) > lane_use(d) + 0.2) {
    product<true>(
        d, n, m, y, ldy, x, ldx,
        [=](B acc, size_t r, size_t j) {
          alignas(64) float lanes[W];
          (acc).store_aligned(lanes);
          float* cj = c + j * ldc + r;
          for (size_t u = 0; u < W; ++u) cj[u * ldc] = lane_fma(alpha, lanes[u], cj[u * ldc]);
        },
        [=](float s, size_t r, size_t j) { c[j * ldc + r] = lane_fma(alpha, s, c[j * ldc + r]); });
    return;
  }
  acc_product<true>(n, d, m, alpha, x, ldx, y, ldy, c, ldc);
}

void k_gemm_bias(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                 size_t ldw, const float* bias, float* c, size_t ldc, const PanelView* pv) {
  if (bias)
    product<false>(
        m, n, k, x, ldx, w, ldw,
        [=](B acc, size_t r, size_t j) {
          (acc + B::load_unaligned(bias + j)).store_unaligned(c + r * ldc + j);
        },
        [=](float s, size_t r, size_t j) { c[r * ldc + j] = s + bias[j]; }, pv);
  else
    product<false>(
        m, n, k, x, ldx, w, ldw,
        [=](B acc, size_t r, size_t j) { acc.store_unaligned(c + r * ldc + j); },
        [=](float s, size_t r, size_t j) { c[r * ldc + j] = s; }, pv);
}

// gemm_bias with C's columns split into parts: part p (columns off[p] .. off[p + 1] - 1) is
// stored in dst[p], dense rows of its own width. The same FMA chains and bias adds as
// gemm_bias, so the parts equal its columns bit for bit; a vector of columns that lies in one
// part (every one when the part widths are multiples of W) is stored whole.
template <bool BIAS>
void gemm_bias_parts_impl(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                          size_t ldw, const float* bias, const size_t* off, size_t parts,
                          float* const* dst, const PanelView* pv) {
  // Columns in chunks of up to kVec vectors, each with a table (plain arrays: no std::
  // templates in this translation unit): per vector, its first store or null, and its part's
  // width.
  constexpr size_t kVec = 64;
  float* tab[kVec];
  size_t ldt[kVec], first[kVec];
  auto put = [=](float s, size_t r, size_t j) {
    size_t lo = 0, hi = parts;  // the part p with off[p] <= j < off[p + 1], by bisection
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (off[mid] <= j)
        lo = mid;
      else
        hi = mid;
    }
    dst[lo][r * (off[lo + 1] - off[lo]) + (j - off[lo])] = s;
  };
  for (size_t c0 = 0; c0 < n; c0 += kVec * W) {
    const size_t nc = n - c0 < kVec * W ? n - c0 : kVec * W;
    const size_t nv = nc / W;
    for (size_t v = 0, p = 0; v < nv; ++v) {
      const size_t a = c0 + v * W;
      while (p + 1 < parts && off[p + 1] <= a) ++p;
      const bool whole = a + W <= off[p + 1];
      tab[v] = whole ? dst[p] + (a - off[p]) : nullptr;
      ldt[v] = off[p + 1] - off[p];
      first[v] = p;
    }
    float* const* tp = tab;
    const size_t* lp = ldt;
    const size_t* fp = first;
    product<false>(
        m, nc, k, x, ldx, w + c0, ldw,
        [=](B acc, size_t r, size_t j) {
          const B y = BIAS ? acc + B::load_unaligned(bias + c0 + j) : acc;
          const size_t v = j / W;
          if (tp[v]) {
            y.store_unaligned(tp[v] + r * lp[v]);
          } else {  // the vector spans parts: each part's run of lanes copied (heads of
            // width 4 or 8 put several parts in one vector; a search per lane was 13 % of a
            // 16-head step)
            alignas(64) float lanes[W];
            y.store_aligned(lanes);
            size_t p = fp[v];
            for (size_t u = 0; u < W;) {
              const size_t col = c0 + j + u;
              while (off[p + 1] <= col) ++p;
              const size_t wp = off[p + 1] - off[p];
              const size_t cnt = off[p + 1] - col < W - u ? off[p + 1] - col : W - u;
              float* d = dst[p] + r * wp + (col - off[p]);
              for (size_t t = 0; t < cnt; ++t) d[t] = lanes[u + t];
              u += cnt;
            }
          }
        },
        [=](float s, size_t r, size_t j) { put(BIAS ? s + bias[c0 + j] : s, r, c0 + j); }, pv, c0);
  }
}

void k_gemm_bias_parts(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                       size_t ldw, const float* bias, const size_t* off, size_t parts,
                       float* const* dst, const PanelView* pv) {
  if (bias)
    gemm_bias_parts_impl<true>(m, n, k, x, ldx, w, ldw, bias, off, parts, dst, pv);
  else
    gemm_bias_parts_impl<false>(m, n, k, x, ldx, w, ldw, bias, off, parts, dst, pv);
}

}  // namespace

}  // namespace simd
}  // namespace kernels
}  // namespace gf
