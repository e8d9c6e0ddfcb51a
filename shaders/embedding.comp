#version 450
#extension GL_GOOGLE_include_directive : require
// embedding — token ids to vectors: y[n, :] = table[ids[n], :]
//   ids (N)        N = B·T token ids, integers stored as floats (exact below 2^24)
//   table (V, E)   torch's nn.Embedding.weight
//   y (N, E)
// An id outside [0, V), or not an integer, gives NaN: never a read out of bounds (the modules
// check ids on the host before uploading them).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Ids { float ids[]; };
layout(std430, binding = 1) readonly buffer Table { float table[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint tokens;  // N
  uint vocab;   // V
  uint dim;     // E
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.tokens * p.dim) return;
  uint n = index / p.dim;
  uint e = index % p.dim;
  float id = ids[n];
  bool valid = id >= 0.0 && id < float(p.vocab) && id == floor(id);
  y[index] = valid ? table[uint(id) * p.dim + e] : uintBitsToFloat(0x7fc00000u);  // NaN
}
