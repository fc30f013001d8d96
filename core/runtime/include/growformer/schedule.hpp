// The learning-rate schedule: linear warm-up to the optimizer's peak rate, then cosine,
// linear or constant down to min_lr_ratio * peak at the last step.
#pragma once
#include "growformer/export.hpp"

#include <string>

GROWFORMER_API_BEGIN

namespace gf {

struct LrSchedule {
  double peak = 1e-3;
  long warmup = 0, steps = 1;
  std::string kind = "cosine";  // "cosine", "linear" or "constant"
  double min_ratio = 0.0;
  /// The rate of step STEP (1-based).
  double at(long step) const;
};

}  // namespace gf

GROWFORMER_API_END
