#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference.h"

namespace vkattn::reference {

int64_t decoding_part_keys(int64_t S, int64_t parts) { return (S + parts - 1) / parts; }

void flash_decoding(const float* q, const float* k, const float* v, const float* key_padding_mask, bool causal,
                    int64_t window, float* partials, int64_t B, int64_t H, int64_t L, int64_t C, int64_t S, int64_t d,
                    int64_t parts, float scale, int64_t group) {
  const int64_t per_part = decoding_part_keys(S, parts);
  std::vector<float> acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t part = 0; part < parts; ++part) {
          const int64_t bh = b * H + h;
          const float* q_row = q + (bh * L + i) * d;
          const int64_t position = S - L + i;  // query i's
          int64_t begin = part * per_part, end = std::min(S, begin + per_part);
          if (causal) end = std::min(end, position + 1);
          if (causal && window > 0) begin = std::max(begin, position - window + 1);
          float m = -1e30f, l = 0.0f;  // running max, running sum of exp(s - m)
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = begin; j < end; ++j) {
            const float* k_row = k + (bh / group * C + j) * d;
            float dot = 0.0f;
            for (int64_t c = 0; c < d; ++c) dot += q_row[c] * k_row[c];
            float s = dot * scale;
            if (key_padding_mask) s += key_padding_mask[b * S + j];
            if (s == -INFINITY) continue;  // blocked: weight 0
            const float m_new = std::max(m, s);
            const float rescale = std::exp(m - m_new), p = std::exp(s - m_new);
            l = l * rescale + p;
            const float* v_row = v + (bh / group * C + j) * d;
            for (int64_t c = 0; c < d; ++c) acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] * rescale + p * v_row[c];
            m = m_new;
          }
          float* out = partials + ((bh * L + i) * parts + part) * (d + 2);
          for (int64_t c = 0; c < d; ++c) out[c] = acc[static_cast<size_t>(c)];
          out[d] = m;
          out[d + 1] = l;
        }
}

}  // namespace vkattn::reference
