#version 450
#extension GL_GOOGLE_include_directive : require
// tanh — BERT's pooler activation (torch's tanh): y = tanh(x) (activations.glsl)
//   x (n), y (n)
#include "activations.glsl"

float activation(float x) { return tanh_step(x); }

#include "unary.glsl"
