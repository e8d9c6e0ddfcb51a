#version 450
#extension GL_GOOGLE_include_directive : require
// flash_attention — attention_scores, attention_mask, softmax and attention_values in one step,
// never holding the (L, S) scores. One invocation per query row keeps an online softmax: the
// running max m (from -1e30, a large finite negative), the running sum l of exp(s - m), and the
// running output acc = Σ exp(s - m)·v, both rescaled by exp(m_old - m_new) when the max grows.
// Blocked keys (-inf) are skipped; a row with none left keeps l = 0 and gives zeros. fp32.
//   Q   (B, H, L, d)      K, V (B, H, S, d)      masks as attention_mask's (mask.glsl)
//   out (B, H, L, d)      scale = 1/√d
// Correctness first: each invocation reads its K and V rows itself; the tiled version is the
// performance issue's.
#include "common.glsl"
#include "mask.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;  // d: the length of the accumulator

layout(std430, binding = 0) readonly buffer Query { float q[]; };
layout(std430, binding = 3) readonly buffer Key { float k[]; };
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

void main() {
  uint row = flat_invocation_id();  // (b·H + h)·L + i
  if (row >= p.batch * p.heads * p.rows) return;
  uint i = row % p.rows;
  uint bh = row / p.rows;
  uint b = bh / p.heads;

  float acc[HEAD_DIM];
  for (uint c = 0u; c < HEAD_DIM; ++c) acc[c] = 0.0;
  float m = -1e30, l = 0.0;
  for (uint j = 0u; j < p.cols; ++j) {
    uint k_row = (bh * p.cols + j) * HEAD_DIM;
    float dot = 0.0;
    for (uint c = 0u; c < HEAD_DIM; ++c) dot += q[row * HEAD_DIM + c] * k[k_row + c];
    float s = masked_score(dot * p.scale, p.attn_mask_rank, p.has_key_padding_mask != 0u, p.causal != 0u,
                           row * p.cols + j, b, i, j, p.cols);
    if (s == NEG_INF) continue;  // blocked: weight 0
    float m_new = max(m, s);
    float rescale = exp(m - m_new), weight = exp(s - m_new);
    l = l * rescale + weight;
    for (uint c = 0u; c < HEAD_DIM; ++c) acc[c] = acc[c] * rescale + weight * v[k_row + c];
    m = m_new;
  }
  for (uint c = 0u; c < HEAD_DIM; ++c) out_rows[row * HEAD_DIM + c] = l > 0.0 ? acc[c] / l : 0.0;
}
