#include "growformer/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace gf {

double LrSchedule::at(long step) const {
  if (warmup > 0 && step <= warmup) return peak * step / warmup;
  if (kind == "constant") return peak;
  double span = std::max<long>(1, steps - warmup);
  double p = std::min(1.0, static_cast<double>(step - warmup) / span);
  double lo = peak * min_ratio;
  if (kind == "linear") return lo + (peak - lo) * (1 - p);
  return lo + (peak - lo) * 0.5 * (1 + std::cos(M_PI * p));
}

}  // namespace gf
