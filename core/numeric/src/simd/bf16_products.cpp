// The bf16 products: every product of the row kernels (bf16_kernels.hpp) with its two inputs
// rounded to bf16 (vcvtne2ps2bf16: round to nearest even, subnormals to zero) and the products
// summed in float32 by vdpbf16ps, which adds two products of bf16 pairs to each float32 lane.
// Compiled with AVX512F+BW+BF16 (core/CMakeLists.txt); plain C here besides the intrinsics: an
// inline std:: template compiled with these flags could be the copy the linker keeps for the
// rest of the library, and run where the CPU lacks them.
//
// Layout. The contraction runs over pairs p (elements 2p, 2p + 1; an odd length gets a zero).
// B (len x n, the operand whose columns lie in the lanes) is packed once a call into vectors of
// 16 columns: vector v, pair p at bp + (v kp + p) 16, lane l = (B[2p][16v + l], B[2p + 1][16v + l])
// as the low and high bf16 halves of 32 bits; columns past n are zeros. A (m x len) is packed
// by rows (row i's pair p at ap + i kp + p) or, for X^T (gemm_acc_tnd), as B is (its columns are
// the output's rows: 16 rows a vector, row r of pair p at 16 p + r), and broadcast one pair at a
// time. A register tile is 8 rows x NV vectors (NV <= 3: 24 accumulators of the 32 registers);
// each accumulator lane is one output element's chain over p = 0 .. kp - 1 in order, so
// neither the tiling nor the split over threads changes a bit.
//
// AMX (where the CPU has AMX-BF16 and Linux grants the tile data; bf16_kernels_amx): the same
// packed operands, the pairs padded with zeros to whole tiles of 16, A always by rows (X^T's
// vectors transposed 16 x 16 at a time), and TDPBF16PS on tiles of 16 rows x 16 pairs (A),
// 16 pairs x 16 columns (B), 16 x 16 sums (C), 2 x 2 C tiles at a time. Each C element is
// again one chain over the pairs in order (tile by tile, the tiles in order), whatever the
// tiling or thread.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "bf16_kernels.hpp"

