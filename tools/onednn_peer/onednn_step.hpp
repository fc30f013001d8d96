// The training step of the bench's model (token embedding + learned positions, pre-LayerNorm
// residual blocks of multi-head attention and a GELU MLP, final layer norm, mean pooling, a
// linear classifier, mean cross-entropy, backward, AdamW) written with oneDNN primitives: the
// benchmark peer of `growformer bench --peer onednn`. This header names no oneDNN type; the
// primitives live in onednn_step.cpp and onednn_step_lists.cpp alone (onednn_step_impl.hpp).
//
// Parameters are kept in the peer's own packing: per layer the heads' query, key and value
// projections side by side (W_Q is d_model x heads*d_k, head h in columns h*d_k..), and the
// heads' output maps stacked (W_O is heads*d_v x d_model, head h in rows h*d_v..).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gf_onednn {

/// The shape of one step: a batch of BATCH sequences of SEQ tokens, all valid.
struct StepShape {
  size_t batch = 0, seq = 0;
  size_t vocab = 0, classes = 0;
  size_t d_model = 0, layers = 0, heads = 0, d_k = 0, d_v = 0, hidden = 0;
  size_t max_len = 0;  // rows of the position table (>= seq; rows past seq get zero gradient)
  bool final_norm = true;
  float ln_eps = 1e-5f;
  /// The attention runs on chunks of samples x heads whose probabilities (each head's T x T)
  /// take at most this many bytes (at least one head of one sample); 0: the L2 caches of the
  /// threads.
  size_t attention_chunk_bytes = 0;
  /// The products in bf16, as growformer's `precision: bf16` computes them (docs/NUMERICS.md):
  /// the matmuls of the projections, the scores, P V, the MLP, the classifier and their
  /// gradients read bf16 copies of their two inputs (converted by reorders in the step's
  /// lists, so their time is the step's; the weights once a step) and write float32 sums;
  /// everything else float32.
  bool bf16 = false;
};

/// AdamW with decoupled weight decay, as the `adamw` optimizer computes it.
struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  enum class Decay { All, Matrices, None };
  Decay decay = Decay::Matrices;  // Matrices: parameters of two or more dimensions
};

/// One parameter of the peer: its name, shape (row-major) and buffers.
struct StepParam {
  std::string name;
  std::vector<size_t> shape;
  float* value = nullptr;
  float* grad = nullptr;
};

class MhaStep {
 public:
  /// Creates every primitive of the step once, with oneDNN's OpenMP runtime set to THREADS
  /// threads. MAX_ISA ("avx512_amx", "avx512_bf16", "avx512", "avx2", "sse2"; empty: no cap)
  /// caps oneDNN's instruction set when nothing in the process has used oneDNN yet
  /// (dnnl::set_max_cpu_isa). A bf16 SHAPE where bf16_unavailable_reason() is not empty throws
  /// std::runtime_error with it. Parameters start at zero; write them through parameters().
  MhaStep(const StepShape& shape, const AdamWSettings& adamw, size_t threads,
          const std::string& max_isa = "");
  ~MhaStep();
  MhaStep(const MhaStep&) = delete;
  MhaStep& operator=(const MhaStep&) = delete;

  /// Bytes of the buffers a step of SHAPE on THREADS threads allocates (parameters, optimizer
  /// state, activations kept for the backward pass, the heads' B x H x T x T probabilities
  /// included, and under bf16 the bf16 copies of the products' inputs; oneDNN's own scratchpads
  /// not).
  static size_t bytes_needed(const StepShape& shape, size_t threads);
  /// Bytes of the buffers this step allocated (bytes_needed of its shape and threads).
  size_t bytes_allocated() const;

  const StepShape& shape() const;
  std::vector<StepParam> parameters();

  /// Forward and backward on token ids (batch x seq, row-major) and labels (batch): returns
  /// the mean cross-entropy; every parameter's gradient is written (not accumulated).
  float forward_backward(const int32_t* ids, const int32_t* labels);
  /// One AdamW update of every parameter from its gradient (step count + 1).
  void adamw(float lr);
  /// AdamW's moments and step count back to zero (a fresh optimizer).
  void reset_optimizer();
  /// forward_backward, then adamw: one training step.
  float step(const int32_t* ids, const int32_t* labels, float lr);

  /// The attention's chunk: samples and heads per chunk.
  std::pair<size_t, size_t> attention_chunk() const;
  /// The implementation oneDNN chose for each kind of primitive, e.g.
  /// "matmul brg:avx512_core; softmax jit:avx512_core; ...".
  std::string implementations() const;
  /// The matmuls a step executes: with bf16 inputs (the products of StepShape::bf16), and
  /// with float32 inputs (every matmul in float32; in bf16 the column sums of the bias and
  /// position gradients and the mean pooling's two).
  std::pair<size_t, size_t> matmul_counts() const;
  size_t threads() const;
  /// "oneDNN 2.6.3, OpenMP runtime, ISA avx512_core" (the instruction set in effect).
  static std::string library_note();
  /// Empty where oneDNN's bf16 matmul runs natively in this process (its instruction set in
  /// effect has AVX512_BF16: avx512_core_bf16 or avx512_core_amx); else why not, one sentence.
  /// Call it after MhaStep's constructor has capped the set (or once oneDNN has run).
  static std::string bf16_unavailable_reason();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gf_onednn
