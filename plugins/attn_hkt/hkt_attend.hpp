// The fused multi-level attention op of the `hkt` block, header-only so that
// tests/test_hkt.cpp can check it on its own (finite differences, a reference
// built from core ops).
//
//   S_ij = sum_l lambda_l * scale * q_l[i / s^l] . k_l[j / s^l]     (up(S_l) via the index map)
//   P    = softmax_j(S + mask),   out = P v
//
// Level 0 scores go straight into the T x T probability buffer by one GEMM; the
// coarse T_l x T_l products are small GEMMs that are added through the index
// map, so no T x T copy per level is ever made. Backward reduces dS into each
// level's grid by summing blocks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <growformer/autograd.hpp>
#include <growformer/kernels.hpp>
#include <growformer/parallel.hpp>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>
#if __has_include(<growformer/blas.hpp>)
#include <growformer/blas.hpp>
#define GF_HKT_HAVE_BLAS 1
#else
#define GF_HKT_HAVE_BLAS 0
#endif

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

// C (m x n, ldc) = alpha * op(A) op(B) + beta * C, row-major.
inline void gemm(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float* a,
                 size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
#if GF_HKT_HAVE_BLAS
  gf::sgemm(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
            static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
#else
  // Fallback: i-p-j loop order so the innermost loop streams rows of B and C.
  for (size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.0f)
      std::fill(ci, ci + n, 0.0f);
    else if (beta != 1.0f)
      for (size_t j = 0; j < n; ++j) ci[j] *= beta;
    for (size_t p = 0; p < k; ++p) {
      float av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
      if (av == 0.0f) continue;
      if (!tb) {
        const float* bp = b + p * ldb;
        for (size_t j = 0; j < n; ++j) ci[j] += av * bp[j];
      } else {
        for (size_t j = 0; j < n; ++j) ci[j] += av * b[j * ldb + p];
      }
    }
  }
#endif
}

inline void softmax_logits(const float* z, size_t n, float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) m = std::max(m, z[i]);
  float s = 0.0f;
  for (size_t i = 0; i < n; ++i) s += (out[i] = std::exp(z[i] - m));
  for (size_t i = 0; i < n; ++i) out[i] /= s;
}

}  // namespace detail

