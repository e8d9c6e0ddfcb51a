#version 450
#extension GL_GOOGLE_include_directive : require
// multiply — SwiGLU's product of the activated gate and the up projection: y = x · other
//   x (n), other (n), y (n)    any shape, both inputs the same
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Other { float other[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;  // n
} p;

void main() {
  uint i = flat_invocation_id();
  if (i >= p.count) return;
  y[i] = x[i] * other[i];
}
