#version 450
#extension GL_GOOGLE_include_directive : require
// relu — the feed-forward activation (torch's default for TransformerEncoderLayer): y = max(x, 0)
//   x (n), y (n)
#include "activations.glsl"

float activation(float x) { return relu(x); }

#include "unary.glsl"
