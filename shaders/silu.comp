#version 450
#extension GL_GOOGLE_include_directive : require
// silu — Llama's feed-forward activation (act_fn, torch's silu): y = x · sigmoid(x) = x / (1 + e^(-x))
//   x (n), y (n)
// exp's overflow to +inf far in the negative tail gives -0, as torch does.

float activation(float x) { return x / (1.0 + exp(-x)); }

#include "unary.glsl"
