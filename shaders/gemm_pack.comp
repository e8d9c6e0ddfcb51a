#version 450
#extension GL_GOOGLE_include_directive : require
// gemm_pack — B of an x·Wᵀ or Q·Kᵀ product, stored (batch_b, N, K), rewritten in the order the
// broadcast GEMM's lanes read it (shaders/gemm.glsl, PACKED_B): per column block of block_cols
// columns (the subgroup's), per four k, the block's columns one after another:
//   packed[((nb · col_blocks + cb) · K/4 + k/4) · block_cols + c] = B[nb, cb · block_cols + c, k..k+3]
// as vec4s, zeros for the columns past N. A subgroup's B fetches for four k are then block_cols
// neighbouring vec4s, where in B they lie on block_cols rows K floats apart.
//   B (batch_b, N, K), K a multiple of 4;  packed (batch_b · col_blocks · K/4 · block_cols) vec4
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { vec4 b4[]; };
layout(std430, binding = 1) writeonly buffer Output { vec4 packed[]; };

layout(push_constant) uniform Params {
  uint count;       // vec4s of packed
  uint cols;        // N
  uint inner4;      // K / 4
  uint block_cols;  // columns a subgroup owns: lanes · tile_n
} p;

void main() {
  uint e = flat_invocation_id();
  if (e >= p.count) return;
  uint c = e % p.block_cols;
  uint k4 = e / p.block_cols % p.inner4;
  uint blocks = e / (p.block_cols * p.inner4);  // nb · col_blocks + cb
  uint col_blocks = (p.cols + p.block_cols - 1u) / p.block_cols;
  uint nb = blocks / col_blocks, j = blocks % col_blocks * p.block_cols + c;
  packed[e] = j < p.cols ? b4[(nb * p.cols + j) * p.inner4 + k4] : vec4(0.0);
}
