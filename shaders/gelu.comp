#version 450
#extension GL_GOOGLE_include_directive : require
// gelu — the feed-forward activation: y = x · Φ(x) = x/2 · (1 + erf(x/√2)), torch's exact GELU
// (approximate='none'), not the tanh approximation.
//   x (n), y (n)
// GLSL has no erf: Φ(x) = ½ · erfc(-x/√2), with erfc by the Chebyshev fit of Numerical Recipes
// (erfcc: relative error < 1.2e-7 everywhere), accurate in the far negative tail where
// 1 + erf(x) would cancel.

float erfc_approx(float z) {
  float a = abs(z);
  float t = 1.0 / (1.0 + 0.5 * a);
  float r = t * exp(-a * a - 1.26551223 +
                    t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
                    t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
                    t * 0.17087277)))))))));
  return z >= 0.0 ? r : 2.0 - r;
}

float activation(float x) { return x * 0.5 * erfc_approx(-x * 0.70710678118654752); }

#include "unary.glsl"
