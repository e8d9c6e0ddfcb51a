#version 450
#extension GL_GOOGLE_include_directive : require
// gelu_tanh — GELU's tanh approximation, torch's gelu(approximate='tanh') and GPT-2's gelu_new
// (activations.glsl)
//   x (n), y (n)
#include "activations.glsl"

float activation(float x) { return gelu_tanh(x); }

#include "unary.glsl"
