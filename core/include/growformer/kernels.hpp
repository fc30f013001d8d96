// Small vectorisable kernels shared by ops and plugins' fused ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gf {
namespace kernels {

/// exp(x) for x in [-87, 88] to about 2 ulp; branch-free so loops over arrays vectorise.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float fx = x * 1.44269504088896341f + 0.5f;
  float n = static_cast<float>(static_cast<int32_t>(fx) - (fx < 0.0f ? 1 : 0));
  // correct the truncation for exact negative integers
  n = (n + 1.0f <= fx) ? n + 1.0f : n;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

/// In-place softmax of one row of length n; entries with valid[j] == 0 get 0.
/// Returns false when no entry is valid (the row is then all zeros).
bool softmax_row(float* row, size_t n, const uint8_t* valid);

}  // namespace kernels
}  // namespace gf
