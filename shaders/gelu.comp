#version 450
#extension GL_GOOGLE_include_directive : require
// gelu — the feed-forward activation, torch's exact GELU (activations.glsl)
//   x (n), y (n)
#include "activations.glsl"

float activation(float x) { return gelu(x); }

#include "unary.glsl"
