#include "reference/reference.h"

namespace vkattn::reference {

// scores[n, i, j] = scale · Σ_c Q[n, i, c] · K[n / group, j, c]
//   Q (B·H, L, d)  K (B·H/group, S, d)  scores (B·H, L, S)
void attention_scores(const float* q, const float* k, float* scores, int64_t BH, int64_t L, int64_t S,
                      int64_t d, float scale, int64_t group) {
  for (int64_t n = 0; n < BH; ++n)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        double acc = 0.0;  // summed in double, as linear
        for (int64_t c = 0; c < d; ++c) acc += q[(n * L + i) * d + c] * k[(n / group * S + j) * d + c];
        scores[(n * L + i) * S + j] = static_cast<float>(acc) * scale;
      }
}

}  // namespace vkattn::reference
