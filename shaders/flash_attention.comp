#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUPS
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#ifdef COOPMAT
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#ifdef COOPMAT_KHR
#extension GL_KHR_cooperative_matrix : require
#else
#extension GL_NV_cooperative_matrix : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#ifdef TEXEL_INPUTS
// texture buffers read without a sampler: current SPIR-V validation refuses a sampled image
// (samplerBuffer) whose dimension is Buffer
#extension GL_EXT_samplerless_texture_functions : require
#endif
// flash_attention — attention_scores, attention_mask, softmax and attention_values in one step,
// never holding the (L, S) scores: an online softmax per query row keeps the running max m (from
// -1e30, a large finite negative), the running sum l of exp(s - m) and the running output
// acc = Σ exp(s - m)·v, rescaling both by exp(m_old - m_new) when the max grows. A row with every
// key blocked keeps l = 0 and gives zeros. fp32 throughout.
//   Q   (B, H, L, d)      K, V (B, H_kv, S, d): query head h reads key/value head h / group
//   out (B, H, L, d)      scale = 1/√d      masks and window as attention_mask's (mask.glsl)
// Causal rows walk no key past their diagonal, and with a window W none W or more behind it: a
// window is as fast as the keys it leaves (MHA's work over W keys, not S).
//
// Two builds (shaders/CMakeLists.txt):
//
//   flash_attention: an invocation owns one query row and walks its keys one at a time, as the
//     reference does; the invocations of a workgroup hold rows of one (b, h), so they read the same
//     key at the same time. No subgroup instruction: it runs on any device.
//
//   flash_attention_subgroup (SUBGROUPS): a subgroup owns ROWS query rows (a multiple of LANES,
//     the subgroup size, or fewer; lane t holds rows t, t + LANES, …'s q) and walks the keys in
//     blocks of BLOCK = LANES·KEYS, as gemm.glsl's broadcast variant walks a product: lane t
//     fetches keys j0 + t + LANES·k (k < KEYS) and scores them against every row, each row's four
//     dims at a time shuffled from the lane that holds them — KEYS·4 multiply-adds per shuffle
//     and ROWS·4 per fetch, where shuffles and fetches are what cost on a CPU device. Each row's
//     block max and sum come from subgroup arithmetic. For P·V lane t owns output dims
//     t·PER_LANE …, fetches them from the block's rows of V (as vec4s when they are whole vec4s),
//     and adds them into every row, key after key, the weights shuffled from the lanes that
//     scored them. A block fetches all its keys before any arithmetic: on lavapipe a texel fetch
//     is a call, after which nothing stays in registers. Causal groups stop at their last row's
//     diagonal, and windowed ones start at their first row's window. Which lane holds what follows
//     from LANES: the host runs it only with LANES required as the subgroup size, with full
//     subgroups (engine/vulkan/lanes.h).
//
//   flash_attention_tiled (TILED), FlashAttention-2's order for GPUs: a workgroup of 128 owns ROWS
//     query rows of one (b, h), their q staged once in shared memory, and walks the keys in tiles
//     of KEYS, each tile's rows of K and V loaded into shared memory by the whole workgroup (vec4
//     at a time, consecutive invocations reading consecutive vec4s). The 128 invocations are a
//     16 × 8 grid: invocation (r, c) scores rows r + 16x against keys c + 8y of the tile (ROWS/16 ×
//     KEYS/8 scores from shared q and k rows, each read serving several multiply-adds), writes
//     them masked to a shared tile P; an invocation a row then takes the row's tile max and sum
//     (the online softmax) and turns P into weights; last, invocation (r, c) adds the weighted
//     rows of V into output vec4s c + 8z of its rows. K and V are double-buffered: the next tile's
//     vec4s come into registers while the workgroup works on this one. Rows of q and k in shared
//     memory are one vec4 longer than d, and P's one float longer than a tile, so that the
//     invocations of a subgroup read different banks. No subgroup instruction; ROWS and KEYS
//     within the device's shared memory for d (FlashPlan::shared_bytes).
//
//   flash_attention_subgroup_tiled (TILED and SUBGROUPS): the same tiles, but invocation t is lane
//     t % LANES of subgroup t / LANES (LANES ≥ 8 required, with full subgroups), so that the 8
//     invocations (r, 0 … 7) of a row are neighbouring lanes of one subgroup. Each keeps its rows'
//     running max and sum in registers and takes a tile's row max and sum from three shuffles
//     across the 8 (FlashAttention-2 does so across a quad); it writes its weights, not its
//     scores, to P, which only its own subgroup reads back. Two workgroup barriers a tile instead
//     of four, and no phase in which one invocation a row walks the tile alone.
//
//   flash_attention_coopmat (COOPMAT; _coopmat_khr with COOPMAT_KHR, matrices.glsl): the
//     products in float16 on cooperative matrices, sums float32 (VulkanBackendOptions::
//     float16_products, as the GEMMs'): a workgroup of ROWS / MATRIX_M subgroups owns ROWS query
//     rows of one (b, h), a subgroup MATRIX_M of them, and walks the keys in tiles of KEYS, K and V
//     rounded to float16 in shared memory. A subgroup's scores S = Q·Kᵀ come from its rows of q
//     (float16 fragments held from the start) and the K tile; LPR neighbouring lanes a row then
//     take the online softmax over the scores (max and sum across them by xor shuffles) and write
//     the weights, rounded to float16, and rescale the row's output so far; last the output, kept
//     in shared memory between tiles, is loaded as accumulators and given P·V. d is padded with
//     zeros to the matrices' sizes. Causal and windowed blocks walk only the tiles their rows see.
//
// MASKED (constant 5) is false where neither attn_mask nor key_padding_mask is given: the
// pipeline then has no mask read at all (on lavapipe a read under a branch costs a loop over the
// lanes even when no lane takes it).
// UNROLL_TILES (the flash_attention_subgroup…_unrolled builds, which the host takes at 8 lanes or
// fewer, as the GEMM's): every loop within a block unrolled by [[unroll]], so that the block's
// scores, weights and accumulators are registers, not arrays in memory. Mesa 22 unrolls them
// unasked; Mesa 25 does not, and runs the rolled kernel at half speed. At 16 lanes LLVM 19
// compiles the unrolled kernel for seconds more and it runs no faster (docs/lavapipe.md, "The measurements behind the plans").
#ifdef UNROLL_TILES
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "mask.glsl"
#ifdef COOPMAT
#include "matrices.glsl"
#endif

