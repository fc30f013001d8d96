// The oneDNN peer of a growformer model: the model's training step in oneDNN primitives
// (onednn_step.hpp) with growformer's parameters copied in, and the correctness gate that
// `growformer bench --peer onednn` passes before it times anything.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <growformer/config.hpp>
#include <growformer/model.hpp>
#include <growformer/tensor.hpp>

#include "onednn_step.hpp"

namespace gf {
class Registry;
}

namespace gf_onednn {

/// The peer step of one growformer model, with the map between growformer's parameters (one
/// tensor per head) and the peer's packing (the heads side by side).
class ModelPeer {
 public:
  /// Checks that MODEL, built from MODEL_NODE, is one the peer computes (attention `mha` with
  /// `dot_product` heads of one shape, the same number in every block, `combine: sum`, not
  /// causal; no dropout; `pool: mean`) and that OPTIMIZER_NODE is `adamw`; throws
  /// gf::ConfigError naming what differs. Builds the peer step for BATCH x SEQ on THREADS
  /// threads with oneDNN capped to growformer's kernel sets (its float32 set; on avx512 its bf16
  /// set too where bf16 can run: avx512_core_amx for AMX, avx512_core_bf16 for vdpbf16ps), and
  /// copies MODEL's parameters in. The peer's products take the precision growformer's have now
  /// (gf::kernels::product_precision()); bf16 where oneDNN's bf16 matmul cannot run throws
  /// gf::ConfigError saying why. ATTENTION_CHUNK_BYTES: StepShape::attention_chunk_bytes (0: the
  /// threads' L2 caches).
  ModelPeer(const gf::ConfigNode& model_node, const gf::ConfigNode& optimizer_node,
            gf::Registry& registry, const gf::Model& model, size_t batch, size_t seq,
            size_t threads, size_t attention_chunk_bytes = 0);
  ~ModelPeer();

  MhaStep& step() { return *step_; }
  /// Whether the peer's products are bf16 (StepShape::bf16).
  bool bf16() const { return step_->shape().bf16; }
  /// Copies every parameter of MODEL (growformer's naming) into the peer.
  void load_parameters(const gf::Model& model);
  /// Copies growformer's gradients of MODEL into the peer's gradient buffers.
  void load_gradients(const gf::Model& model);
  /// The peer's values or gradients in growformer's naming and shapes.
  std::map<std::string, gf::Tensor> values() const;
  std::map<std::string, gf::Tensor> gradients() const;

  /// Forward and backward on BATCH (every token valid; throws otherwise): the loss.
  float forward_backward(const gf::Batch& batch);
  /// One training step: forward_backward, then AdamW with LR.
  float train_step(const gf::Batch& batch, float lr);

 private:
  /// One growformer parameter: a ROWS x COLS block of a peer parameter at (ROW0, COL0).
  struct Place {
    std::string name;
    gf::Shape shape;
    size_t peer = 0;  // index into peer parameters
    size_t rows = 0, cols = 0, row0 = 0, col0 = 0;
  };
  template <class F>
  void for_each_element(const Place& p, F f) const;
  void check_batch(const gf::Batch& batch) const;

  std::unique_ptr<MhaStep> step_;
  std::vector<StepParam> peer_;
  std::vector<Place> places_;
};

/// The gate's tolerance on the loss and the gradients (norm-wise relative) in float32: both
/// steps round every operation in float32, in different orders.
constexpr double kGateTolerance = 1e-4;
/// The gate's tolerance under bf16 (loss and gradients; AdamW's updates, float32 from the same
/// gradients, keep kGateTolerance): 2^-5. Each bf16 product of either step is within
/// (2^-7 + 2^-16) sum |a b| of the exact product of its inputs (docs/NUMERICS.md, "Why the
/// bound holds"), so the two steps' products differ by up to 2^-6 of sum |a b| from one
/// product even where their inputs agree; the inputs do not always agree (the attention's
/// probabilities are rounded normalised here and unnormalised in growformer; float32 values
/// that differ in their last bits round apart now and then), and a gradient is a chain of
/// such products. 2^-5 (8 u) is the bound tests/test_bf16.cpp allows the attention's gradients
/// against float32; measured: 1.3e-3 at most (bench shape, d 512, the test's model). A step
/// whose products were float32 passes it too (it is within the bound of growformer's bf16
/// step); it is told apart by its distance from growformer's float32 step and by counting its
/// bf16 matmuls (tests/test_onednn_peer.cpp).
constexpr double kGateToleranceBf16 = 1.0 / 32;

/// What the gate compared: norm-wise relative errors |a - b| / |b| (b growformer's).
struct GateResult {
  double tolerance = 0;         // the loss's and the gradients'
  double update_tolerance = 0;  // AdamW's updates'
  bool bf16 = false;            // both steps' products in bf16
  float loss_growformer = 0, loss_onednn = 0;
  double loss_error = 0;
  struct Entry {
    std::string name;
    double error = 0;
  };
  std::vector<Entry> gradients;  // every parameter's gradient
  std::vector<Entry> updates;    // every parameter's AdamW update, from growformer's gradients
  Entry worst_gradient, worst_update;
  bool passed = false;
  /// One line: the loss error and the worst gradient and update errors against the tolerance.
  std::string summary() const;
};

/// The correctness gate: one forward and backward of MODEL (growformer, at the products'
/// precision in effect, which must be the peer's) on BATCH and of PEER as it stands (built from
/// MODEL: its own copy of MODEL's parameters); the loss and every parameter's gradient must
/// agree to TOLERANCE (norm-wise relative; 0: kGateTolerance, or kGateToleranceBf16 for a bf16
/// peer). Then one AdamW step of a fresh OPTIMIZER_NODE optimizer and of the peer's AdamW, both
/// from growformer's gradients: every parameter's update must agree to the smaller of
/// TOLERANCE and kGateTolerance. MODEL's parameters are left as they were, its gradients
/// cleared; the peer holds MODEL's parameters after, its AdamW state reset.
GateResult run_gate(gf::Model& model, gf::Registry& registry, const gf::ConfigNode& optimizer_node,
                    ModelPeer& peer, const gf::Batch& batch, float lr, double tolerance = 0);

}  // namespace gf_onednn
