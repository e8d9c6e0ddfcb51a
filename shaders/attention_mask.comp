#version 450
#extension GL_GOOGLE_include_directive : require
// attention_mask — block or bias scores before the softmax
//   scores           (B, H, L, S)
//   attn_mask        (L, S) or (B·H, L, S), additive: a bool mask arrives as 0 / -inf
//   key_padding_mask (B, S), additive likewise
//   out              (B, H, L, S) = scores + attn_mask + key_padding_mask, and -inf where
//                    causal and j > i (top-left aligned, as torch's is_causal), and with a
//                    window W > 0 where j <= i - W (each query sees the last W keys)
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
  uint window;                // 0, or the causal window W
} p;

// A workgroup masks RUN · (workgroup size) consecutive scores of one row, lane l the columns
// l, l + size, l + 2·size, …: neighbouring lanes touch neighbouring floats (coalesced on a GPU),
// and the integer divisions that find the row are made once per RUN scores (no vector
// instruction divides integers on a CPU device: one per score cost lavapipe more than the copy).
layout(constant_id = 1) const uint RUN = 8u;

void main() {
  uint span = RUN * gl_WorkGroupSize.x;  // columns per workgroup
  uint chunks = (p.cols + span - 1u) / span;
  uint group = flat_workgroup_id();
  uint row = group / chunks;  // (b·H + h)·L + i
  if (row >= p.batch * p.heads * p.rows) return;
  uint i = row % p.rows;
  uint b = row / (p.rows * p.heads);
  uint first = (group % chunks) * span + gl_LocalInvocationID.x;
  for (uint k = 0u; k < RUN; ++k) {
    uint j = first + k * gl_WorkGroupSize.x;
    if (j >= p.cols) break;
    uint index = row * p.cols + j;
    masked[index] = masked_score(scores[index], p.attn_mask_rank, p.has_key_padding_mask != 0u, p.causal != 0u,
                                 p.window, index, b, i, j, p.cols);
  }
}
