// A and B of a matrix product as storage buffers, at bindings 0 and 1 (gemm.glsl without
// TEXEL_INPUTS, gemv.glsl), read through a_at, a4_at, b_at and b4_at (element or vec4 number
// `at`). B is float32, or kept 16-bit, two elements a word, where the including shader's
// specialization constant B_FORMAT says so (sixteen_bit.glsl, included before this).
layout(std430, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, binding = 0) readonly buffer InputA4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer InputB { float b[]; };
layout(std430, binding = 1) readonly buffer InputB4 { vec4 b4[]; };
// B_FORMAT != 0: B kept 16-bit, two elements a word (sixteen_bit.glsl)
layout(std430, binding = 1) readonly buffer InputB16 { uint b16[]; };
layout(std430, binding = 1) readonly buffer InputB16x4 { uvec2 b16x4[]; };
vec4 a4_at(uint at) { return a4[at]; }  // A's vec4 number `at`
vec4 b4_at(uint at) {
  if (B_FORMAT == 0u) return b4[at];
  uvec2 words = b16x4[at];
  return vec4(widen_pair(words.x, B_FORMAT), widen_pair(words.y, B_FORMAT));
}
float a_at(uint at) { return a[at]; }  // A's float number `at`
float b_at(uint at) { return B_FORMAT == 0u ? b[at] : widen(b16[at / 2u], at % 2u, B_FORMAT); }
