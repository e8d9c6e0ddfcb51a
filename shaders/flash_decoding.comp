#version 450
#extension GL_GOOGLE_include_directive : require
// flash_decoding — flash_attention for a few new query rows against a long key/value cache.
// With L = 1, flash_attention has B·H rows of work: a handful of invocations walking thousands of
// keys while the device idles. Here the keys are split into P parts and an invocation owns one
// (query row, part): each runs the online softmax over its range alone and leaves its own max m,
// sum l and unnormalised output; attention_combine merges the parts. fp32 throughout; caches kept
// 16-bit (KV_FORMAT) are widened as they are read (sixteen_bit.glsl): half the bytes a key.
//   Q        (B, H, L, d)         the L newest positions, S - L … S - 1
//   K, V     (B, H_kv, C, d)      caches of capacity C, of which the first S rows are used; query
//                                 head h reads key/value head h / group
//   key_padding_mask (B, S)       additive, when has_key_padding_mask
//   partials (B, H, L, P, d + 2)  [output (d), m, l] per part
// Part p holds keys p·K … p·K + K - 1 (K = ceil(S / P)); causal: query i sees keys j <= S - L + i,
// and with a window W > 0 only keys j > S - L + i - W.
//   out      (B, H, L, d)         COMBINE only: the parts merged (attention_combine's output)
// COMBINE (constant 3; Backend::flash_decoding_combine): attention_combine folded in. The host
// makes the workgroup a multiple of P invocations, so that a workgroup holds every part of its
// rows; once all have written their partials, the invocation of part p of row r writes elements
// p, p + P, … of r's output (combine_parts.glsl): one dispatch instead of two.
// Two builds:
//   flash_decoding: an invocation a (row, part), walking its keys alone: the fewest invocations,
//     for a CPU device, whose lanes are few.
//   flash_decoding_subgroup (SUBGROUPS): GROUP neighbouring lanes of a subgroup share a (row,
//     part), lane t holding the row's vec4s t, t + GROUP, …: a key's row is read by GROUP lanes
//     side by side (one coalesced read on a GPU, not GROUP reads a key apart), its score summed
//     across them by shuffles, and BLOCK keys are read before any is used, so that each lane has
//     2·BLOCK reads in flight. GROUP times the invocations for the same split. The host runs it
//     with a required subgroup size of at least GROUP, with full subgroups (engine/vulkan/lanes.h),
//     so that a group's lanes are always all there; invocation ids come from the subgroup's.
#include "common.glsl"
#include "sixteen_bit.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;  // d
layout(constant_id = 2) const uint KV_FORMAT = 0u; // K and V: 0 float32, 1 float16, 2 bfloat16
layout(constant_id = 3) const bool COMBINE = false; // merge the workgroup's rows' parts into out
const uint CHUNKS = (HEAD_DIM + 3u) / 4u;          // rows as vec4s
const bool VEC4 = HEAD_DIM % 4u == 0u;             // every row starts on a vec4
#ifdef SUBGROUPS
#extension GL_KHR_shader_subgroup_shuffle : require
layout(constant_id = 4) const uint GROUP = 8u;  // lanes a (row, part): a power of two, ≤ CHUNKS
const uint PER_LANE = (CHUNKS + GROUP - 1u) / GROUP;  // vec4s of a row each lane holds
const uint BLOCK = 4u;                                // keys read before any is used
#endif

layout(std430, binding = 0) readonly buffer Query { float q[]; };
layout(std430, binding = 0) readonly buffer Query4 { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer KeyPaddingMask { float key_padding_mask[]; };
layout(std430, binding = 2) readonly buffer Key { float k[]; };
layout(std430, binding = 2) readonly buffer Key4 { vec4 k4[]; };
layout(std430, binding = 3) readonly buffer Value { float v[]; };
layout(std430, binding = 3) readonly buffer Value4 { vec4 v4[]; };
layout(std430, binding = 2) readonly buffer Key16 { uint k16[]; };  // KV_FORMAT != 0: 2 a word
layout(std430, binding = 2) readonly buffer Key16x4 { uvec2 k16x4[]; };
layout(std430, binding = 3) readonly buffer Value16 { uint v16[]; };
layout(std430, binding = 3) readonly buffer Value16x4 { uvec2 v16x4[]; };
// coherent: with COMBINE, the workgroup reads back what its invocations wrote, after a barrier
layout(std430, binding = 4) coherent buffer Partials { float partials[]; };
layout(std430, binding = 5) writeonly buffer Output { float out_rows[]; };  // COMBINE
#include "combine_parts.glsl"

layout(push_constant) uniform Params {
  uint batch;     // B
  uint heads;     // H
  uint rows;      // L
  uint capacity;  // C
  uint keys;      // S: the cache rows attended to
  uint parts;     // P
  float scale;    // 1/√d
  uint has_key_padding_mask;  // 0 or 1
  uint causal;                // 0 or 1
  uint window;                // 0, or the causal window W
  uint group;                 // query heads per key/value head: H / H_kv
} p;

// row `row` of Q (when `query`) or of the cache K, floats 4c … 4c+3, zeros past d
vec4 q_chunk(uint row, uint c) {
  if (VEC4) return q4[row * CHUNKS + c];
  vec4 x = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (4u * c + t < HEAD_DIM) x[t] = q[row * HEAD_DIM + 4u * c + t];
  }
  return x;
}

