#version 450
#extension GL_GOOGLE_include_directive : require
// positional_encoding — a learnt position table added to every sequence of the batch:
//   x (B, T, E), table (P, E) with P >= T, y (B, T, E)
//   y[b, t, e] = x[b, t, e] + table[t, e]   (rows t < T of the table are its first T·E floats)
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Table { float table[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;   // B·T·E
  uint period;  // T·E: one sequence
} p;

void main() {
  uint i = flat_invocation_id();
  if (i >= p.count) return;
  y[i] = x[i] + table[i % p.period];
}
