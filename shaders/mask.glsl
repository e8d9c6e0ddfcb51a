// The masks, as attention_mask and flash_attention both apply them (bindings 1 and 2 of each):
//   attn_mask        (L, S) or (B·H, L, S), additive: a bool mask arrives as 0 / -inf
//   key_padding_mask (B, S), additive likewise
layout(std430, binding = 1) readonly buffer AttnMask { float attn_mask[]; };
layout(std430, binding = 2) readonly buffer KeyPaddingMask { float key_padding_mask[]; };

// score + attn_mask + key_padding_mask, and -inf where causal and j > i (top-left aligned, as
// torch's is_causal). `index` is the score's flat index in (B·H, L, S); b its batch item.
float masked_score(float s, uint attn_mask_rank, bool has_key_padding_mask, bool causal, uint index, uint b, uint i,
                   uint j, uint cols) {
  if (attn_mask_rank == 2u) s += attn_mask[i * cols + j];
  if (attn_mask_rank == 3u) s += attn_mask[index];
  if (has_key_padding_mask) s += key_padding_mask[b * cols + j];
  if (causal && j > i) s = NEG_INF;
  return s;
}