vec4 k_chunk(uint row, uint c) {
  if (KV_FORMAT != 0u && VEC4) {
    uvec2 words = k16x4[row * CHUNKS + c];
    return vec4(widen_pair(words.x, KV_FORMAT), widen_pair(words.y, KV_FORMAT));
  }
  if (VEC4) return k4[row * CHUNKS + c];
  vec4 x = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    uint e = row * HEAD_DIM + 4u * c + t;
    if (4u * c + t < HEAD_DIM) x[t] = KV_FORMAT == 0u ? k[e] : widen(k16[e / 2u], e % 2u, KV_FORMAT);
  }
  return x;
}

vec4 v_chunk(uint row, uint c) {
  if (KV_FORMAT != 0u && VEC4) {
    uvec2 words = v16x4[row * CHUNKS + c];
    return vec4(widen_pair(words.x, KV_FORMAT), widen_pair(words.y, KV_FORMAT));
  }
  if (VEC4) return v4[row * CHUNKS + c];
  vec4 x = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    uint e = row * HEAD_DIM + 4u * c + t;
    if (4u * c + t < HEAD_DIM) x[t] = KV_FORMAT == 0u ? v[e] : widen(v16[e / 2u], e % 2u, KV_FORMAT);
  }
  return x;
}

// The keys [begin, end) that part `part` of query row i walks
struct Range {
  uint begin, end;
};
Range part_range(uint part, uint i) {
  uint per_part = (p.keys + p.parts - 1u) / p.parts;
  Range r = Range(part * per_part, min(p.keys, part * per_part + per_part));
  uint position = p.keys - p.rows + i;  // query i's
  if (p.causal != 0u) r.end = min(r.end, position + 1u);
  if (p.causal != 0u && p.window != 0u && position + 1u > p.window) r.begin = max(r.begin, position + 1u - p.window);
  return r;
}

// Invocation `index` = ((bh · L) + i) · P + part: the online softmax over its part's keys, its
// output, max and sum written to partials
void decode_part(uint index) {
  uint part = index % p.parts;
  uint i = (index / p.parts) % p.rows;
  uint bh = index / (p.parts * p.rows);
  uint b = bh / p.heads;
  uint kv = bh / p.group;  // the key/value head, (B·H_kv) flat
  Range range = part_range(part, i);
  uint begin = range.begin, end = range.end;

  vec4 q_row[CHUNKS], acc[CHUNKS];
  for (uint c = 0u; c < CHUNKS; ++c) {
    q_row[c] = q_chunk(bh * p.rows + i, c);
    acc[c] = vec4(0.0);
  }
  float m = -1e30, l = 0.0;  // running max, running sum of exp(s - m)
  for (uint j = begin; j < end; ++j) {
    uint key = kv * p.capacity + j;
    float s = 0.0;
    for (uint c = 0u; c < CHUNKS; ++c) s += dot(q_row[c], k_chunk(key, c));
    s *= p.scale;
    if (p.has_key_padding_mask != 0u) s += key_padding_mask[b * p.keys + j];
    if (s == NEG_INF) continue;  // blocked: weight 0
    float m_new = max(m, s);
    float rescale = exp(m - m_new), w = exp(s - m_new);
    l = l * rescale + w;
    for (uint c = 0u; c < CHUNKS; ++c) acc[c] = acc[c] * rescale + w * v_chunk(key, c);
    m = m_new;
  }
  uint first = index * (HEAD_DIM + 2u);  // this part's d + 2 values
  for (uint c = 0u; c < CHUNKS; ++c) {
    for (uint t = 0u; t < 4u; ++t) {
      if (4u * c + t < HEAD_DIM) partials[first + 4u * c + t] = acc[c][t];
    }
  }
  partials[first + HEAD_DIM] = m;
  partials[first + HEAD_DIM + 1u] = l;
}

#ifdef SUBGROUPS
// x summed over the GROUP lanes of this invocation's group (neighbours in its subgroup)
float group_sum(float x) {
  for (uint offset = 1u; offset < GROUP; offset *= 2u) x += subgroupShuffleXor(x, offset);
  return x;
}

