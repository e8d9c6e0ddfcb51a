#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// flash_attention — attention_scores, attention_mask, softmax and attention_values in one step,
// never holding the (L, S) scores: an online softmax per query row keeps the running max m (from
// -1e30, a large finite negative), the running sum l of exp(s - m) and the running output
// acc = Σ exp(s - m)·v, rescaling both by exp(m_old - m_new) when the max grows. A row with every
// key blocked keeps l = 0 and gives zeros. fp32 throughout.
//   Q   (B, H, L, d)      K, V (B, H, S, d)      masks as attention_mask's (mask.glsl)
//   out (B, H, L, d)      scale = 1/√d
//
// Tiling: a subgroup owns one query row and walks the keys LANES at a time (LANES = the subgroup
// size). Lane t scores key j0 + t (a whole dot product, q's entries shuffled from the lanes that
// hold them), the block's max and sum come from subgroup arithmetic, and each lane accumulates
// its own d/LANES dims of the output (dims t, t + LANES, …) from every key of the block, the
// block's weights shuffled lane to lane. Per lane that is d/LANES floats of q and of acc, not d:
// registers stay few whatever the head dim. Causal rows stop at their diagonal.
#include "common.glsl"
#include "mask.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;  // d
layout(constant_id = 2) const uint LANES = 8;      // the subgroup size
const uint PER_LANE = (HEAD_DIM + LANES - 1u) / LANES;

layout(std430, binding = 0) readonly buffer Query { float q[]; };
layout(std430, binding = 3) readonly buffer Key { float k[]; };
layout(std430, binding = 3) readonly buffer Key4 { vec4 k4[]; };
layout(std430, binding = 4) readonly buffer Value { float v[]; };
layout(std430, binding = 5) writeonly buffer Output { float out_rows[]; };

layout(push_constant) uniform Params {
  uint batch;   // B
  uint heads;   // H
  uint rows;    // L
  uint cols;    // S
  float scale;  // 1/√d
  uint attn_mask_rank;        // 0 = none, 2 = (L, S), 3 = (B·H, L, S)
  uint has_key_padding_mask;  // 0 or 1
  uint causal;                // 0 or 1
} p;

float q_own[PER_LANE];  // q[row, lane + LANES·t]

// q[row, c]: held by lane c % LANES
float q_at(uint c) { return subgroupShuffle(q_own[c / LANES], c % LANES); }

// Q[row] · K[key]
float score(uint key_row) {
  float sum = 0.0;
  if (HEAD_DIM % 4u == 0u) {  // every K row starts on a vec4
    for (uint c = 0u; c < HEAD_DIM; c += 4u) {
      sum += dot(vec4(q_at(c), q_at(c + 1u), q_at(c + 2u), q_at(c + 3u)), k4[(key_row * HEAD_DIM + c) / 4u]);
    }
  } else {
    for (uint c = 0u; c < HEAD_DIM; ++c) sum += q_at(c) * k[key_row * HEAD_DIM + c];
  }
  return sum;
}

void main() {
  uint row = flat_workgroup_id() * gl_NumSubgroups + gl_SubgroupID;  // (b·H + h)·L + i
  if (row >= p.batch * p.heads * p.rows) return;  // uniform per subgroup
  uint lane = gl_SubgroupInvocationID;
  uint i = row % p.rows;
  uint bh = row / p.rows;
  uint b = bh / p.heads;

  float acc[PER_LANE];
  for (uint t = 0u; t < PER_LANE; ++t) {
    uint c = lane + LANES * t;
    q_own[t] = c < HEAD_DIM ? q[row * HEAD_DIM + c] : 0.0;
    acc[t] = 0.0;
  }
  float m = -1e30, l = 0.0;
  uint key_end = p.causal != 0u ? min(p.cols, i + 1u) : p.cols;  // causal: keys past i are blocked
  for (uint j0 = 0u; j0 < key_end; j0 += LANES) {
    uint j = j0 + lane;
    uint key_row = bh * p.cols + min(j, p.cols - 1u);  // lanes past the end score a real key, then drop it
    float s = masked_score(score(key_row) * p.scale, p.attn_mask_rank, p.has_key_padding_mask != 0u,
                           p.causal != 0u, row * p.cols + min(j, p.cols - 1u), b, i, j, p.cols);
    if (j >= key_end) s = NEG_INF;
    float block_max = subgroupMax(s);
    if (block_max == NEG_INF) continue;  // uniform: every key of the block is blocked
    float m_new = max(m, block_max);
    float rescale = exp(m - m_new);
    float weight = s == NEG_INF ? 0.0 : exp(s - m_new);
    l = l * rescale + subgroupAdd(weight);
    for (uint t = 0u; t < PER_LANE; ++t) acc[t] *= rescale;
    for (uint u = 0u; u < LANES; ++u) {
      float w = subgroupShuffle(weight, u);  // key j0 + u's weight
      if (w == 0.0) continue;                // uniform: blocked (or past the end) adds nothing
      uint v_row = (bh * p.cols + j0 + u) * HEAD_DIM;
      for (uint t = 0u; t < PER_LANE; ++t) {
        uint c = lane + LANES * t;
        if (c < HEAD_DIM) acc[t] += w * v[v_row + c];
      }
    }
    m = m_new;
  }
  for (uint t = 0u; t < PER_LANE; ++t) {
    uint c = lane + LANES * t;
    if (c < HEAD_DIM) out_rows[row * HEAD_DIM + c] = l > 0.0 ? acc[t] / l : 0.0;
  }
}