layout(constant_id = 1) const uint HEAD_DIM = 64;  // d
layout(constant_id = 2) const uint LANES = 8;      // subgroup build: the required subgroup size
#if defined(TILED) || defined(COOPMAT)
layout(constant_id = 3) const uint ROWS = 64;  // query rows per workgroup: 16, 32 or 64
layout(constant_id = 4) const uint KEYS = 32;  // keys a tile: 8, 16, 32 or 64
#else
layout(constant_id = 3) const uint ROWS = 8;       // subgroup build: query rows per subgroup
layout(constant_id = 4) const uint KEYS = 1;       // subgroup build: keys each lane scores a block
#endif
layout(constant_id = 5) const bool MASKED = true;  // attn_mask or key_padding_mask given
const uint ROW_SETS = (ROWS + LANES - 1u) / LANES;       // rows of q each lane holds
const uint CHUNKS = (HEAD_DIM + 3u) / 4u;                // q and k rows as vec4s
const uint PER_LANE = (HEAD_DIM + LANES - 1u) / LANES;  // output dims per lane
const bool VEC4 = HEAD_DIM % 4u == 0u;                   // every row starts on a vec4

layout(std430, binding = 0) readonly buffer Query { float q[]; };
layout(std430, binding = 0) readonly buffer Query4 { vec4 q4[]; };
// K and V: storage buffers, or RGBA32F uniform texel buffers in the …_texel builds (TEXEL_INPUTS,
// which the host uses where d is a multiple of 4), as gemm.glsl's inputs
#ifdef TEXEL_INPUTS
layout(binding = 3) uniform textureBuffer k_texels;
layout(binding = 4) uniform textureBuffer v_texels;
vec4 k4_at(uint at) { return texelFetch(k_texels, int(at)); }
vec4 v4_at(uint at) { return texelFetch(v_texels, int(at)); }
float k_at(uint at) { return texelFetch(k_texels, int(at / 4u))[at % 4u]; }
float v_at(uint at) { return texelFetch(v_texels, int(at / 4u))[at % 4u]; }
#else
layout(std430, binding = 3) readonly buffer Key { float k[]; };
layout(std430, binding = 3) readonly buffer Key4 { vec4 k4[]; };
layout(std430, binding = 4) readonly buffer Value { float v[]; };
layout(std430, binding = 4) readonly buffer Value4 { vec4 v4[]; };
vec4 k4_at(uint at) { return k4[at]; }  // K's vec4 number `at`
vec4 v4_at(uint at) { return v4[at]; }
float k_at(uint at) { return k[at]; }  // K's float number `at`
float v_at(uint at) { return v[at]; }
#endif
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
  uint window;                // 0, or the causal window W
  uint group;                 // query heads per key/value head: H / H_kv
  uint first_group;           // where this submission's part of the grid starts (a long step is split)
} p;

// The first key a causal row i sees: i + 1 - W with a window W, else 0.
uint first_key(uint i) { return p.causal != 0u && p.window != 0u && i + 1u > p.window ? i + 1u - p.window : 0u; }

// Score s of query row i (of head bh, batch item b) against key j, scaled and masked; no mask is
// read where MASKED is false.
float scaled_masked_score(float s, uint bh, uint b, uint i, uint j) {
  return masked_score(s * p.scale, MASKED ? p.attn_mask_rank : 0u, MASKED && p.has_key_padding_mask != 0u,
                      p.causal != 0u, p.window, (bh * p.rows + i) * p.cols + j, b, i, j, p.cols);
}

// Q[row, 4c … 4c+3], zeros past d
vec4 q_chunk(uint row, uint c) {
  if (VEC4) return q4[row * CHUNKS + c];
  vec4 x = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (4u * c + t < HEAD_DIM) x[t] = q[row * HEAD_DIM + 4u * c + t];
  }
  return x;
}

// K[row, 4c … 4c+3], zeros past d
vec4 k_chunk(uint row, uint c) {
  if (VEC4) return k4_at(row * CHUNKS + c);
  vec4 x = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (4u * c + t < HEAD_DIM) x[t] = k_at(row * HEAD_DIM + 4u * c + t);
  }
  return x;
}

