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

// Y (len x n, ldy) packed as B above into OUT (ceil(n / 16) vectors of kp pairs).
void pack_cols(size_t len, size_t n, const float* y, size_t ldy, uint32_t* out) {
  const size_t kp = (len + 1) / 2, nv = (n + V - 1) / V;
  for (size_t p = 0; p < kp; ++p) {
    const float* r0 = y + 2 * p * ldy;
    const bool two = 2 * p + 1 < len;
    for (size_t v = 0; v < nv; ++v) {
      const size_t c0 = v * V;
      const __mmask16 m = lanes(n - c0);
      const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + c0);
      const __m512 hi = two ? _mm512_maskz_loadu_ps(m, r0 + ldy + c0) : _mm512_setzero_ps();
      _mm512_store_si512(out + (v * kp + p) * V, pair_lanes(lo, hi));
    }
  }
}

// A (m x k, lda) packed by rows into OUT (mp rows of kp pairs; rows m .. mp - 1 zero).
void pack_rows(size_t m, size_t mp, size_t k, const float* a, size_t lda, uint32_t* out) {
  const size_t kp = (k + 1) / 2;
  for (size_t i = 0; i < m; ++i) {
    const float* r = a + i * lda;
    uint32_t* o = out + i * kp;
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
  if (mp > m) ::memset(out + m * kp, 0, (mp - m) * kp * 4);
}

// What a tile does with its sums: C = alpha S (+ bias), rowmax[i] = max(rowmax[i], that row's
// C); C += alpha S; C[i] += alpha[i] S[i].
enum class Kind { store, acc, acc_rows };
struct Epi {
  Kind kind;
  float alpha;
  const float* alphas;  // acc_rows
  const float* bias;    // store (null: none)
  float* rowmax;        // store (null: none)
  float* c;
  size_t ldc, m, n;  // the output's rows and columns
};

// One tile's sums ACC (rows I0 .., vector columns J0 ..) into C as E says.
template <size_t NV>
inline void put(const Epi& e, size_t i0, size_t j0, const __m512 (&acc)[R][NV]) {
  const size_t rows = min_(R, e.m - i0);
  for (size_t r = 0; r < rows; ++r) {
    float* c = e.c + (i0 + r) * e.ldc;
    __m512 mx = _mm512_set1_ps(-__builtin_inff());
    for (size_t v = 0; v < NV; ++v) {
      const size_t j = j0 + v * V;
      const __mmask16 m = lanes(e.n - j);
      if (e.kind == Kind::store) {
        const __m512 b = e.bias ? _mm512_maskz_loadu_ps(m, e.bias + j) : _mm512_setzero_ps();
        const __m512 y = e.alpha == 1.0f ? _mm512_add_ps(acc[r][v], b)
                                         : _mm512_fmadd_ps(_mm512_set1_ps(e.alpha), acc[r][v], b);
        _mm512_mask_storeu_ps(c + j, m, y);
        mx = _mm512_mask_max_ps(mx, m, mx, y);
      } else {
        const float al = e.kind == Kind::acc ? e.alpha : e.alphas[i0 + r];
        const __m512 y =
            _mm512_fmadd_ps(_mm512_set1_ps(al), acc[r][v], _mm512_maskz_loadu_ps(m, c + j));
        _mm512_mask_storeu_ps(c + j, m, y);
      }
    }
    if (e.rowmax) {
      const float t = _mm512_reduce_max_ps(mx);
      float& rm = e.rowmax[i0 + r];
      rm = rm < t ? t : rm;
    }
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
  put<NV>(e, i0, j0, acc);
}

// B (len x n) packed once for a product of many rows.
struct PackedB {
  const uint32_t* p;
  size_t kp, nv;
};
PackedB pack_b(size_t len, size_t n, const float* b, size_t ldb) {
  const size_t kp = (len + 1) / 2, nv = (n + V - 1) / V;
  uint32_t* bp = b_scratch(nv * kp * V);
  pack_cols(len, n, b, ldb, bp);
  return {bp, kp, nv};
}

// The product's tiles over A packed (MP rows, a multiple of 8: by rows, or GROUP of 16) and B.
template <bool GROUP>
void tiles(size_t mp, const uint32_t* ap, const PackedB& b, const Epi& e) {
  const size_t kp = b.kp, bvs = kp * V;
  size_t vb = kBlockBytes / (bvs * 4 * 3) * 3;  // vectors of B a column block: whole 3-tiles
  vb = vb < 3 ? 3 : vb;
  for (size_t v0 = 0; v0 < b.nv; v0 += vb) {
    const size_t v1 = min_(b.nv, v0 + vb);
    for (size_t i = 0; i < mp; i += R) {
      const uint32_t* a = GROUP ? ap + (i / V) * kp * V + i % V : ap + i * kp;
      size_t v = v0;
      for (; v + 3 <= v1; v += 3) tile<3, GROUP>(kp, a, kp, b.p + v * bvs, bvs, e, i, v * V);
      if (v1 - v == 2) tile<2, GROUP>(kp, a, kp, b.p + v * bvs, bvs, e, i, v * V);
      if (v1 - v == 1) tile<1, GROUP>(kp, a, kp, b.p + v * bvs, bvs, e, i, v * V);
    }
  }
}

// E's C (e.m x e.n) from A (e.m x k, lda) and B packed.
void rows_product(size_t k, const float* a, size_t lda, const PackedB& b, const Epi& e) {
  const size_t mp = (e.m + R - 1) / R * R, kp = (k + 1) / 2;
  uint32_t* ap = a_scratch(mp * kp);
  pack_rows(e.m, mp, k, a, lda, ap);
  tiles<false>(mp, ap, b, e);
}

Epi epi(Kind kind, float alpha, float* c, size_t ldc, size_t m, size_t n) {
  return {kind, alpha, nullptr, nullptr, nullptr, c, ldc, m, n};
}

void b_gemm_short_k(size_t m, size_t n, size_t d, float alpha, const float* a, size_t lda,
                    const float* bt, size_t ldb, float* c, size_t ldc, float* rowmax) {
  if (m == 0 || n == 0) return;
  Epi e = epi(Kind::store, alpha, c, ldc, m, n);
  e.rowmax = rowmax;
  rows_product(d, a, lda, pack_b(d, n, bt, ldb), e);
}

void b_gemm_acc_nd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                   const float* y, size_t ldy, float* c, size_t ldc) {
  if (m == 0 || d == 0) return;
  rows_product(n, x, ldx, pack_b(n, d, y, ldy), epi(Kind::acc, alpha, c, ldc, m, d));
}

void b_gemm_acc_nd_rows(size_t m, size_t n, size_t d, const float* alpha, const float* x,
                        size_t ldx, const float* y, size_t ldy, float* c, size_t ldc) {
  if (m == 0 || d == 0) return;
  Epi e = epi(Kind::acc_rows, 1.0f, c, ldc, m, d);
  e.alphas = alpha;
  rows_product(n, x, ldx, pack_b(n, d, y, ldy), e);
}

// C (n x d) += alpha X^T Y: A = X^T packed as vectors of X's columns (GROUP), B = Y.
void b_gemm_acc_tnd(size_t m, size_t n, size_t d, float alpha, const float* x, size_t ldx,
                    const float* y, size_t ldy, float* c, size_t ldc) {
  if (n == 0 || d == 0) return;
  const PackedB b = pack_b(m, d, y, ldy);
  const size_t np = (n + V - 1) / V * V, kp = (m + 1) / 2;
  uint32_t* ap = a_scratch(np * kp);
  pack_cols(m, n, x, ldx, ap);
  tiles<true>(np, ap, b, epi(Kind::acc, alpha, c, ldc, n, d));
}

void b_gemm_bias(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                 size_t ldw, const float* bias, float* c, size_t ldc) {
  if (m == 0 || n == 0) return;
  Epi e = epi(Kind::store, 1.0f, c, ldc, m, n);
  e.bias = bias;
  rows_product(k, x, ldx, pack_b(k, n, w, ldw), e);
}

// gemm_bias in blocks of 64 rows into a scratch, each block's parts copied to their outputs.
void b_gemm_bias_parts(size_t m, size_t n, size_t k, const float* x, size_t ldx, const float* w,
                       size_t ldw, const float* bias, const size_t* off, size_t parts,
                       float* const* dst) {
  if (m == 0 || n == 0) return;
  constexpr size_t kRows = 64;
  const PackedB b = pack_b(k, n, w, ldw);
  float* s = c_scratch(kRows * n);
  for (size_t r0 = 0; r0 < m; r0 += kRows) {
    const size_t rows = min_(kRows, m - r0);
    Epi e = epi(Kind::store, 1.0f, s, n, rows, n);
    e.bias = bias;
    rows_product(k, x + r0 * ldx, ldx, b, e);
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

}  // namespace

Bf16Kernels bf16_kernels_avx512() {
  return {b_dot_loop,         4.0 * KB * V,   b_round,     b_gemm_short_k,   b_gemm_acc_nd,
          b_gemm_acc_nd_rows, b_gemm_acc_tnd, b_gemm_bias, b_gemm_bias_parts};
}

}  // namespace simd
}  // namespace kernels
}  // namespace gf
