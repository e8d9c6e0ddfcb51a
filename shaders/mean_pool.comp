#version 450
#extension GL_GOOGLE_include_directive : require
// mean_pool — global average pooling over the positions (x.mean(dim=1)):
//   x (B, T, E), y (B, E),  y[b, e] = Σ_t x[b, t, e] / T
// One invocation per output, summing in t order as the reference does.
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
  float sum = 0.0;
  for (uint t = 0; t < p.tokens; ++t) sum += x[(b * p.tokens + t) * p.dim + e];
  y[index] = sum / float(p.tokens);
}