// V[row, 4c … 4c+3], zeros past d
vec4 v_chunk(uint row, uint c) {
  if (VEC4) return v4_at(row * CHUNKS + c);
  vec4 x = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (4u * c + t < HEAD_DIM) x[t] = v_at(row * HEAD_DIM + 4u * c + t);
  }
  return x;
}

#if defined(COOPMAT)
// ---- ROWS query rows per workgroup on cooperative matrices -------------------------------------
const uint MATRIX_SUBGROUPS = ROWS / MATRIX_M, INVOCATIONS = MATRIX_SUBGROUPS * LANES;
const uint STEP = MATRIX_N > MATRIX_K ? MATRIX_N : MATRIX_K;
const uint DP = (HEAD_DIM + STEP - 1u) / STEP * STEP;  // d padded with zeros to the matrices
const uint QUADS = DP / 4u;                            // vec4s of a padded row
const uint KV_STRIDE = (DP + PAD) / HALVES;            // uvec4s between rows of q, K and V
const uint LPR = LANES > MATRIX_M ? LANES / MATRIX_M : 1u;  // lanes a row (LANES, MATRIX_M powers of 2)
const uint ROW_STEP = LANES / LPR;                     // rows a subgroup's lanes take at once
const uint ROWS_EACH = MATRIX_M / ROW_STEP;            // rows a lane takes
const uint KEY_QUADS = KEYS / 4u / LPR;                // a lane's quads of a row's keys: part + LPR·y
const uint DIM_QUADS = DP / 4u / LPR;                  // and of its output dims
const uint V_AT = KEYS * KV_STRIDE;                    // where the V tile starts in kv_tile
// The scores and the outputs as float32 quads (uvec4s of their bits; the loads take no vec4 array
// on NVIDIA's extension), each row two quads longer than its data: a lane reads quads LPR apart,
// and the 8 lanes a 16-byte read serves at once then fall on 8 different quads of the banks. P
// as quads of float16 (uvec2s), rows PAD longer.
const uint S_STRIDE = KEYS / 4u + 2u, O_STRIDE = DP / 4u + 2u, P_STRIDE = (KEYS + PAD) / 4u;

shared uvec4 kv_tile[2u * KEYS * KV_STRIDE];  // the K tile's rows then V's, float16; first q's (ROWS ≤ 2·KEYS)
shared uvec4 s_tile[ROWS * S_STRIDE];         // scores, a subgroup's MATRIX_M rows after another's
shared uvec2 p_tile[ROWS * P_STRIDE];         // their weights, float16
shared uvec4 o_tile[ROWS * O_STRIDE];         // the rows' outputs, not yet divided by their sums

// max and sum over the LPR lanes of a row (neighbours, LPR a power of 2)
float row_max_of(float x) {
  [[unroll]] for (uint o = 1u; o < LPR; o *= 2u) x = max(x, subgroupShuffleXor(x, o));
  return x;
}
float row_sum_of(float x) {
  [[unroll]] for (uint o = 1u; o < LPR; o *= 2u) x += subgroupShuffleXor(x, o);
  return x;
}