// Unit `unit` = ((bh · L) + i) · P + part, walked by the GROUP lanes of one group, this one lane
// `lane`: the online softmax over the part's keys BLOCK at a time, as decode_part's, each lane
// keeping its own vec4s of the output
void decode_part_lanes(uint unit, uint lane) {
  uint part = unit % p.parts;
  uint i = (unit / p.parts) % p.rows;
  uint bh = unit / (p.parts * p.rows);
  uint b = bh / p.heads;
  uint kv = bh / p.group;
  Range range = part_range(part, i);
  vec4 q_row[PER_LANE], acc[PER_LANE];
  for (uint u = 0u; u < PER_LANE; ++u) {
    uint c = lane + u * GROUP;
    q_row[u] = c < CHUNKS ? q_chunk(bh * p.rows + i, c) : vec4(0.0);
    acc[u] = vec4(0.0);
  }
  float m = -1e30, l = 0.0;  // running max, running sum of exp(s - m): the same in every lane
  for (uint j0 = range.begin; j0 < range.end; j0 += BLOCK) {
    vec4 vs[BLOCK][PER_LANE];
    float s[BLOCK];
    for (uint t = 0u; t < BLOCK; ++t) {  // every read of the block first
      uint j = j0 + t, key = kv * p.capacity + j;
      s[t] = 0.0;
      for (uint u = 0u; u < PER_LANE; ++u) {
        uint c = lane + u * GROUP;
        bool read = j < range.end && c < CHUNKS;
        if (read) s[t] += dot(q_row[u], k_chunk(key, c));
        vs[t][u] = read ? v_chunk(key, c) : vec4(0.0);
      }
    }
    float m_new = m;
    for (uint t = 0u; t < BLOCK; ++t) {  // the group's sums: every lane of it runs each shuffle
      uint j = j0 + t;
      s[t] = group_sum(s[t]) * p.scale;
      if (j < range.end && p.has_key_padding_mask != 0u) s[t] += key_padding_mask[b * p.keys + j];
      if (j >= range.end) s[t] = NEG_INF;  // past the part: weight 0, as a blocked key's
      m_new = max(m_new, s[t]);
    }
    float rescale = exp(m - m_new);
    l *= rescale;
    for (uint u = 0u; u < PER_LANE; ++u) acc[u] *= rescale;
    for (uint t = 0u; t < BLOCK; ++t) {
      if (s[t] == NEG_INF) continue;  // blocked: weight 0
      float w = exp(s[t] - m_new);
      l += w;
      for (uint u = 0u; u < PER_LANE; ++u) acc[u] += w * vs[t][u];
    }
    m = m_new;
  }
  uint first = unit * (HEAD_DIM + 2u);
  for (uint u = 0u; u < PER_LANE; ++u) {
    uint c = lane + u * GROUP;
    for (uint t = 0u; t < 4u; ++t) {
      if (c < CHUNKS && 4u * c + t < HEAD_DIM) partials[first + 4u * c + t] = acc[u][t];
    }
  }
  if (lane == 0u) {
    partials[first + HEAD_DIM] = m;
    partials[first + HEAD_DIM + 1u] = l;
  }
}
#endif

void main() {
  uint rows = p.batch * p.heads * p.rows;
#ifdef SUBGROUPS
  // the workgroup holds `units` (row, part) units of GROUP lanes, with COMBINE whole rows' parts
  // (the host makes it hold at least one row's); lanes past them idle
  uint local = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
  uint slots = gl_WorkGroupSize.x / GROUP;
  uint units = COMBINE ? slots / p.parts * p.parts : slots;
  uint unit = flat_workgroup_id() * units + local / GROUP;
  bool mine = local / GROUP < units && unit < rows * p.parts;
  if (mine) decode_part_lanes(unit, local % GROUP);
  uint width = p.parts * GROUP;  // a row's invocations: they merge its parts
  uint r = unit / p.parts, first_element = local % width;
#else
  uint index = flat_invocation_id();
  bool mine = index < rows * p.parts;
  if (mine) decode_part(index);
  uint width = p.parts;
  uint r = index / p.parts, first_element = index % p.parts;
#endif
  if (!COMBINE) return;
  // every invocation reaches the barrier (none returned above); then each part's writes are
  // visible to the workgroup, which holds every part of its rows. The workgroup's scope, not the
  // device's (memoryBarrierBuffer), which a device with the Vulkan memory model but not its
  // device scope refuses (VUID-RuntimeSpirv-vulkanMemoryModel-06265: NVIDIA's, where
  // cooperative matrices enable the model).
  groupMemoryBarrier();
  barrier();
  if (!mine) return;
  for (uint c = first_element; c < HEAD_DIM; c += width) {
    out_rows[r * HEAD_DIM + c] = combined_part(r, p.parts, HEAD_DIM, c);
  }
}
