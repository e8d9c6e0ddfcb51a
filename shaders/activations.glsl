// The element-wise activations, one function each: their own steps' (gelu.comp, relu.comp, …,
// each `activation` around unary.glsl) and linear's store's, where the step after a projection is
// folded into it (gemm.glsl's and gemv.glsl's ACTIVATION: activate(which, x), `which` numbered as
// ActivationStep in include/vkattn/backends/backend_hooks.h). Both compute the same function, so a
// folded activation gives its step's numbers.

// max(x, 0): torch's relu, TransformerEncoderLayer's default activation
float relu(float x) { return max(x, 0.0); }

// x · Φ(x) = x/2 · (1 + erf(x/√2)): torch's exact GELU (approximate='none'), not the tanh
// approximation. GLSL has no erf: Φ(x) = ½ · erfc(-x/√2), with erfc by the Chebyshev fit of
// Numerical Recipes (erfcc: relative error < 1.2e-7 everywhere), accurate in the far negative tail
// where 1 + erf(x) would cancel.
float erfc_approx(float z) {
  float a = abs(z);
  float t = 1.0 / (1.0 + 0.5 * a);
  float r = t * exp(-a * a - 1.26551223 +
                    t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
                    t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
                    t * 0.17087277)))))))));
  return z >= 0.0 ? r : 2.0 - r;
}
float gelu(float x) { return x * 0.5 * erfc_approx(-x * 0.70710678118654752); }

// x/2 · (1 + tanh(√(2/π) · (x + 0.044715 · x³))): torch's gelu(approximate='tanh'), GPT-2's
// gelu_new. Computed as x / (1 + e^(-2u)), equal to it: no 1 + tanh to cancel in the negative
// tail, and exp's overflow to +inf there gives -0 as torch does (GLSL's tanh may give NaN for
// large |u|).
float gelu_tanh(float x) {
  float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp(-2.0 * u));
}

// x · sigmoid(x) = x / (1 + e^(-x)): torch's silu, Llama's act_fn. exp's overflow to +inf far in
// the negative tail gives -0, as torch does.
float silu(float x) { return x / (1.0 + exp(-x)); }

// tanh(x), BERT's pooler activation, as (1 - e^(-2|x|)) / (1 + e^(-2|x|)) with x's sign:
// e^(-2|x|) never overflows, where GLSL's own tanh may compute (e^2x - 1) / (e^2x + 1) and give
// inf / inf = NaN for large x.
float tanh_step(float x) {
  float t = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - t) / (1.0 + t);
}

// ActivationStep's numbers: 0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu, 5 tanh
float activate(uint which, float x) {
  switch (which) {
    case 1u: return relu(x);
    case 2u: return gelu(x);
    case 3u: return gelu_tanh(x);
    case 4u: return silu(x);
    case 5u: return tanh_step(x);
  }
  return x;
}
