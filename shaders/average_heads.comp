#version 450
#extension GL_GOOGLE_include_directive : require
// average_heads — attention weights averaged over heads (PyTorch's average_attn_weights=True)
//   p   (B, H, L, S)
//   avg (B, L, S)
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float weights[]; };
layout(std430, binding = 1) writeonly buffer Output { float averaged[]; };

layout(push_constant) uniform Params {
  uint batch;  // B
  uint heads;  // H
  uint plane;  // L·S
} p;

void main() {
  uint index = flat_invocation_id();  // flat index into averaged: b·L·S + (i·S + j)
  if (index >= p.batch * p.plane) return;
  uint b = index / p.plane;
  uint ij = index % p.plane;
  float sum = 0.0;
  for (uint h = 0; h < p.heads; ++h) sum += weights[(b * p.heads + h) * p.plane + ij];
  averaged[index] = sum / float(p.heads);
}
