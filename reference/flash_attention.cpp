#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference.h"

namespace vkattn::reference {

void flash_attention(const float* q, const float* k, const float* v, const float* attn_mask, int attn_mask_rank,
                     const float* key_padding_mask, bool causal, int64_t window, float* out, int64_t B, int64_t H,
                     int64_t L, int64_t S, int64_t d, float scale, int64_t group) {
  std::vector<float> acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t bh = b * H + h;
        const float* q_row = q + (bh * L + i) * d;
        float m = -1e30f, l = 0.0f;  // running max, running sum of exp(s - m)
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < S; ++j) {
          const float* k_row = k + (bh / group * S + j) * d;
          float dot = 0.0f;
          for (int64_t c = 0; c < d; ++c) dot += q_row[c] * k_row[c];
          float s = masked_score(dot * scale, attn_mask, attn_mask_rank, key_padding_mask, causal, window,
                                 (bh * L + i) * S + j, b, i, j, S);
          if (s == -INFINITY) continue;  // blocked: weight 0
          const float m_new = std::max(m, s);
          const float rescale = std::exp(m - m_new), p = std::exp(s - m_new);
          l = l * rescale + p;
          const float* v_row = v + (bh / group * S + j) * d;
          for (int64_t c = 0; c < d; ++c) acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] * rescale + p * v_row[c];
          m = m_new;
        }
        float* o = out + (bh * L + i) * d;
        for (int64_t c = 0; c < d; ++c) o[c] = l > 0.0f ? acc[static_cast<size_t>(c)] / l : 0.0f;
      }
}

}  // namespace vkattn::reference
