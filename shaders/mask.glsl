// The masks, as attention_mask and flash_attention both apply them (bindings 1 and 2 of each):
//   attn_mask        (L, S) or (B·H, L, S), additive: a bool mask arrives as 0 / -inf
//   key_padding_mask (B, S), additive likewise
layout(std430, binding = 1) readonly buffer AttnMask { float attn_mask[]; };
layout(std430, binding = 2) readonly buffer KeyPaddingMask { float key_padding_mask[]; };

// Whether query i may not see key j by position: past the diagonal when causal (top-left
// aligned, as torch's is_causal), or, with a window W > 0, W or more keys behind it.
bool causally_blocked(bool causal, uint window, uint i, uint j) {
  return causal && (j > i || (window != 0u && j + window <= i));
}

// score + attn_mask + key_padding_mask, and -inf where causally_blocked. `index` is the score's
// flat index in (B·H, L, S); b its batch item.
float masked_score(float s, uint attn_mask_rank, bool has_key_padding_mask, bool causal, uint window, uint index,
                   uint b, uint i, uint j, uint cols) {
  if (attn_mask_rank == 2u) s += attn_mask[i * cols + j];
  if (attn_mask_rank == 3u) s += attn_mask[index];
  if (has_key_padding_mask) s += key_padding_mask[b * cols + j];
  if (causally_blocked(causal, window, i, j)) s = NEG_INF;
  return s;
}
