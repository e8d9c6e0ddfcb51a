#version 450
#extension GL_GOOGLE_include_directive : require
// attention_mask — block or bias scores before the softmax
//   scores           (B, H, L, S)
//   attn_mask        (L, S) or (B·H, L, S), additive: a bool mask arrives as 0 / -inf
//   key_padding_mask (B, S), additive likewise
//   out              (B, H, L, S) = scores + attn_mask + key_padding_mask, and -inf where
//                    causal and j > i (top-left aligned, as torch's is_causal)
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Scores { float scores[]; };
layout(std430, binding = 1) readonly buffer AttnMask { float attn_mask[]; };
layout(std430, binding = 2) readonly buffer KeyPaddingMask { float key_padding_mask[]; };
layout(std430, binding = 3) writeonly buffer Output { float masked[]; };

layout(push_constant) uniform Params {
  uint batch;   // B
  uint heads;   // H
  uint rows;    // L
  uint cols;    // S
  uint attn_mask_rank;        // 0 = none, 2 = (L, S), 3 = (B·H, L, S)
  uint has_key_padding_mask;  // 0 or 1
  uint causal;                // 0 or 1
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.batch * p.heads * p.rows * p.cols) return;
  uint j = index % p.cols;
  uint i = (index / p.cols) % p.rows;
  uint bh = index / (p.cols * p.rows);  // b·H + h
  uint b = bh / p.heads;

  float s = scores[index];
  if (p.attn_mask_rank == 2u) s += attn_mask[i * p.cols + j];
  if (p.attn_mask_rank == 3u) s += attn_mask[index];
  if (p.has_key_padding_mask != 0u) s += key_padding_mask[b * p.cols + j];
  if (p.causal != 0u && j > i) s = NEG_INF;
  masked[index] = s;
}