namespace gf {
namespace kernels {
namespace simd {
namespace {

constexpr size_t V = 16;  // float32 lanes a register
constexpr size_t R = 8;   // rows a register tile
// The packed B is taken in column blocks of about this many bytes, each passed over by every
// row tile while it stays in L2 (a wide layer's weight is megabytes).
constexpr size_t kBlockBytes = 256 * 1024;

inline size_t min_(size_t a, size_t b) { return a < b ? a : b; }
inline __mmask16 lanes(size_t n) {
  return n >= V ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}
inline __m512bh as_bh(__m512i x) { return reinterpret_cast<__m512bh>(x); }
inline __m512i as_i(__m512bh x) { return reinterpret_cast<__m512i>(x); }

// A per-thread scratch buffer of at least N 32-bit words, 64-byte aligned, kept between calls.
struct Scratch {
  uint32_t* buf = nullptr;
  size_t cap = 0;
  ~Scratch() { ::free(buf); }
};
uint32_t* grown(Scratch& s, size_t n) {
  if (s.cap < n) {
    ::free(s.buf);
    s.cap = n + n / 2 + 64;
    s.buf = static_cast<uint32_t*>(::aligned_alloc(64, (s.cap * 4 + 63) / 64 * 64));
    if (!s.buf) {
      s.cap = 0;
      ::abort();  // as the float kernels' scratch: no exception crosses this C-style code
    }
  }
  return s.buf;
}
uint32_t* a_scratch(size_t n) {
  static thread_local Scratch s;
  return grown(s, n);
}
uint32_t* b_scratch(size_t n) {
  static thread_local Scratch s;
  return grown(s, n);
}
uint32_t* t_scratch(size_t n) {
  static thread_local Scratch s;
  return grown(s, n);
}
float* c_scratch(size_t n) {
  static thread_local Scratch s;
  return reinterpret_cast<float*>(grown(s, n));
}

// 32 bf16 of LO (the low 16) and HI interleaved into pairs: lane l = (lo[l], hi[l]).
inline __m512i pair_lanes(__m512 lo, __m512 hi) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, as_i(_mm512_cvtne2ps_pbh(hi, lo)));
}

// Y (len x n, ldy) packed as B above into OUT (ceil(n / 16) vectors of KPS >= kp pairs, those
// past kp zeros).
void pack_cols(size_t len, size_t n, const float* y, size_t ldy, uint32_t* out, size_t kps) {
  const size_t kp = (len + 1) / 2, nv = (n + V - 1) / V;
  for (size_t v = 0; v < nv; ++v)
    for (size_t p = kp; p < kps; ++p)
      _mm512_store_si512(out + (v * kps + p) * V, _mm512_setzero_si512());
  for (size_t p = 0; p < kp; ++p) {
    const float* r0 = y + 2 * p * ldy;
    const bool two = 2 * p + 1 < len;
    for (size_t v = 0; v < nv; ++v) {
      const size_t c0 = v * V;
      const __mmask16 m = lanes(n - c0);
      const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + c0);
      const __m512 hi = two ? _mm512_maskz_loadu_ps(m, r0 + ldy + c0) : _mm512_setzero_ps();
      _mm512_store_si512(out + (v * kps + p) * V, pair_lanes(lo, hi));
    }
  }
}

// A (m x k, lda) packed by rows into OUT (mp rows of KPS >= kp pairs; the pairs past kp and the
// rows m .. mp - 1 zero).
void pack_rows(size_t m, size_t mp, size_t k, const float* a, size_t lda, uint32_t* out,
               size_t kps) {
  const size_t kp = (k + 1) / 2;
  for (size_t i = 0; i < m; ++i) {
    const float* r = a + i * lda;
    uint32_t* o = out + i * kps;
    if (kps > kp) ::memset(o + kp, 0, (kps - kp) * 4);
    size_t q = 0;
    for (; q + 2 * V <= k; q += 2 * V)
      _mm512_storeu_si512(
          o + q / 2, as_i(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r + q + V), _mm512_loadu_ps(r + q))));
    if (q < k) {  // the last k % 32, an odd last element paired with a zero
      const size_t rem = k - q;
      const __m512 lo = _mm512_maskz_loadu_ps(lanes(rem), r + q);
      const __m512 hi =
          rem > V ? _mm512_maskz_loadu_ps(lanes(rem - V), r + q + V) : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(o + q / 2, lanes((rem + 1) / 2), as_i(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
  if (mp > m) ::memset(out + m * kps, 0, (mp - m) * kps * 4);
}

// What a tile does with its sums: C = alpha S (+ bias), rowmax[i] = max(rowmax[i], that row's
// C); C += alpha S; C[i] += alpha[i] S[i].
enum class Kind { store, acc, acc_rows };
struct Epi {
  Kind kind;
  float alpha;
  const float* alphas;  // acc_rows
  const float* bias;    // store (null: none)
  float* rowmax;        // store (null: none): each row's maxima so far, a vector a row (16 m)
  float* c;
  size_t ldc, m, n;  // the output's rows and columns
};

// Row I's sums ACC (NV vectors from column J0) into C as E says.
inline void put_row(const Epi& e, size_t i, size_t j0, const __m512* acc, size_t nv) {
  float* c = e.c + i * e.ldc;
  __m512 mx = _mm512_set1_ps(-__builtin_inff());
  for (size_t v = 0; v < nv; ++v) {
    const size_t j = j0 + v * V;
    const __mmask16 m = lanes(e.n - j);
    if (e.kind == Kind::store) {
      const __m512 b = e.bias ? _mm512_maskz_loadu_ps(m, e.bias + j) : _mm512_setzero_ps();
      const __m512 y = e.alpha == 1.0f ? _mm512_add_ps(acc[v], b)
                                       : _mm512_fmadd_ps(_mm512_set1_ps(e.alpha), acc[v], b);
      _mm512_mask_storeu_ps(c + j, m, y);
      mx = _mm512_mask_max_ps(mx, m, mx, y);
    } else {
      const float al = e.kind == Kind::acc ? e.alpha : e.alphas[i];
      const __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(al), acc[v], _mm512_maskz_loadu_ps(m, c + j));
      _mm512_mask_storeu_ps(c + j, m, y);
    }
  }
  if (e.rowmax) {  // the lanes' maxima, reduced once the product is done (b_gemm_short_k)
    float* rm = e.rowmax + i * V;
    _mm512_store_ps(rm, _mm512_max_ps(_mm512_load_ps(rm), mx));
  }
}

// Rows I0 .. I0 + 7 x vectors J0 / 16 .. + NV - 1 of the product: A's pair p of tile row r at
// a[r ars + p] (by rows) or a[r + 16 p] (GROUP: X^T's vectors), B's vector v at b + v bvs.
template <size_t NV, bool GROUP>
__attribute__((noinline)) void tile(size_t kp, const uint32_t* a, size_t ars, const uint32_t* b,
                                    size_t bvs, const Epi& e, size_t i0, size_t j0) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (size_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) bv[v] = as_bh(_mm512_load_si512(b + v * bvs + p * V));
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const __m512bh av =
          as_bh(_mm512_set1_epi32(static_cast<int>(GROUP ? a[r + p * V] : a[r * ars + p])));
#pragma GCC unroll 4
      for (size_t v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const size_t rows = min_(R, e.m - i0);
  for (size_t r = 0; r < rows; ++r) put_row(e, i0 + r, j0, acc[r], NV);
}

// Pairs stored for KP pairs: whole AMX tiles of 16 for AMX, else KP.
template <bool AMX>
inline size_t stored_pairs(size_t kp) {
  return AMX ? (kp + V - 1) / V * V : kp;
}

// B (len x n) packed once for a product of many rows: KP pairs, KPS stored a vector.
struct PackedB {
  const uint32_t* p;
  size_t kp, kps, nv;
};
template <bool AMX>
PackedB pack_b(size_t len, size_t n, const float* b, size_t ldb) {
  const size_t kp = (len + 1) / 2, kps = stored_pairs<AMX>(kp), nv = (n + V - 1) / V;
  uint32_t* bp = b_scratch(nv * kps * V);
  pack_cols(len, n, b, ldb, bp, kps);
  return {bp, kp, kps, nv};
}

// The product's tiles over A packed (MP rows, a multiple of 8: by rows, or GROUP of 16) and B.
template <bool GROUP>
void tiles(size_t mp, const uint32_t* ap, const PackedB& b, const Epi& e) {
  const size_t kp = b.kp, kps = b.kps, bvs = kps * V;
  size_t vb = kBlockBytes / (bvs * 4 * 3) * 3;  // vectors of B a column block: whole 3-tiles
  vb = vb < 3 ? 3 : vb;
  for (size_t v0 = 0; v0 < b.nv; v0 += vb) {
    const size_t v1 = min_(b.nv, v0 + vb);
    for (size_t i = 0; i < mp; i += R) {
      const uint32_t* a = GROUP ? ap + (i / V) * kps * V + i % V : ap + i * kps;
      size_t v = v0;
      for (; v + 3 <= v1; v += 3) tile<3, GROUP>(kp, a, kps, b.p + v * bvs, bvs, e, i, v * V);
      if (v1 - v == 2) tile<2, GROUP>(kp, a, kps, b.p + v * bvs, bvs, e, i, v * V);
      if (v1 - v == 1) tile<1, GROUP>(kp, a, kps, b.p + v * bvs, bvs, e, i, v * V);
    }
  }
}

// ---- AMX ----------------------------------------------------------------------------------
// Tiles 0..3: C (16 x 16 float32 each, 2 x 2), 4..5: A (16 rows x 16 pairs), 6..7: B (16 pairs x
// 16 columns), every one 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
// Loaded at every call: another library's AMX code on this thread may have changed or released
// the tiles' configuration since.
inline void amx_configure() {
  TileConfig c;
  ::memset(&c, 0, sizeof c);
  c.palette = 1;
  for (size_t t = 0; t < 8; ++t) c.rows[t] = 16, c.colsb[t] = 64;
  _tile_loadconfig(&c);
}

// Rows I0 .. I0 + 16 RB - 1 x vectors J0 / 16 .. + CB - 1: A's row block at A (KPS pairs a row),
// B's vectors at B, B + BVS.
template <size_t RB, size_t CB>
__attribute__((noinline)) void amx_tile(size_t kps, const uint32_t* a, const uint32_t* b,
                                        size_t bvs, const Epi& e, size_t i0, size_t j0) {
  _tile_zero(0);
  if constexpr (CB == 2) _tile_zero(1);
  if constexpr (RB == 2) _tile_zero(2);
  if constexpr (RB == 2 && CB == 2) _tile_zero(3);
  const size_t lda = kps * 4;
  for (size_t p = 0; p < kps; p += V) {
    _tile_loadd(4, a + p, lda);
    _tile_loadd(6, b + p * V, 64);
    if constexpr (CB == 2) _tile_loadd(7, b + bvs + p * V, 64);
    if constexpr (RB == 2) _tile_loadd(5, a + V * kps + p, lda);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (CB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (RB == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (RB == 2 && CB == 2) _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sums[2 * V][2 * V];  // rows x columns of the tiles' sums
  _tile_stored(0, &sums[0][0], sizeof sums[0]);
  if constexpr (CB == 2) _tile_stored(1, &sums[0][V], sizeof sums[0]);
  if constexpr (RB == 2) _tile_stored(2, &sums[V][0], sizeof sums[0]);
  if constexpr (RB == 2 && CB == 2) _tile_stored(3, &sums[V][V], sizeof sums[0]);
  const size_t rows = min_(RB * V, e.m - i0);
  for (size_t r = 0; r < rows; ++r) {
    __m512 acc[CB];
    for (size_t c = 0; c < CB; ++c) acc[c] = _mm512_load_ps(&sums[r][c * V]);
    put_row(e, i0 + r, j0, acc, CB);
  }
}

// The product's tiles over A packed by rows (MP rows, a multiple of 16) and B (whole tiles of
// pairs), in column blocks of B that stay in L2.
void amx_tiles(size_t mp, const uint32_t* ap, const PackedB& b, const Epi& e) {
  amx_configure();
  const size_t kps = b.kps, bvs = kps * V;
  size_t vb = kBlockBytes / (bvs * 4 * 2) * 2;  // vectors of B a column block: whole 2-tiles
  vb = vb < 2 ? 2 : vb;
  for (size_t v0 = 0; v0 < b.nv; v0 += vb) {
    const size_t v1 = min_(b.nv, v0 + vb);
    for (size_t i = 0; i < mp; i += 2 * V) {
      const uint32_t* a = ap + i * kps;
      const bool two = i + V < mp;
      size_t v = v0;
      for (; v + 2 <= v1; v += 2)
        two ? amx_tile<2, 2>(kps, a, b.p + v * bvs, bvs, e, i, v * V)
            : amx_tile<1, 2>(kps, a, b.p + v * bvs, bvs, e, i, v * V);
      if (v < v1)
        two ? amx_tile<2, 1>(kps, a, b.p + v * bvs, bvs, e, i, v * V)
            : amx_tile<1, 1>(kps, a, b.p + v * bvs, bvs, e, i, v * V);
    }
  }
}

// OUT (16 rows, stride OS) = the 16 x 16 block IN (stride IS) transposed, 32-bit elements.
void transpose16(const uint32_t* in, size_t is, uint32_t* out, size_t os) {
  __m512i r[16], t[16];
  for (size_t i = 0; i < 16; ++i) r[i] = _mm512_load_si512(in + i * is);
  for (size_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (size_t i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
    }
  for (size_t j = 0; j < 8; ++j) {
    _mm512_storeu_si512(out + j * os, _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88));
    _mm512_storeu_si512(out + (j + 8) * os, _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd));
  }
}

// E's C (e.m x e.n) from A (e.m x k, lda) and B packed.
template <bool AMX>
void rows_product(size_t k, const float* a, size_t lda, const PackedB& b, const Epi& e) {
  const size_t rp = AMX ? V : R, mp = (e.m + rp - 1) / rp * rp;
  uint32_t* ap = a_scratch(mp * b.kps);
  pack_rows(e.m, mp, k, a, lda, ap, b.kps);
  if constexpr (AMX)
    amx_tiles(mp, ap, b, e);
  else
    tiles<false>(mp, ap, b, e);
}

Epi epi(Kind kind, float alpha, float* c, size_t ldc, size_t m, size_t n) {
  return {kind, alpha, nullptr, nullptr, nullptr, c, ldc, m, n};
}

template <bool AMX>
void b_gemm_short_k(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                    const float* bt, size_t ldb, float* c, size_t ldc, float* rowmax) {
  if (m == 0 || n == 0) return;
  Epi e = epi(Kind::store, alpha, c, ldc, m, n);
  if (rowmax) {  // a vector of maxima a row while the tiles run, then one reduction a row
    e.rowmax = c_scratch(m * V);
    for (size_t i = 0; i < m; ++i)
      _mm512_store_ps(e.rowmax + i * V, _mm512_set1_ps(-__builtin_inff()));
  }
  rows_product<AMX>(d, a, lda, pack_b<AMX>(d, n, bt, ldb), e);
  if (rowmax)
    for (size_t i = 0; i < m; ++i) {
      const float t = _mm512_reduce_max_ps(_mm512_load_ps(e.rowmax + i * V));
      rowmax[i] = rowmax[i] < t ? t : rowmax[i];
    }
}

template <bool AMX>
void b_gemm_acc_nd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                   const float* y, size_t ldy, float* c, size_t ldc) {
  if (m == 0 || d == 0) return;
  rows_product<AMX>(n, x, ldx, pack_b<AMX>(n, d, y, ldy), epi(Kind::acc, alpha, c, ldc, m, d));
}

template <bool AMX>
void b_gemm_acc_nd_rows(size_t m, size_t n, size_t d, const float* alpha, const float* x,
                        size_t ldx, const float* y, size_t ldy, float* c, size_t ldc) {
  if (m == 0 || d == 0) return;
  Epi e = epi(Kind::acc_rows, 1.0f, c, ldc, m, d);
  e.alphas = alpha;
  rows_product<AMX>(n, x, ldx, pack_b<AMX>(n, d, y, ldy), e);
}

// C (n x d) += alpha X^T Y: A = X^T packed as vectors of X's columns (GROUP), B = Y; for AMX
// those vectors transposed to rows.
template <bool AMX>
void b_gemm_acc_tnd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                    const float* y, size_t ldy, float* c, size_t ldc) {
  if (n == 0 || d == 0) return;
  const PackedB b = pack_b<AMX>(m, d, y, ldy);
  const size_t np = (n + V - 1) / V * V, kps = b.kps;
  const Epi e = epi(Kind::acc, alpha, c, ldc, n, d);
  if constexpr (AMX) {
    uint32_t* g = t_scratch(np * kps);
    pack_cols(m, n, x, ldx, g, kps);
    uint32_t* ap = a_scratch(np * kps);
    for (size_t i = 0; i < np; i += V)
      for (size_t p = 0; p < kps; p += V)
        transpose16(g + (i * kps + p * V), V, ap + i * kps + p, kps);
    amx_tiles(np, ap, b, e);
  } else {
    uint32_t* ap = a_scratch(np * kps);
    pack_cols(m, n, x, ldx, ap, kps);
    tiles<true>(np, ap, b, e);
  }
}

template <bool AMX>
void b_gemm_bias(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                 size_t ldw, const float* bias, float* c, size_t ldc) {
  if (m == 0 || n == 0) return;
  Epi e = epi(Kind::store, 1.0f, c, ldc, m, n);
  e.bias = bias;
  rows_product<AMX>(k, x, ldx, pack_b<AMX>(k, n, w, ldw), e);
}

// gemm_bias in blocks of 64 rows into a scratch, each block's parts copied to their outputs.
template <bool AMX>
void b_gemm_bias_parts(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                       size_t ldw, const float* bias, const size_t* off, size_t parts,
                       float* const* dst) {
  if (m == 0 || n == 0) return;
  constexpr size_t kRows = 64;
  const PackedB b = pack_b<AMX>(k, n, w, ldw);
  float* s = c_scratch(kRows * n);
  for (size_t r0 = 0; r0 < m; r0 += kRows) {
    const size_t rows = min_(kRows, m - r0);
    Epi e = epi(Kind::store, 1.0f, s, n, rows, n);
    e.bias = bias;
    rows_product<AMX>(k, x + r0 * ldx, ldx, b, e);
    for (size_t p = 0; p < parts; ++p) {
      const size_t w0 = off[p], wp = off[p + 1] - off[p];
      for (size_t r = 0; r < rows; ++r)
        ::memcpy(dst[p] + (r0 + r) * wp, s + r * n + w0, wp * sizeof(float));
    }
  }
}

void b_round(const float* x, float* y, size_t n) {
  for (size_t j = 0; j < n; j += V) {
    const __mmask16 m = lanes(n - j);
    const __m512i h = _mm512_cvtepu16_epi32(
        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + j))));
    _mm512_mask_storeu_ps(y + j, m, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
}

constexpr size_t KB = 24;  // independent chains of the peak loop

float b_dot_loop(size_t iters) {
  __m512 acc[KB];
#pragma GCC unroll 32
  for (size_t k = 0; k < KB; ++k) acc[k] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(k));
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(0.998f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(-1e-7f));
  for (size_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (size_t k = 0; k < KB; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
  }
  __m512 s = acc[0];
#pragma GCC unroll 32
  for (size_t k = 1; k < KB; ++k) s = _mm512_add_ps(s, acc[k]);
  return _mm512_reduce_add_ps(s);
}

// ITERS rounds of four independent TDPBF16PS on tiles (AMX's peak).
float amx_dot_loop(size_t iters) {
  amx_configure();
  alignas(64) uint32_t a[V * V], b[V * V];
  for (size_t j = 0; j < V * V; ++j) a[j] = 0x3f7f3f7fu, b[j] = 0x33d6b3d6u;  // (~1, ~1e-7)
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (size_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[V * V];
  _tile_stored(0, out, 64);
  return out[0];
}

}  // namespace

Bf16Kernels bf16_kernels_avx512() {
  return {"avx512_bf16",
          b_dot_loop,
          4.0 * KB * V,
          b_round,
          b_gemm_short_k<false>,
          b_gemm_acc_nd<false>,
          b_gemm_acc_nd_rows<false>,
          b_gemm_acc_tnd<false>,
          b_gemm_bias<false>,
          b_gemm_bias_parts<false>};
}

Bf16Kernels bf16_kernels_amx() {
  return {"amx",
          amx_dot_loop,
          4.0 * 4 * V * V * V,  // 4 tiles of 16 x 16 sums over 16 pairs, 2 flops a product
          b_round,
          b_gemm_short_k<true>,
          b_gemm_acc_nd<true>,
          b_gemm_acc_nd_rows<true>,
          b_gemm_acc_tnd<true>,
          b_gemm_bias<true>,
          b_gemm_bias_parts<true>};
}

}  // namespace simd
}  // namespace kernels
}  // namespace gf
