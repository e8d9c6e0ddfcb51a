#version 450
#extension GL_GOOGLE_include_directive : require
// split_heads — give each head its own contiguous (T, d) block
//   x (B, T, E)     E = H·d, head h owns features [h·d, (h+1)·d)
//   y (B, H, T, d)
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint batch;   // B
  uint heads;   // H
  uint tokens;  // T
  uint head_dim;  // d
} p;

void main() {
  uint index = flat_invocation_id();  // flat index into y
  if (index >= p.batch * p.heads * p.tokens * p.head_dim) return;
  uint c = index % p.head_dim;
  uint t = (index / p.head_dim) % p.tokens;
  uint h = (index / (p.head_dim * p.tokens)) % p.heads;
  uint b = index / (p.head_dim * p.tokens * p.heads);
  y[index] = x[(b * p.tokens + t) * p.heads * p.head_dim + h * p.head_dim + c];
}
