#version 450
#extension GL_GOOGLE_include_directive : require
// residual_add — the skip connections of the encoder block: y = x + residual
//   x (n), residual (n), y (n)    any shape, both inputs the same
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Residual { float residual[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;  // n
} p;

void main() {
  uint i = flat_invocation_id();
  if (i >= p.count) return;
  y[i] = x[i] + residual[i];
}
