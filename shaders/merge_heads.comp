#version 450
#extension GL_GOOGLE_include_directive : require
// merge_heads — concatenate the heads back into one feature axis (inverse of split_heads)
//   x (B, H, T, d)
//   y (B, T, E)     E = H·d
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
  uint h = (index / p.head_dim) % p.heads;
  uint t = (index / (p.head_dim * p.heads)) % p.tokens;
  uint b = index / (p.head_dim * p.heads * p.tokens);
  y[index] = x[((b * p.heads + h) * p.tokens + t) * p.head_dim + c];
}