/// q[l], k[l]: (B, T_l, d_k); v: (B, T, d_v); logits: (L) shared or (B, L) per sample
/// (lambda = softmax(logits)). Returns (B, T, d_v). Gradients reach every q_l, k_l, v
/// and the logits.
inline gf::Var hkt_attend(const std::vector<gf::Var>& q, const std::vector<gf::Var>& k,
                          const gf::Var& v, const gf::Var& logits, const FusedSpec& spec) {
  const size_t L = q.size();
  if (L == 0 || k.size() != L) throw std::invalid_argument("hkt_attend: need L >= 1 q and k sets");
  if (v.shape().size() != 3) throw std::invalid_argument("hkt_attend: v must be (B, T, d_v)");
  if (spec.stride < 2 && L > 1) throw std::invalid_argument("hkt_attend: stride must be >= 2");
  const size_t B = v.dim(0), T = v.dim(1), dv = v.dim(2);
  const size_t dk = q[0].shape().size() == 3 ? q[0].dim(2) : 0;
  std::vector<size_t> Tl(L), blk(L);
  for (size_t l = 0; l < L; ++l) {
    blk[l] = l == 0 ? 1 : blk[l - 1] * spec.stride;
    Tl[l] = (T + blk[l] - 1) / blk[l];
    for (const gf::Var* x : {&q[l], &k[l]}) {
      const auto& s = x->shape();
      if (s.size() != 3 || s[0] != B || s[1] != Tl[l] || s[2] != dk)
        throw std::invalid_argument("hkt_attend: level " + std::to_string(l) + " q/k has shape " +
                                    gf::shape_str(s) + ", expected (" + std::to_string(B) + ", " +
                                    std::to_string(Tl[l]) + ", " + std::to_string(dk) + ")");
    }
  }
  const bool per_sample = logits.shape().size() == 2;
  if (logits.size() != (per_sample ? B * L : L) || (per_sample && logits.dim(0) != B))
    throw std::invalid_argument("hkt_attend: logits must be (L) or (B, L), got " +
                                gf::shape_str(logits.shape()));
  if (spec.key_valid && spec.key_valid->size() != B * T)
    throw std::invalid_argument("hkt_attend: key_valid must have B*T entries");

  // lambda per sample (B, L)
  std::vector<float> lam(B * L);
  for (size_t b = 0; b < B; ++b)
    detail::softmax_logits(logits.value().data() + (per_sample ? b * L : 0), L, lam.data() + b * L);

  gf::Tensor out = gf::Tensor::empty({B, T, dv});
  gf::Tensor P = gf::Tensor::empty({B, T, T});  // probabilities, kept for backward
  const float scale = spec.scale;
  const bool causal = spec.causal;
  const uint8_t* kv = spec.key_valid ? spec.key_valid->data() : nullptr;

  gf::parallel_for(B, [&](size_t b) {
    const float* lb = lam.data() + b * L;
    float* pb = P.data() + b * T * T;
    // Level 0 straight into P.
    detail::gemm(false, true, T, T, dk, lb[0] * scale, q[0].value().data() + b * T * dk, dk,
                 k[0].value().data() + b * T * dk, dk, 0.0f, pb, T);
    // Coarse levels: small T_l x T_l products, added through the index map.
    std::vector<float> sl;
    for (size_t l = 1; l < L; ++l) {
      const size_t n = Tl[l], bs = blk[l];
      sl.resize(n * n);
      detail::gemm(false, true, n, n, dk, lb[l] * scale, q[l].value().data() + b * n * dk, dk,
                   k[l].value().data() + b * n * dk, dk, 0.0f, sl.data(), n);
      // The rows of one block I share S_l[I, :]: expand it to length T once per block,
      // then each row is one contiguous (vectorisable) add over the usable prefix.
      std::vector<float> up(T);
      for (size_t I = 0; I < n; ++I) {
        const float* sr = sl.data() + I * n;
        for (size_t J = 0; J < n; ++J)
          std::fill(up.begin() + J * bs, up.begin() + std::min(T, (J + 1) * bs), sr[J]);
        const size_t i1 = std::min(T, (I + 1) * bs);
        for (size_t i = I * bs; i < i1; ++i) {
          const size_t lim = causal ? std::min(T, causal_blocks(i, bs) * bs) : T;
          float* row = pb + i * T;
          for (size_t j = 0; j < lim; ++j) row[j] += up[j];
        }
      }
    }
    // Mask and softmax, row by row.
    const uint8_t* kvb = kv ? kv + b * T : nullptr;
    for (size_t i = 0; i < T; ++i) {
      float* row = pb + i * T;
      const size_t jend = causal ? i + 1 : T;
      // Entries past jend (causal) are zero, like masked keys.
      gf::kernels::softmax_row(row, jend, kvb);
      std::fill(row + jend, row + T, 0.0f);
    }
    detail::gemm(false, false, T, dv, T, 1.0f, pb, T, v.value().data() + b * T * dv, dv, 0.0f,
                 out.data() + b * T * dv, dv);
  });

  // Any input with a gradient makes the result require one.
  const gf::Var* any = nullptr;
  for (size_t l = 0; l < L && !any; ++l) {
    if (q[l].requires_grad())
      any = &q[l];
    else if (k[l].requires_grad())
      any = &k[l];
  }
  if (!any && v.requires_grad()) any = &v;
  if (!any && logits.requires_grad()) any = &logits;
  gf::Var res = gf::make_result(std::move(out), {any});
  if (!res.requires_grad()) return res;

  gf::record([res, q, k, v, logits, P, lam, Tl, blk, per_sample, scale, causal, B, T, dv, dk,
              L]() mutable {
    if (!res.grad().defined()) return;
    const float* g = res.grad().data();
    std::vector<float*> gq(L, nullptr), gk(L, nullptr);
    for (size_t l = 0; l < L; ++l) {
      if (q[l].requires_grad()) gq[l] = q[l].node()->grad_buf().data();
      if (k[l].requires_grad()) gk[l] = k[l].node()->grad_buf().data();
    }
    float* gv = v.requires_grad() ? v.node()->grad_buf().data() : nullptr;
    std::vector<float> dlam(B * L, 0.0f);

    gf::parallel_for(B, [&](size_t b) {
      const float* lb = lam.data() + b * L;
      const float* pb = P.data() + b * T * T;
      const float* gob = g + b * T * dv;
      const float* vb = v.value().data() + b * T * dv;
      // dP = dO v^T, then dS = P * (dP - rowsum(P * dP)) in place; rowsum(P * dP) = dO_i . out_i.
      gf::Tensor dsbuf = gf::Tensor::empty({T, T});  // pooled, no zero fill
      float* ds = dsbuf.data();
      const float* ob = res.value().data() + b * T * dv;
      detail::gemm(false, true, T, T, dv, 1.0f, gob, dv, vb, dv, 0.0f, ds, T);
      for (size_t i = 0; i < T; ++i) {
        const float* pr = pb + i * T;
        float* dr = ds + i * T;
        float rs = 0.0f;
        for (size_t c = 0; c < dv; ++c) rs += gob[i * dv + c] * ob[i * dv + c];
        for (size_t j = 0; j < T; ++j) dr[j] = pr[j] * (dr[j] - rs);
      }
      if (gv)  // dV = P^T dO (each sample owns its slice)
        detail::gemm(true, false, T, dv, T, 1.0f, pb, T, gob, dv, 1.0f, gv + b * T * dv, dv);

      // Per level: dS_l (the blocks of dS summed), then G = dS_l k_l.
      // dq_l = c_l G, dk_l = c_l dS_l^T q_l, d lambda_l = scale * sum_I q_l[I] . G[I].
      std::vector<float> dsl, G;
      for (size_t l = 0; l < L; ++l) {
        const size_t n = Tl[l], bs = blk[l];
        const float* dsp;
        if (l == 0) {
          dsp = ds;
        } else {
          // Sum the rows of block I first (contiguous adds), then fold columns into blocks.
          dsl.assign(n * n, 0.0f);
          std::vector<float> acc(T);
          for (size_t I = 0; I < n; ++I) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            const size_t i1 = std::min(T, (I + 1) * bs);
            for (size_t i = I * bs; i < i1; ++i) {
              const size_t lim = causal ? std::min(T, causal_blocks(i, bs) * bs) : T;
              const float* dr = ds + i * T;
              for (size_t j = 0; j < lim; ++j) acc[j] += dr[j];
            }
            float* out_row = dsl.data() + I * n;
            for (size_t J = 0; J < n; ++J) {
              float sum = 0.0f;
              for (size_t j = J * bs, j1 = std::min(T, (J + 1) * bs); j < j1; ++j) sum += acc[j];
              out_row[J] += sum;
            }
          }
          dsp = dsl.data();
        }
        const float c = lb[l] * scale;
        const float* qb = q[l].value().data() + b * n * dk;
        const float* kb = k[l].value().data() + b * n * dk;
        G.resize(n * dk);
        detail::gemm(false, false, n, dk, n, 1.0f, dsp, n, kb, dk, 0.0f, G.data(), dk);
        double dl = 0.0;
        for (size_t x = 0; x < n * dk; ++x) dl += static_cast<double>(qb[x]) * G[x];
        dlam[b * L + l] = static_cast<float>(dl) * scale;
        if (gq[l]) {
          float* gqb = gq[l] + b * n * dk;
          for (size_t x = 0; x < n * dk; ++x) gqb[x] += c * G[x];
        }
        if (gk[l])
          detail::gemm(true, false, n, dk, n, c, dsp, n, qb, dk, 1.0f, gk[l] + b * n * dk, dk);
      }
    });

    if (logits.requires_grad()) {
      // Softmax backward: d z = lambda * (d lambda - sum lambda d lambda).
      float* gz = logits.node()->grad_buf().data();
      for (size_t b = 0; b < B; ++b) {
        const float* lb = lam.data() + b * L;
        const float* db = dlam.data() + b * L;
        float dot = 0.0f;
        for (size_t l = 0; l < L; ++l) dot += lb[l] * db[l];
        float* gzb = gz + (per_sample ? b * L : 0);
        for (size_t l = 0; l < L; ++l) gzb[l] += lb[l] * (db[l] - dot);
      }
    }
  });
  return res;
}

}  // namespace gf_hkt
