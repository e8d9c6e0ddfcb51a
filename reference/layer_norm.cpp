#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

// y[n, :] = (x[n, :] - mean) / √(var + eps) · weight + bias
//   x, y (N, E)  weight, bias (E)  var: the biased variance (÷ E), as torch.nn.LayerNorm
// Two passes (mean, then Σ (x - mean)²): no cancellation when the mean is large. The sums are
// accumulated in double: the shader's sums are tree reductions, more exact than a float running
// sum, and the ground truth should be closer still (a row of 1000 values near 100 loses ~1e-4 of
// its mean to a float running sum).
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t N, int64_t E, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* in = x + n * E;
    float* out = y + n * E;
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += in[e];
    float mean = static_cast<float>(sum / static_cast<double>(E));
    double squares = 0.0;
    for (int64_t e = 0; e < E; ++e) squares += static_cast<double>(in[e] - mean) * (in[e] - mean);
    float inv_std = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(E) + eps));
    for (int64_t e = 0; e < E; ++e) out[e] = (in[e] - mean) * inv_std * weight[e] + bias[e];
  }
}

}  // namespace vkattn::reference
