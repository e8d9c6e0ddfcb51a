#version 450
#extension GL_GOOGLE_include_directive : require
// texture buffers read without a sampler (as gemm.glsl's texel builds)
#extension GL_EXT_samplerless_texture_functions : require
// gemm_pack — B of an x·Wᵀ or Q·Kᵀ product, stored (batch_b, N, K), rewritten in the order the
// broadcast GEMM's lanes read it (shaders/gemm.glsl, PACKED_B): per column block of block_cols
// columns (a subgroup's), per four k, the block's columns one after another:
//   packed[((nb · col_blocks + cb) · K/4 + k/4) · block_cols + c] = B[nb, cb · block_cols + c, k..k+3]
// as vec4s, zeros for the columns past N. A subgroup's B fetches for four k are then block_cols
// neighbouring vec4s, where in B they lie on block_cols rows K floats apart.
//   B (batch_b, N, K) as RGBA32F texels, K a multiple of 4;  packed (batch_b · col_blocks · K/4 ·
//   block_cols) vec4
// A workgroup of block_cols invocations (specialization constant 0) writes one block's four k:
// what differs between its invocations is c alone, so that the divisions are the workgroup's.
#include "common.glsl"

layout(binding = 0) uniform textureBuffer b_texels;
layout(std430, binding = 1) writeonly buffer Output { vec4 packed[]; };

layout(push_constant) uniform Params {
  uint count;   // vec4s of packed
  uint cols;    // N
  uint inner4;  // K / 4
} p;

void main() {
  uint e = flat_invocation_id();
  if (e >= p.count) return;
  uint block_cols = gl_WorkGroupSize.x, c = gl_LocalInvocationID.x;
  uint unit = flat_workgroup_id();  // (nb · col_blocks + cb) · K/4 + k/4
  uint k4 = unit % p.inner4, blocks = unit / p.inner4;
  uint col_blocks = (p.cols + block_cols - 1u) / block_cols;
  uint nb = blocks / col_blocks, j = blocks % col_blocks * block_cols + c;
  packed[e] = j < p.cols ? texelFetch(b_texels, int((nb * p.cols + j) * p.inner4 + k4)) : vec4(0.0);
}
