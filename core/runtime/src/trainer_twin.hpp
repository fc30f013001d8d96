// Private to the trainer: the model's twin (GrowthPolicy::twin_without), a copy of the model
// trained beside it on the same batches with some heads muted, so that a policy can compare
// the model with the one the run would have had without those heads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "growformer/checkpoint.hpp"
#include "growformer/data_parallel.hpp"
#include "growformer/growth.hpp"
#include "growformer/trainer.hpp"

namespace gf {
namespace trainer_detail {
/// What the twin's life depends on: each block's head ids and each block's MLP width.
struct ModelShape {
  std::vector<std::vector<int>> heads;
  std::vector<size_t> widths;
  bool operator==(const ModelShape& o) const { return heads == o.heads && widths == o.widths; }
};
ModelShape shape_of(const Model& model);
/// What a check's edits (the model's shape BEFORE and AFTER) mean for a twin without HEADS:
/// none (keep it), exactly its heads taken back (adopt it: the model continues from the twin),
/// anything else (drop it: it is no longer the model without HEADS).
enum class TwinFate { keep, adopt, drop };
TwinFate twin_fate(const ModelShape& before, const ModelShape& after,
                   const std::vector<HeadRef>& heads);
}  // namespace trainer_detail

class Experiment::Twin {
 public:
  /// A twin of MAIN as it is now (weights, optimizer and trainer state) with HEADS muted, forked
  /// at STEP. Its experiment is built from MAIN's configuration and data record, reads no data,
  /// and shares MAIN's communicator; its plugins are searched in PLUGIN_PATHS as the run's.
  Twin(Experiment& main, std::vector<HeadRef> heads, long step,
       const std::vector<std::string>& plugin_paths);
  /// The twin saved in MAIN's checkpoint CK (at PATH), or null when CK holds none.
  /// RuntimeError naming PATH when its record is incomplete or disagrees with its tensors.
  static std::unique_ptr<Twin> restore(Experiment& main, const Checkpoint& ck,
                                       const std::string& path,
                                       const std::vector<std::string>& plugin_paths);

  const std::vector<HeadRef>& heads() const { return heads_; }
  long since() const { return since_; }

  /// One training step on BATCH (this process's rows of a batch of GLOBAL rows) at LR, clipped
  /// at CLIP, its gradients averaged across processes as the model's are (SYNC). Returns the
  /// mean loss over the whole batch (every process gets the same).
  double step(const Batch& batch, size_t global, float lr, double clip, GradientSync& sync,
              bool several);
  /// The probe (the first BATCHES batches of VAL) on the twin, its per-example losses in LOSSES
  /// (this process's, in split order).
  TwinProbe probe(const std::vector<Example>& val, long batches, std::vector<double>* losses);
  /// Copies the twin's weights and optimizer state into MAIN's model, whose heads are now the
  /// twin's without heads(). RuntimeError when a parameter of MAIN has none or another shape.
  void adopt(Experiment& main) const;
  /// The twin as tensors ("twin.model.*", "twin.optim.*") and metadata ("twin": its own
  /// checkpoint's metadata as JSON, "twin_heads", "twin_since") to save beside MAIN's.
  Checkpoint saved() const;

  /// The loop's side after a check whose edits found the model of shape BEFORE: TWIN kept,
  /// adopted into MAIN (the edits took exactly its heads back) or dropped, then forked anew
  /// where the policies want a twin without WANT; `twin` events to EVENTS.
  static void after_check(std::unique_ptr<Twin>& twin, Experiment& main,
                          const trainer_detail::ModelShape& before,
                          const std::vector<HeadRef>& want, long step,
                          const std::vector<std::string>& plugin_paths, EventSink& events);
  /// TWIN ended (WHAT: adopted, dropped) at STEP for WHY, with its event.
  static void end(std::unique_ptr<Twin>& twin, const char* what, long step, const std::string& why,
                  EventSink& events);

 private:
  Twin() = default;
  /// A `twin` event: WHAT (fork, adopted, dropped) at STEP, TWIN's heads, and WHY.
  static void event(const Twin& twin, const char* what, long step, const std::string& why,
                    EventSink& events);
  std::unique_ptr<Experiment> ex_;
  std::vector<HeadRef> heads_;
  long since_ = 0;
};

}  // namespace gf
