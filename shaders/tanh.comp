#version 450
#extension GL_GOOGLE_include_directive : require
// tanh — BERT's pooler activation (torch's tanh): y = tanh(x)
//   x (n), y (n)
// As (1 - e^(-2|x|)) / (1 + e^(-2|x|)) with x's sign: e^(-2|x|) never overflows, where GLSL's own
// tanh may compute (e^2x - 1) / (e^2x + 1) and give inf / inf = NaN for large x.

float activation(float x) {
  float t = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - t) / (1.0 + t);
}

#include "unary.glsl"