void main() {
  uint row_blocks = (p.rows + ROWS - 1u) / ROWS;
  uint heads = p.batch * p.heads;
  uint unit = flat_workgroup_id() + p.first_group;
  if (unit >= heads * row_blocks) return;  // uniform per workgroup, before any barrier
  // causal blocks longest first, as the tiled kernel's (FlashPlan::first_row)
  uint bh = p.causal != 0u ? unit % heads : unit / row_blocks;
  uint block = p.causal != 0u ? row_blocks - 1u - unit / heads : unit % row_blocks;
  uint b = bh / p.heads;
  uint kv = bh / p.group;  // the key/value head, (B·H_kv) flat
  uint i0 = block * ROWS;
  uint i_last = min(i0 + ROWS, p.rows) - 1u;
  uint t = gl_SubgroupID * LANES + gl_SubgroupInvocationID;
  uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, part = lane % LPR;
  uint my_rows = sg * MATRIX_M;  // the subgroup's first row of the block

  // the block's q rows, float16, zeros past L and d; each subgroup's as A fragments
  for (uint e = t; e < ROWS * QUADS; e += INVOCATIONS) {
    uint row = e / QUADS, quad = e % QUADS, at = row * KV_STRIDE + quad / 2u;
    vec4 q_quad = i0 + row < p.rows && quad < CHUNKS ? q_chunk(bh * p.rows + i0 + row, quad) : vec4(0.0);
    STASH(kv_tile, at, quad, q_quad);
  }
  barrier();
  MATRIX_A q_frag[DP / MATRIX_K];
  [[unroll]] for (uint c = 0u; c < DP / MATRIX_K; ++c) {
    LOAD_ROWS(q_frag[c], kv_tile, my_rows * KV_STRIDE + c * MATRIX_K / HALVES, KV_STRIDE);
  }
  float m[ROWS_EACH], l[ROWS_EACH];  // lane's rows' running max and sum, alike in the row's lanes
  [[unroll]] for (uint x = 0u; x < ROWS_EACH; ++x) {
    m[x] = -1e30;
    l[x] = 0.0;
    uint row = my_rows + lane / LPR + ROW_STEP * x;
    for (uint u = 0u; u < DIM_QUADS; ++u) o_tile[row * O_STRIDE + part + LPR * u] = uvec4(0u);
  }

  uint key_end = p.causal != 0u ? min(p.cols, i_last + 1u) : p.cols;  // causal: no row sees past i_last
  for (uint j0 = first_key(i0); j0 < key_end; j0 += KEYS) {
    barrier();  // q's fragments (first) or the last tile are read
    for (uint e = t; e < KEYS * QUADS; e += INVOCATIONS) {
      uint key = e / QUADS, quad = e % QUADS, at = key * KV_STRIDE + quad / 2u;
      bool real = j0 + key < key_end && quad < CHUNKS;
      vec4 k_quad = real ? k_chunk(kv * p.cols + j0 + key, quad) : vec4(0.0);
      vec4 v_quad = real ? v_chunk(kv * p.cols + j0 + key, quad) : vec4(0.0);
      STASH(kv_tile, at, quad, k_quad);
      STASH(kv_tile, V_AT + at, quad, v_quad);
    }
    barrier();
    // S (MATRIX_M × KEYS) = the subgroup's q · Kᵀ, K's tile read as B column-major
    [[unroll]] for (uint n = 0u; n < KEYS / MATRIX_N; ++n) {
      MATRIX_C s_acc = MATRIX_C(0.0);
      [[unroll]] for (uint c = 0u; c < DP / MATRIX_K; ++c) {
        MATRIX_B k_frag;
        LOAD_COLUMNS(k_frag, kv_tile, n * MATRIX_N * KV_STRIDE + c * MATRIX_K / HALVES, KV_STRIDE);
        s_acc = MULTIPLY_ADD(q_frag[c], k_frag, s_acc);
      }
      STORE_ROWS(s_acc, s_tile, my_rows * S_STRIDE + n * MATRIX_N / 4u, S_STRIDE);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // the online softmax: a row's LPR lanes, KEY_QUADS quads of keys each; weights exp(s - m_new)
    // to P
    [[unroll]] for (uint x = 0u; x < ROWS_EACH; ++x) {
      uint row = my_rows + lane / LPR + ROW_STEP * x, i = i0 + row;
      vec4 s[KEY_QUADS];
      float tile_max = NEG_INF;
      [[unroll]] for (uint y = 0u; y < KEY_QUADS; ++y) {
        uint quad = part + LPR * y;
        vec4 raw = uintBitsToFloat(s_tile[row * S_STRIDE + quad]);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
          uint j = j0 + 4u * quad + c;
          s[y][c] = i < p.rows && j < key_end ? scaled_masked_score(raw[c], bh, b, i, j) : NEG_INF;
          tile_max = max(tile_max, s[y][c]);
        }
      }
      float m_new = max(m[x], row_max_of(tile_max));  // unchanged when every key of the tile is blocked
      float sum = 0.0;
      [[unroll]] for (uint y = 0u; y < KEY_QUADS; ++y) {
        vec4 w;
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
          w[c] = s[y][c] == NEG_INF ? 0.0 : exp(s[y][c] - m_new);
          sum += w[c];
        }
        p_tile[row * P_STRIDE + part + LPR * y] = halves(w);
      }
      float rescale = exp(m[x] - m_new);
      l[x] = l[x] * rescale + row_sum_of(sum);
      m[x] = m_new;
      for (uint u = 0u; u < DIM_QUADS; ++u) {
        uint at = row * O_STRIDE + part + LPR * u;
        o_tile[at] = floatBitsToUint(uintBitsToFloat(o_tile[at]) * rescale);
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // the output += P · V, each MATRIX_M × MATRIX_N of it as an accumulator; V's tile as B rows
    MATRIX_A p_frag[KEYS / MATRIX_K];
    [[unroll]] for (uint c = 0u; c < KEYS / MATRIX_K; ++c) {
      LOAD_ROWS(p_frag[c], p_tile, my_rows * P_STRIDE + c * MATRIX_K / 4u, P_STRIDE);
    }
    [[unroll]] for (uint n = 0u; n < DP / MATRIX_N; ++n) {
      MATRIX_C o_acc;
      LOAD_ROWS(o_acc, o_tile, my_rows * O_STRIDE + n * MATRIX_N / 4u, O_STRIDE);
      [[unroll]] for (uint c = 0u; c < KEYS / MATRIX_K; ++c) {
        MATRIX_B v_frag;
        LOAD_ROWS(v_frag, kv_tile, V_AT + c * MATRIX_K * KV_STRIDE + n * MATRIX_N / HALVES, KV_STRIDE);
        o_acc = MULTIPLY_ADD(p_frag[c], v_frag, o_acc);
      }
      STORE_ROWS(o_acc, o_tile, my_rows * O_STRIDE + n * MATRIX_N / 4u, O_STRIDE);
    }
    subgroupMemoryBarrierShared();  // the output, for its rows' lanes
    subgroupBarrier();
  }
  [[unroll]] for (uint x = 0u; x < ROWS_EACH; ++x) {
    uint row = my_rows + lane / LPR + ROW_STEP * x, i = i0 + row;
    if (i >= p.rows) continue;
    for (uint u = 0u; u < DIM_QUADS; ++u) {
      uint quad = part + LPR * u;
      vec4 o = uintBitsToFloat(o_tile[row * O_STRIDE + quad]);
      for (uint c = 0u; c < 4u; ++c) {
        uint dim = 4u * quad + c;
        if (dim < HEAD_DIM) out_rows[(bh * p.rows + i) * HEAD_DIM + dim] = l[x] > 0.0 ? o[c] / l[x] : 0.0;
      }
    }
  }
}

#elif defined(TILED)
// ---- ROWS query rows per workgroup, K and V in shared tiles of KEYS keys ------------------------
const uint GRID_ROWS = 16u, GRID_COLS = 8u;  // the workgroup's 128 invocations, (r, c)
const uint INVOCATIONS = GRID_ROWS * GRID_COLS;
const uint ROWS_EACH = ROWS / GRID_ROWS;     // query rows an invocation scores and accumulates
const uint KEYS_EACH = KEYS / GRID_COLS;     // keys of a tile an invocation scores
const uint DP4 = (CHUNKS + GRID_COLS - 1u) / GRID_COLS * GRID_COLS;  // d in vec4s, padded to the grid's columns
const uint CHUNKS_EACH = DP4 / GRID_COLS;    // output vec4s of a row an invocation accumulates
const uint QK_STRIDE = DP4 + 1u;             // vec4s between rows of q or k in shared memory
const uint P_STRIDE = KEYS + 1u;             // floats between rows of P

shared vec4 q_tile[ROWS * QK_STRIDE];  // the block's rows of q, zeros past L and d
shared vec4 k_tile[KEYS * QK_STRIDE];  // the tile's rows of K, zeros past the keys and d
shared vec4 v_tile[KEYS * DP4];        // the tile's rows of V, likewise
shared float p_tile[ROWS * P_STRIDE];  // scores, then weights exp(s - m) (subgroup build: weights)
#ifdef SUBGROUPS
// x's maximum and sum over the 8 lanes 8k … 8k + 7 of the subgroup (a row's 8 invocations)
float max_of_8(float x) {
  x = max(x, subgroupShuffleXor(x, 1u));
  x = max(x, subgroupShuffleXor(x, 2u));
  return max(x, subgroupShuffleXor(x, 4u));
}
float sum_of_8(float x) {
  x += subgroupShuffleXor(x, 1u);
  x += subgroupShuffleXor(x, 2u);
  return x + subgroupShuffleXor(x, 4u);
}
#else
shared float row_max[ROWS], row_sum[ROWS], row_rescale[ROWS];  // the online softmax's m, l, exp(m_old - m)
#endif

// vec4s of K (and as many of V) an invocation loads a tile
const uint LOADS = (KEYS * DP4 + INVOCATIONS - 1u) / INVOCATIONS;

// Invocation t's vec4s of the tile of keys from j0 on (t, t + 128, …: consecutive invocations
// read consecutive vec4s), zeros past key_end and d
void load_tile(uint j0, uint key_end, uint kv, uint t, out vec4 k_next[LOADS], out vec4 v_next[LOADS]) {
  for (uint n = 0u; n < LOADS; ++n) {
    uint e = t + INVOCATIONS * n, key = e / DP4, chunk = e % DP4;
    bool real = e < KEYS * DP4 && j0 + key < key_end && chunk < CHUNKS;
    k_next[n] = real ? k_chunk(kv * p.cols + j0 + key, chunk) : vec4(0.0);
    v_next[n] = real ? v_chunk(kv * p.cols + j0 + key, chunk) : vec4(0.0);
  }
}

void main() {
  uint row_blocks = (p.rows + ROWS - 1u) / ROWS;
  uint heads = p.batch * p.heads;
  uint unit = flat_workgroup_id() + p.first_group;
  if (unit >= heads * row_blocks) return;  // uniform per workgroup, before any barrier
  // Causal: every head's last block first, then every head's last but one, …: the longest work
  // starts first and the short blocks fill the device's tail (FlashPlan::first_row). Else a
  // head's blocks side by side: unit = bh · row_blocks + block.
  uint bh = p.causal != 0u ? unit % heads : unit / row_blocks;
  uint block = p.causal != 0u ? row_blocks - 1u - unit / heads : unit % row_blocks;
  uint b = bh / p.heads;
  uint kv = bh / p.group;  // the key/value head, (B·H_kv) flat
  uint i0 = block * ROWS;
  uint i_last = min(i0 + ROWS, p.rows) - 1u;
#ifdef SUBGROUPS
  uint t = gl_SubgroupID * LANES + gl_SubgroupInvocationID;  // (r, 0 … 7): lanes of one subgroup
#else
  uint t = gl_LocalInvocationID.x;
#endif
  uint r = t / GRID_COLS, c = t % GRID_COLS;  // rows r + 16x, keys c + 8y, output vec4s c + 8z

  for (uint e = t; e < ROWS * DP4; e += INVOCATIONS) {
    uint row = e / DP4, chunk = e % DP4;
    bool real = i0 + row < p.rows && chunk < CHUNKS;
    q_tile[row * QK_STRIDE + chunk] = real ? q_chunk(bh * p.rows + i0 + row, chunk) : vec4(0.0);
  }
#ifdef SUBGROUPS
  float m[ROWS_EACH], l[ROWS_EACH];  // rows r + 16x's running max and sum, alike in their 8 lanes
  for (uint x = 0u; x < ROWS_EACH; ++x) {
    m[x] = -1e30;
    l[x] = 0.0;
  }
#else
  for (uint row = t; row < ROWS; row += INVOCATIONS) {
    row_max[row] = -1e30;
    row_sum[row] = 0.0;
  }
#endif
  vec4 acc[ROWS_EACH][CHUNKS_EACH];
  for (uint x = 0u; x < ROWS_EACH; ++x) {
    for (uint z = 0u; z < CHUNKS_EACH; ++z) acc[x][z] = vec4(0.0);
  }

  uint key_end = p.causal != 0u ? min(p.cols, i_last + 1u) : p.cols;  // causal: no row sees past i_last
  // K and V double-buffered: a tile's vec4s come into registers while the tile before it is
  // worked on, and go to shared memory once its readers are done
  vec4 k_next[LOADS], v_next[LOADS];
  uint j_first = first_key(i0);  // windowed: from the first row's window
  load_tile(j_first, key_end, kv, t, k_next, v_next);
  for (uint j0 = j_first; j0 < key_end; j0 += KEYS) {
    barrier();  // the last tile's readers are done with k_tile, v_tile and p_tile
    for (uint n = 0u; n < LOADS; ++n) {
      uint e = t + INVOCATIONS * n, key = e / DP4, chunk = e % DP4;
      if (e >= KEYS * DP4) break;
      k_tile[key * QK_STRIDE + chunk] = k_next[n];
      v_tile[key * DP4 + chunk] = v_next[n];
    }
    barrier();
    if (j0 + KEYS < key_end) load_tile(j0 + KEYS, key_end, kv, t, k_next, v_next);  // uniform
    // scores of rows r + 16x against keys c + 8y, masked into P
    float s[ROWS_EACH][KEYS_EACH];
    for (uint x = 0u; x < ROWS_EACH; ++x) {
      for (uint y = 0u; y < KEYS_EACH; ++y) s[x][y] = 0.0;
    }
    for (uint chunk = 0u; chunk < DP4; ++chunk) {
      vec4 qc[ROWS_EACH];
      for (uint x = 0u; x < ROWS_EACH; ++x) qc[x] = q_tile[(r + GRID_ROWS * x) * QK_STRIDE + chunk];
      for (uint y = 0u; y < KEYS_EACH; ++y) {
        vec4 kc = k_tile[(c + GRID_COLS * y) * QK_STRIDE + chunk];
        for (uint x = 0u; x < ROWS_EACH; ++x) s[x][y] += dot(qc[x], kc);
      }
    }
#ifdef SUBGROUPS
    // the online softmax in registers, each row's tile max and sum across its 8 lanes; P gets the
    // weights exp(s - m_new)
    float rescale[ROWS_EACH];
    for (uint x = 0u; x < ROWS_EACH; ++x) {
      float block_max = NEG_INF;
      for (uint y = 0u; y < KEYS_EACH; ++y) {
        uint i = i0 + r + GRID_ROWS * x, j = j0 + c + GRID_COLS * y;
        s[x][y] = i < p.rows && j < key_end ? scaled_masked_score(s[x][y], bh, b, i, j) : NEG_INF;
        block_max = max(block_max, s[x][y]);
      }
      float m_new = max(m[x], max_of_8(block_max));  // unchanged when every key of the tile is blocked
      float sum = 0.0;
      for (uint y = 0u; y < KEYS_EACH; ++y) {
        float w = s[x][y] == NEG_INF ? 0.0 : exp(s[x][y] - m_new);
        p_tile[(r + GRID_ROWS * x) * P_STRIDE + c + GRID_COLS * y] = w;
        sum += w;
      }
      rescale[x] = exp(m[x] - m_new);
      l[x] = l[x] * rescale[x] + sum_of_8(sum);
      m[x] = m_new;
    }
    subgroupMemoryBarrierShared();  // a row's weights, from its 8 lanes, for each of them
    subgroupBarrier();
#else
    for (uint x = 0u; x < ROWS_EACH; ++x) {
      for (uint y = 0u; y < KEYS_EACH; ++y) {
        uint i = i0 + r + GRID_ROWS * x, j = j0 + c + GRID_COLS * y;
        p_tile[(r + GRID_ROWS * x) * P_STRIDE + c + GRID_COLS * y] =
            i < p.rows && j < key_end ? scaled_masked_score(s[x][y], bh, b, i, j) : NEG_INF;
      }
    }
    barrier();
    // the online softmax, an invocation a row: P's scores become weights exp(s - m_new)
    for (uint row = t; row < ROWS; row += INVOCATIONS) {
      float block_max = NEG_INF;
      for (uint key = 0u; key < KEYS; ++key) block_max = max(block_max, p_tile[row * P_STRIDE + key]);
      float m_new = max(row_max[row], block_max);  // unchanged when every key of the tile is blocked
      float sum = 0.0;
      for (uint key = 0u; key < KEYS; ++key) {
        float score = p_tile[row * P_STRIDE + key];
        float w = score == NEG_INF ? 0.0 : exp(score - m_new);
        p_tile[row * P_STRIDE + key] = w;
        sum += w;
      }
      row_rescale[row] = exp(row_max[row] - m_new);
      row_sum[row] = row_sum[row] * row_rescale[row] + sum;
      row_max[row] = m_new;
    }
    barrier();
    float rescale[ROWS_EACH];
    for (uint x = 0u; x < ROWS_EACH; ++x) rescale[x] = row_rescale[r + GRID_ROWS * x];
#endif
    // P · V: rows r + 16x, output vec4s c + 8z, rescaled and given the tile's keys in order
    for (uint x = 0u; x < ROWS_EACH; ++x) {
      for (uint z = 0u; z < CHUNKS_EACH; ++z) acc[x][z] *= rescale[x];
    }
    for (uint key = 0u; key < KEYS; ++key) {
      vec4 vc[CHUNKS_EACH];
      for (uint z = 0u; z < CHUNKS_EACH; ++z) vc[z] = v_tile[key * DP4 + c + GRID_COLS * z];
      for (uint x = 0u; x < ROWS_EACH; ++x) {
        float w = p_tile[(r + GRID_ROWS * x) * P_STRIDE + key];
        for (uint z = 0u; z < CHUNKS_EACH; ++z) acc[x][z] += w * vc[z];
      }
    }
  }
#ifndef SUBGROUPS
  barrier();  // row_sum as the last tile left it (or as set, where no tile ran)
  float l[ROWS_EACH];
  for (uint x = 0u; x < ROWS_EACH; ++x) l[x] = row_sum[r + GRID_ROWS * x];
#endif
  for (uint x = 0u; x < ROWS_EACH; ++x) {
    uint i = i0 + r + GRID_ROWS * x;
    if (i >= p.rows) continue;
    for (uint z = 0u; z < CHUNKS_EACH; ++z) {
      uint chunk = c + GRID_COLS * z;
      for (uint u = 0u; u < 4u; ++u) {
        if (4u * chunk + u < HEAD_DIM) out_rows[(bh * p.rows + i) * HEAD_DIM + 4u * chunk + u] = l[x] > 0.0 ? acc[x][z][u] / l[x] : 0.0;
      }
    }
  }
}

#elif !defined(SUBGROUPS)
// ---- one query row per invocation -------------------------------------------------------------
void main() {
  uint row_groups = (p.rows + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
  uint unit = flat_workgroup_id() + p.first_group;  // bh · row_groups + row group
  if (unit >= p.batch * p.heads * row_groups) return;
  uint bh = unit / row_groups;
  uint b = bh / p.heads;
  uint kv = bh / p.group;  // the key/value head, (B·H_kv) flat
  uint i = unit % row_groups * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= p.rows) return;  // no barrier follows: a finished invocation may leave

  vec4 q_row[CHUNKS], acc[CHUNKS];
  for (uint c = 0u; c < CHUNKS; ++c) {
    q_row[c] = q_chunk(bh * p.rows + i, c);
    acc[c] = vec4(0.0);
  }
  float m = -1e30, l = 0.0;  // running max, running sum of exp(s - m)
  uint key_end = p.causal != 0u ? min(p.cols, i + 1u) : p.cols;  // causal: keys 0 … i
  for (uint j = first_key(i); j < key_end; ++j) {
    float s = 0.0;
    for (uint c = 0u; c < CHUNKS; ++c) s += dot(q_row[c], k_chunk(kv * p.cols + j, c));
    s = scaled_masked_score(s, bh, b, i, j);
    if (s == NEG_INF) continue;  // blocked: weight 0
    float m_new = max(m, s);
    float rescale = exp(m - m_new), w = exp(s - m_new);
    l = l * rescale + w;
    for (uint c = 0u; c < CHUNKS; ++c) acc[c] = acc[c] * rescale + w * v_chunk(kv * p.cols + j, c);
    m = m_new;
  }
  for (uint c = 0u; c < CHUNKS; ++c) {
    for (uint t = 0u; t < 4u; ++t) {
      if (4u * c + t < HEAD_DIM) out_rows[(bh * p.rows + i) * HEAD_DIM + 4u * c + t] = l > 0.0 ? acc[c][t] / l : 0.0;
    }
  }
}

#else
// ---- ROWS query rows × BLOCK keys per subgroup ----------------------------------------------------
// every row of V starts on a vec4, and so does every lane's share of it (a sum of remainders, not
// VEC4 && …: glslang emits a short-circuit of specialization constants as code after main's return)
const bool VEC4_V = HEAD_DIM % 4u + PER_LANE % 4u == 0u;
const uint BLOCK = LANES * KEYS;  // keys a block: lane t scores keys j0 + t + LANES·k, k < KEYS

void main() {
  uint row_groups = (p.rows + ROWS - 1u) / ROWS;
  // bh · row_groups + row group
  uint unit = (flat_workgroup_id() + p.first_group) * gl_NumSubgroups + gl_SubgroupID;
  if (unit >= p.batch * p.heads * row_groups) return;                 // uniform per subgroup
  uint lane = gl_SubgroupInvocationID;
  uint bh = unit / row_groups;
  uint b = bh / p.heads;
  uint kv = bh / p.group;  // the key/value head, (B·H_kv) flat
  uint i0 = unit % row_groups * ROWS;
  uint i_last = min(i0 + ROWS, p.rows) - 1u;
  uint first_dim = lane * PER_LANE;  // this lane's output dims: first_dim … + PER_LANE - 1

  vec4 q_own[ROW_SETS][CHUNKS];  // rows i0 + lane + LANES·s (past ROWS or L: a real row, never read)
  UNROLL for (uint s = 0u; s < ROW_SETS; ++s) {
    uint own_row = bh * p.rows + min(i0 + min(lane + LANES * s, ROWS - 1u), p.rows - 1u);
    UNROLL for (uint c = 0u; c < CHUNKS; ++c) q_own[s][c] = q_chunk(own_row, c);
  }
  float m[ROWS], l[ROWS], acc[ROWS][PER_LANE];
  UNROLL for (uint r = 0u; r < ROWS; ++r) {
    m[r] = -1e30;
    l[r] = 0.0;
    UNROLL for (uint t = 0u; t < PER_LANE; ++t) acc[r][t] = 0.0;
  }

  uint key_end = p.causal != 0u ? min(p.cols, i_last + 1u) : p.cols;  // causal: no row sees past i_last
  for (uint j0 = first_key(i0); j0 < key_end; j0 += BLOCK) {  // windowed: from the first row's window
    // this lane's keys, fetched before any arithmetic (lanes past the end fetch a real key and
    // drop its score)
    vec4 kc[KEYS][CHUNKS];
    UNROLL for (uint k = 0u; k < KEYS; ++k) {
      uint key = min(j0 + lane + LANES * k, p.cols - 1u);
      UNROLL for (uint c = 0u; c < CHUNKS; ++c) kc[k][c] = k_chunk(kv * p.cols + key, c);
    }
    // keys j0 … j0 + BLOCK - 1's rows of V, this lane's dims (zeros past key_end: weight 0)
    float vs[BLOCK][PER_LANE];
    UNROLL for (uint u = 0u; u < BLOCK; ++u) {
      bool real = j0 + u < key_end;  // uniform
      uint v_row = (kv * p.cols + min(j0 + u, p.cols - 1u)) * HEAD_DIM;
      if (VEC4_V) {
        UNROLL for (uint t = 0u; t < PER_LANE; t += 4u) {
          vec4 x = real && first_dim + t < HEAD_DIM ? v4_at((v_row + first_dim + t) / 4u) : vec4(0.0);
          vs[u][t] = x.x, vs[u][t + 1u] = x.y, vs[u][t + 2u] = x.z, vs[u][t + 3u] = x.w;
        }
      } else {
        UNROLL for (uint t = 0u; t < PER_LANE; ++t) {
          vs[u][t] = real && first_dim + t < HEAD_DIM ? v_at(v_row + first_dim + t) : 0.0;
        }
      }
    }
    // scores, row by row: row r's q, four dims at a time, shuffled from the lane that holds it,
    // against every key of this lane
    float s[ROWS][KEYS];
    UNROLL for (uint r = 0u; r < ROWS; ++r) {
      UNROLL for (uint k = 0u; k < KEYS; ++k) s[r][k] = 0.0;
      UNROLL for (uint c = 0u; c < CHUNKS; ++c) {
        vec4 qc = subgroupShuffle(q_own[r / LANES][c], r % LANES);
        UNROLL for (uint k = 0u; k < KEYS; ++k) s[r][k] += dot(qc, kc[k][c]);
      }
    }
    // online softmax, row by row: s[r][k] becomes the key's weight exp(s - m_new) in row r
    float rescale[ROWS];
    UNROLL for (uint r = 0u; r < ROWS; ++r) {
      uint i = min(i0 + r, p.rows - 1u);
      float block_max = NEG_INF;
      UNROLL for (uint k = 0u; k < KEYS; ++k) {
        uint j = j0 + lane + LANES * k;
        uint key = min(j, p.cols - 1u);
        float sr = scaled_masked_score(s[r][k], bh, b, i, key);
        s[r][k] = j < key_end ? sr : NEG_INF;
        block_max = max(block_max, s[r][k]);
      }
      float m_new = max(m[r], subgroupMax(block_max));  // unchanged when every key of the block is blocked
      rescale[r] = exp(m[r] - m_new);
      float sum = 0.0;
      UNROLL for (uint k = 0u; k < KEYS; ++k) {
        s[r][k] = s[r][k] == NEG_INF ? 0.0 : exp(s[r][k] - m_new);
        sum += s[r][k];
      }
      l[r] = l[r] * rescale[r] + subgroupAdd(sum);
      m[r] = m_new;
    }
    // P·V, row by row: each accumulator rescaled, then given the block's keys in order, their
    // weights shuffled from the lanes that scored them
    UNROLL for (uint r = 0u; r < ROWS; ++r) {
      float w[BLOCK];
      UNROLL for (uint u = 0u; u < BLOCK; ++u) w[u] = subgroupShuffle(s[r][u / LANES], u % LANES);
      UNROLL for (uint t = 0u; t < PER_LANE; ++t) {
        float a = acc[r][t] * rescale[r];
        UNROLL for (uint u = 0u; u < BLOCK; ++u) a += w[u] * vs[u][t];
        acc[r][t] = a;
      }
    }
  }
  UNROLL for (uint r = 0u; r < ROWS; ++r) {
    uint i = i0 + r;
    if (i >= p.rows) break;
    UNROLL for (uint t = 0u; t < PER_LANE; ++t) {
      uint c = first_dim + t;
      if (c < HEAD_DIM) out_rows[(bh * p.rows + i) * HEAD_DIM + c] = l[r] > 0.0 ? acc[r][t] / l[r] : 0.0;
    }
  }
}
#endif
