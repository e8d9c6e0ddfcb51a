#version 450
#extension GL_GOOGLE_include_directive : require
// embedding — token ids to vectors: y[n, :] = table[ids[n], :] · scale
//   ids (N)        N = B·T token ids, integers stored as floats (exact below 2^24)
//   table (V, E)   torch's nn.Embedding.weight
//   scale          1, or Gemma's √E (GemmaModel's normalizer): one float32 product, as torch's
//   y (N, E)
// An id outside [0, V), or not an integer, gives NaN: never a read out of bounds (the modules
// check ids on the host before uploading them).
#include "common.glsl"
#include "sixteen_bit.glsl"

// the table stored float32 (0), or kept 16-bit by Backend::upload_matrix: float16 (1), bfloat16 (2)
layout(constant_id = 1) const uint TABLE_FORMAT = 0u;

layout(std430, binding = 0) readonly buffer Ids { float ids[]; };
layout(std430, binding = 1) readonly buffer Table { float table[]; };
layout(std430, binding = 1) readonly buffer Table16 { uint table16[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint tokens;  // N
  uint vocab;   // V
  uint dim;     // E
  float scale;
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.tokens * p.dim) return;
  uint n = index / p.dim;
  uint e = index % p.dim;
  float id = ids[n];
  bool valid = id >= 0.0 && id < float(p.vocab) && id == floor(id);
  float value = uintBitsToFloat(0x7fc00000u);  // NaN
  if (valid) {
    uint at = uint(id) * p.dim + e;
    value = TABLE_FORMAT == 0u ? table[at] : widen(table16[at / 2u], at % 2u, TABLE_FORMAT);
    if (p.scale != 1.0) value *= p.scale;  // not at 1: a device that flushes subnormals keeps a copy's bits
  }
  y[index] = value;
}
