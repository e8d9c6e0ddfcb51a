// The inner product shared by linear, attention_scores and attention_values: each is a batched
// matrix product C[n, i, j] = Σ_k A[n, i, k] · B[n, j, k] read through strides, so one loop
// serves x·Wᵀ, Q·Kᵀ and P·V (where V is read down its columns). Each invocation owns one
// output element; the tiled version is the performance issue's.
//
// Bindings: 0 = A, 1 = B (read-only); the including shader declares its own output bindings.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, binding = 1) readonly buffer InputB { float b[]; };

// Σ_k a[a_start + k·a_step] · b[b_start + k·b_step] for k in [0, inner), in fp32.
float strided_dot(uint a_start, uint a_step, uint b_start, uint b_step, uint inner) {
  float acc = 0.0;
  for (uint k = 0; k < inner; ++k) {
    acc += a[a_start + k * a_step] * b[b_start + k * b_step];
  }
  return acc;
}
