// The body of an element-wise step (gelu, relu): y[i] = activation(x[i]) over any shape.
// The including shader defines `float activation(float x)` first, then includes this file.
//   x (n), y (n)
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;  // n
} p;

void main() {
  uint i = flat_invocation_id();
  if (i >= p.count) return;
  y[i] = activation(x[i]);
}
