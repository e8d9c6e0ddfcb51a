#version 450
#extension GL_GOOGLE_include_directive : require
// first_token — each sequence's first position (BERT's pooler takes its [CLS]: x[:, 0]):
//   x (B, T, E), y (B, E),  y[b, e] = x[b, 0, e]
// One invocation per output.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint batch;   // B
  uint tokens;  // T
  uint dim;     // E
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.batch * p.dim) return;
  uint b = index / p.dim;
  uint e = index % p.dim;
  y[index] = x[b * p.tokens * p.dim + e];
}
