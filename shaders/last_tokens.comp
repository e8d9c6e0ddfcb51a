#version 450
#extension GL_GOOGLE_include_directive : require
// last_tokens — each sequence's last n positions (x[:, -n:]; a language model's logits_to_keep:
// generation needs the last position's logits only):
//   x (B, T, E), y (B, n, E),  y[b, t, e] = x[b, T - n + t, e]
// One invocation per output.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint batch;   // B
  uint tokens;  // T
  uint kept;    // n, 1 <= n <= T
  uint dim;     // E
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.batch * p.kept * p.dim) return;
  uint b = index / (p.kept * p.dim);  // index = (b·n + t)·E + e, and x's row is b·T + T - n + t
  y[index] = x[index + (b + 1u) * (p.tokens - p.kept) * p.dim];
}
