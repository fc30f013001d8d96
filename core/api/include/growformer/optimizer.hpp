// Optimizers update named parameters and keep per-parameter state by name, so
// that state survives structural edits exactly.
#pragma once
#include "growformer/export.hpp"

#include <map>
#include <string>
#include <vector>

#include "growformer/module.hpp"

GROWFORMER_API_BEGIN

namespace gf {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of every parameter that has a gradient. New names start from zero state.
  virtual void step(NamedParams& params, float lr) = 0;
  /// Drops the state of removed parameters.
  virtual void forget(const std::vector<std::string>& removed) = 0;
  /// Named state tensors ("m.<param>", ...) and scalar state for checkpoints.
  virtual std::map<std::string, Tensor> state_tensors() const = 0;
  virtual std::map<std::string, double> state_scalars() const = 0;
  /// Restores state saved by state_tensors/state_scalars for the model's `params`. Throws
  /// RuntimeError when a state entry names no parameter, has another shape than its parameter,
  /// holds a non-finite value, or is incomplete; the optimizer is left empty then.
  virtual void load_state(const std::map<std::string, Tensor>& tensors,
                          const std::map<std::string, double>& scalars,
                          const NamedParams& params) = 0;
  /// The peak learning rate (`lr` of the optimizer's config; the schedule scales it). The
  /// registry declares `lr` for every optimizer and sets it on creation.
  double peak_lr() const { return peak_lr_; }

 private:
  friend class Registry;
  double peak_lr_ = 1e-3;
};

/// Scales every gradient so that their global norm is at most MAX_NORM (0 = off); returns
/// the norm before clipping (0 when off).
double clip_gradients(NamedParams& params, double max_norm);

}  // namespace gf

GROWFORMER_API_END
