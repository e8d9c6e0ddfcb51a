#version 450
#extension GL_GOOGLE_include_directive : require
// gelu_tanh — GELU's tanh approximation, torch's gelu(approximate='tanh') and GPT-2's gelu_new:
// y = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))
//   x (n), y (n)
// Computed as x / (1 + e^(-2u)), equal to it: no 1 + tanh to cancel in the negative tail, and
// exp's overflow to +inf there gives -0 as torch does (GLSL's tanh may give NaN for large |u|).

float activation(float x) {
  float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp(-2.0 * u));
}

#include "unary.glsl"
