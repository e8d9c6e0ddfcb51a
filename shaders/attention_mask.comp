#version 450
#extension GL_GOOGLE_include_directive : require
// attention_mask — block or bias scores before the softmax
//   scores           (B, H, L, S)
//   attn_mask        (L, S) or (B·H, L, S), additive: a bool mask arrives as 0 / -inf
//   key_padding_mask (B, S), additive likewise
//   out              (B, H, L, S) = scores + attn_mask + key_padding_mask, and -inf where
//                    causal and j > i (top-left aligned, as torch's is_causal)
#include "common.glsl"
#include "mask.glsl"

layout(std430, binding = 0) readonly buffer Scores { float scores[]; };
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

  masked[index] = masked_score(scores[index], p.attn_mask_rank, p.has_key_padding_mask != 0u, p.causal != 0u, index,
                               b, i, j, p.cols);
}
