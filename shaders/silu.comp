#version 450
#extension GL_GOOGLE_include_directive : require
// silu — Llama's feed-forward activation (act_fn, torch's silu): y = x · sigmoid(x)
// (activations.glsl)
//   x (n), y (n)
#include "activations.glsl"

float activation(float x) { return silu(x); }

#include "unary.glsl"
