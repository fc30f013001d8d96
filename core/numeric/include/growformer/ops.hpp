// Differentiable ops. Shapes are row-major; "rows" means every dimension but
// the last. Each op is checked against finite differences in tests/test_ops.cpp;
// the sources are core/src/ops_<family>.cpp.
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <vector>

#include "growformer/autograd.hpp"

GROWFORMER_API_BEGIN

namespace gf {
class Rng;

namespace ops {

// ---- linear algebra -------------------------------------------------------
/// (..., in) x (in, out) [+ bias (out)] -> (..., out). GEMM through BLAS,
/// rows split over the thread pool.
Var linear(const Var& x, const Var& w, const Var* bias = nullptr);
/// The linear maps of one input by several weights (in, out_i) [+ biases (out_i)], in one
/// product with the weights side by side (kernels::gemm_bias): output i is (..., out_i). Each
/// output element is one FMA chain over `in`, so an output does not depend on which other
/// weights stand beside it, and each weight's gradient is computed from its own columns alone.
/// The input's gradient is one product over all outputs. B empty: no biases.
std::vector<Var> linear_parts(const Var& x, const std::vector<Var>& w, const std::vector<Var>& b);
/// sum_i x_i W_i [+ bias]: inputs (..., in_i) with the same rows, weights (in_i, out), as one
/// product of the inputs side by side with the weights stacked (kernels::gemm_bias): each
/// output element is one FMA chain over all inputs in order, then + bias (the heads' output
/// maps of a block, without a separate output per head, their sum and the bias pass). Each
/// input's gradient is G W_i^T (the chains of ops::linear), each weight's X_i^T G.
Var linear_sum(const std::vector<Var>& x, const std::vector<Var>& w, const Var* bias = nullptr);
/// Batched or plain matmul: a (.., m, k) x b (.., k, n) with optional
/// transposes of the last two dimensions; batch dims must agree.
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);

// ---- elementwise ----------------------------------------------------------
Var add(const Var& a, const Var& b);  // same shape, or b broadcast over rows of a
Var sub(const Var& a, const Var& b);  // same shape
Var mul(const Var& a, const Var& b);  // same shape, or b a scalar (size 1)
/// a + t (b - a) in one pass, t a scalar (size 1): a gate between two same-shape inputs
/// (exactly add(a, mul(sub(b, a), t)) forward, without its three temporaries and passes).
Var lerp(const Var& a, const Var& b, const Var& t);
Var scale(const Var& a, float s);
Var add_scalar(const Var& a, float s);
Var gelu(const Var& x);  // exact (erf) GELU
Var sigmoid(const Var& x);
Var relu(const Var& x);
Var tanh(const Var& x);
/// x * (1 - p) mask / (1 - p) during training; identity when p == 0.
Var dropout(const Var& x, float p, Rng& rng);
/// Dropout on a shard of a larger batch: X holds the rows (first dimension) after ROWS_BEFORE
/// and before ROWS_AFTER rows of the whole batch, and the mask is that rows' part of the whole
/// batch's mask (the stream advances past the other rows' draws).
Var dropout(const Var& x, float p, Rng& rng, size_t rows_before, size_t rows_after);

// ---- reductions and normalisation ------------------------------------------
Var sum(const Var& x);
Var mean(const Var& x);
Var softmax(const Var& x);  // over the last dimension
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, float eps = 1e-5f);

// ---- embeddings and sequence ops --------------------------------------------
/// ids (B*T) row-major for shape (B, T) -> (B, T, d).
Var embedding(const std::vector<int32_t>& ids, size_t batch, size_t seq, const Var& table);
/// x (B, T, d) + pos (P, d) using the first T rows of pos.
Var add_positions(const Var& x, const Var& pos);
/// Prepends a learned vector v (d) to every sequence: (B, T, d) -> (B, T+1, d).
Var prepend(const Var& x, const Var& v);
/// Mean over valid positions: x (B, T, d), mask (B*T, 1 = valid) -> (B, d).
Var masked_mean_pool(const Var& x, const std::vector<uint8_t>& mask);
/// x[:, t, :] -> (B, d).
Var select_position(const Var& x, size_t t);
/// Causal depthwise 1-D convolution over T with stride:
/// x (B, T, C), w (C, k), bias (C) or null; out[t'] = sum_j w[c, j] x[t' s - (k-1) + j]
/// with zero left padding; T' = ceil(T / s).
Var depthwise_conv1d_causal(const Var& x, const Var& w, const Var* bias, size_t stride);

// ---- shape ops --------------------------------------------------------------
Var reshape(const Var& x, Shape shape);
/// Swaps the last two dimensions.
Var transpose_last2(const Var& x);
/// x[..., begin:end] along the last dimension.
Var slice_last(const Var& x, size_t begin, size_t end);
/// Concatenates along the last dimension.
Var concat_last(const std::vector<Var>& xs);
/// Sum of several same-shaped tensors (one output buffer).
Var sum_all(const std::vector<Var>& xs);

// ---- losses -----------------------------------------------------------------
/// Mean cross-entropy of logits (B, C) against labels.
Var cross_entropy(const Var& logits, const std::vector<int32_t>& labels);

// ---- attention ----------------------------------------------------------------
struct AttentionMask {
  const std::vector<uint8_t>* key_valid = nullptr;  // (B*T), 1 = attend; null = all
  bool causal = false;
};
/// Fused scaled dot-product attention: q, k (B, T, dk), v (B, T, dv) ->
/// softmax(q k^T * scale + mask) v, (B, T, dv). Streaming: tiles of query rows
/// (kernels::attention_block_rows) against all keys; keeps only each row's
/// log-sum-exp (B x T) and recomputes the probabilities in the backward pass, so
/// memory is O(B T) plus O(rows x T) scratch per thread. A row with no valid key gives 0.
Var attention(const Var& q, const Var& k, const Var& v, float scale, const AttentionMask& mask);

}  // namespace ops
}  // namespace gf

GROWFORMER_API_END
