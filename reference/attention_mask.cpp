#include "reference/reference.h"

namespace vkattn::reference {

// out = scores + attn_mask + key_padding_mask, then -inf where causally_blocked
//   scores, out (B, H, L, S)  attn_mask (L, S) | (B·H, L, S) | null  key_padding_mask (B, S) | null
void attention_mask(const float* scores, const float* attn_mask, int attn_mask_rank,
                    const float* key_padding_mask, bool causal, int64_t window, float* out, int64_t B,
                    int64_t H, int64_t L, int64_t S) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) {
          int64_t index = ((b * H + h) * L + i) * S + j;
          out[index] = masked_score(scores[index], attn_mask, attn_mask_rank, key_padding_mask, causal, window, index, b, i, j, S);
        }
}

}  // namespace vkattn::reference
