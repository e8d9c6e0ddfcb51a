// The batched matrix product behind linear, attention_scores and attention_values:
//   C[n, i, j] = scale · Σ_k A[n, i, k] · B(n, k, j)  (+ bias[j])
//   A (batch, M, K) row-major;  B stored (batch / group, N, K) — x·Wᵀ, Q·Kᵀ — or, with
//   B_IS_K_BY_N defined by the including shader, (batch / group, K, N) — P·V;  C (batch, M, N).
//   B(n, …) is item n / group of B: grouped-query attention's `group` query heads share one key
//   and value head (group = 1 otherwise).
// fp32 throughout (but the third tiling's products). Two tilings of the same sum, two builds of
// each step (shaders/CMakeLists.txt), and a third whose products are float16's:
//
//   <step>_subgroup (SUBGROUPS defined): subgroup broadcast (CPU devices: lavapipe runs a
//     subgroup's lanes as SIMD lanes,
//     and a load whose address differs per lane becomes a loop over the lanes, so speed follows
//     multiply-adds per load). A subgroup owns TILE_M rows (a multiple of LANES, the subgroup
//     size) × LANES·TILE_N columns; each lane loads the next four k of TILE_M/LANES rows of A
//     and gets the other rows' by a lane shuffle, and loads only its own TILE_N columns of B:
//     TILE_M/LANES + TILE_N vec4 loads per 4·TILE_M·TILE_N multiply-adds. Lane t's rows and
//     columns follow from LANES, so the host runs it only with LANES required as the subgroup
//     size, with full subgroups (engine/vulkan/lanes.h).
//   <step>: shared-memory tiles (GPUs: coalesced loads, reuse from shared memory; any device). A
//     workgroup of SIDE² invocations owns a (SIDE·TILE_M) × (SIDE·TILE_N) block of C, each
//     invocation a TILE_M × TILE_N register tile (4 or 8 each: 8 × 8 over 128 × 128 blocks is
//     what today's fp32 GEMMs on GPUs hold); K is walked DEPTH at a time through double-buffered
//     shared tiles, read as vec4.
//   <step>_coopmat (COOPMAT defined): the shared tiling's loads, stashed as float16, multiplied on
//     cooperative matrices into float32 (VulkanBackendOptions::float16_products; only where the
//     device has them: DeviceReport::float16_products): NVIDIA's (VK_NV_cooperative_matrix) in
//     this build, validated at build time on every machine; Khronos's (VK_KHR_cooperative_matrix,
//     any vendor's) in <step>_coopmat_khr (COOPMAT_KHR defined too), built where glslang knows
//     GL_KHR_cooperative_matrix (Debian 13's, not 12's), run by CI on lavapipe from Mesa 25.1 on.
//
// VEC4 (constant 1) reads A and B as vec4: the host sets it when K (and, for (K, N) storage, N)
// is a multiple of 4, so every row starts on a vec4. Rows and columns past the edge are clamped
// on load and skipped on store; a k past K reads 0.
//
// PACKED_B (constant 9; the broadcast tiling, B stored (N, K), VEC4): B comes rewritten by
// shaders/gemm_pack.comp in the order the lanes read it, a subgroup's columns for four k side by
// side, so that its fetches for a pass are LANES·TILE_N neighbouring vec4s instead of vec4s on
// as many rows of B, K floats apart. On lavapipe the projection GEMM runs 20–35 % faster so
// (docs/lavapipe.md); the host packs where the plan says (GemmPlan::packed_b).
//
// Heads kept in place (linear only, batch 1; engine: Backend::linear_split_heads and
// merge_heads_linear): with C_HEADS (constant 7) the product C (B·T, H·d) is stored as
// (B, H, T, d) — split_heads folded into the store; with A_HEADS (constant 8) A (B·T, H·d) is
// read from (B, H, T, d) — merge_heads folded into the load (then d is a multiple of 4 for VEC4,
// so a vec4 never straddles two heads). H and T are the push constants `heads` and `tokens`.
//
// B_FORMAT (constant 11; linear, not PACKED_B): B kept 16-bit by Backend::upload_matrix, widened
// as it is read (sixteen_bit.glsl): from its storage buffer, or, in the <step>…_texel16 builds
// (B_WORDS), from RG32UI texels, where A is RGBA32F texels as in the _texel builds.
//
// ACTIVATION (constant 12; linear; engine: Backend::linear_activation): the element-wise step
// after the projection folded into the store, each C[n, i, j] = activate(ACTIVATION, …)
// (activations.glsl); 0, none, elsewhere.
//
// RESIDUAL (constant 13; linear; engine: Backend::linear's ResidualAfter): the residual_add after
// the projection folded into the store too, each C[n, i, j] = activate(…) + residual[same index]
// (C's layout plain). The including shader defines RESIDUAL_BINDING (linear.comp) for it.
//
// Bindings: 0 = A, 1 = B, 2 = bias (read only when HAS_BIAS), 3 = C; with RESIDUAL_BINDING
// defined, 3 = the residual (read only when RESIDUAL) and 4 = C. A and B are storage
// buffers, or, where the including shader is built with TEXEL_INPUTS (the <step>…_texel
// builds), RGBA32F uniform texel buffers read by texelFetch: on
// lavapipe a texel fetch whose address differs per lane costs less than a storage load. The host
// uses those only with VEC4, the buffers then holding whole texels.
// UNROLL_TILES (the <step>_subgroup…_unrolled builds): the broadcast tiling's loops over its tile
// are unrolled by [[unroll]], so that its accumulators live in registers. Mesa 25's NIR stops
// unrolling on its own past a cost, and then indexes them in memory, three times slower. Mesa 22
// unrolls them unasked. The host takes these builds at 8 lanes or fewer: at 16, LLVM 19 compiles
// the unrolled tile for seconds, which a run does not repay (docs/lavapipe.md, "The measurements behind the plans").
#ifdef UNROLL_TILES
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#ifdef SUBGROUPS
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifdef COOPMAT
#extension GL_KHR_shader_subgroup_basic : require
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
#include "common.glsl"
#include "sixteen_bit.glsl"
#include "activations.glsl"
#ifdef COOPMAT
#include "matrices.glsl"
#endif

layout(constant_id = 1) const bool VEC4 = false;     // rows of A and B are whole vec4s
layout(constant_id = 2) const bool HAS_BIAS = false; // add bias[j]
// an invocation's outputs: TILE_M rows × TILE_N columns (broadcast: TILE_M a multiple of LANES,
// all its subgroup's rows; shared: TILE_M a multiple of 4); TILE_N a multiple of 4
layout(constant_id = 3) const uint TILE_M = 8;
layout(constant_id = 4) const uint TILE_N = 8;
layout(constant_id = 5) const uint SIDE = 16;        // shared: the workgroup is SIDE × SIDE
layout(constant_id = 6) const uint LANES = 8;        // broadcast, COOPMAT: the required subgroup size
layout(constant_id = 7) const uint C_HEADS = 0u;     // store C (B·T, H·d) as (B, H, T, d): 1, or
                                                     // 4 where d is a multiple of 4
layout(constant_id = 8) const bool A_HEADS = false;  // read A (B·T, H·d) from (B, H, T, d)
layout(constant_id = 9) const bool PACKED_B = false; // broadcast, B (N, K): B as gemm_pack wrote it
layout(constant_id = 10) const uint DEPTH = 16;      // shared: k per shared tile, a multiple of 4
layout(constant_id = 11) const uint B_FORMAT = 0u;   // B stored float32 (0), float16 (1) or bfloat16
                                                     // (2, sixteen_bit.glsl)
layout(constant_id = 12) const uint ACTIVATION = 0u; // the folded activation's number, or 0
layout(constant_id = 13) const bool RESIDUAL = false; // add residual[at] (RESIDUAL_BINDING)
const uint ROW_SETS = (TILE_M + LANES - 1u) / LANES;  // broadcast: rows of A each lane loads

#ifdef TEXEL_INPUTS
layout(binding = 0) uniform textureBuffer a_texels;
vec4 a4_at(uint at) { return texelFetch(a_texels, int(at)); }
float a_at(uint at) { return texelFetch(a_texels, int(at / 4u))[at % 4u]; }
#ifdef B_WORDS
// B kept 16-bit (B_FORMAT 1 or 2) as RG32UI texels: two words, four elements, a texel
layout(binding = 1) uniform utextureBuffer b_words;
vec4 b4_at(uint at) {
  uvec2 words = texelFetch(b_words, int(at)).xy;
  return vec4(widen_pair(words.x, B_FORMAT), widen_pair(words.y, B_FORMAT));
}
float b_at(uint at) { return widen(texelFetch(b_words, int(at / 4u))[at / 2u % 2u], at % 2u, B_FORMAT); }
#else
layout(binding = 1) uniform textureBuffer b_texels;
vec4 b4_at(uint at) { return texelFetch(b_texels, int(at)); }
float b_at(uint at) { return texelFetch(b_texels, int(at / 4u))[at % 4u]; }
#endif
#else
#include "gemm_storage.glsl"
#endif
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
#ifdef RESIDUAL_BINDING
layout(std430, binding = 3) readonly buffer Residual { float residual[]; };
layout(std430, binding = 4) writeonly buffer Output { float c[]; };
#else
layout(std430, binding = 3) writeonly buffer Output { float c[]; };
#endif

layout(push_constant) uniform Params {
  uint batch;   // n
  uint rows;    // M
  uint cols;    // N
  uint inner;   // K
  float scale;  // 1 for linear, 1/√d for attention_scores
  uint group;   // items of A per item of B: H / H_kv for attention, 1 for linear
  uint heads;   // H where A_HEADS or C_HEADS, else unused
  uint tokens;  // T where A_HEADS or C_HEADS, else unused
} p;

#include "heads_index.glsl"

// A[n, i, k] lies at a_row(n, i) + a_col(k)
uint a_row(uint n, uint i) { return A_HEADS ? heads_row(i, p.inner) : (n * p.rows + i) * p.inner; }
uint a_col(uint k) { return A_HEADS ? heads_col(k, p.inner) : k; }

// A[n, i, k..k+3] (zeros past K), row_at = a_row(n, i)
vec4 load_a(uint row_at, uint k) {
  if (VEC4) return a4_at((row_at + a_col(k)) / 4u);
  vec4 v = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (k + t < p.inner) v[t] = a_at(row_at + a_col(k + t));
  }
  return v;
}

#ifdef B_IS_K_BY_N
// B stored (K, N): B[n, k, j..j+3] (zeros past K or N)
vec4 load_b_row(uint n, uint k, uint j) {
  uint at = (n / p.group * p.inner + k) * p.cols + j;
  if (VEC4) return k < p.inner ? b4_at(at / 4u) : vec4(0.0);
  vec4 v = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (k < p.inner && j + t < p.cols) v[t] = b_at(at + t);
  }
  return v;
}
#else
// B stored (N, K): B[n, j, k..k+3] (zeros past K)
vec4 load_b_col(uint n, uint j, uint k) {
  uint at = (n / p.group * p.cols + j) * p.inner + k;
  if (VEC4) return b4_at(at / 4u);
  vec4 v = vec4(0.0);
  for (uint t = 0u; t < 4u; ++t) {
    if (k + t < p.inner) v[t] = b_at(at + t);
  }
  return v;
}
#endif

// C[n, i, j] = activate(scale · value (+ bias[j])) (+ residual[at]) at `at`; nothing past the
// edge. `at` is (n·M + i)·N + j, or with C_HEADS heads_row(i, N) + heads_col(j, N). The callers
// write the plain index out at each store, cheaper than a row part plus a column part; with d a
// multiple of 4 the heads index is a quad's start + t (C_HEADS = 4), so a folded projection costs
// what a plain one does (docs/lavapipe.md, "The measurements behind the plans").
void store_c(uint i, uint j, uint at, float value) {
  if (i >= p.rows || j >= p.cols) return;
  value *= p.scale;
  if (HAS_BIAS) value += bias[j];
  if (ACTIVATION != 0u) value = activate(ACTIVATION, value);
#ifdef RESIDUAL_BINDING
  if (RESIDUAL) value += residual[at];
#endif
  c[at] = value;
}

#ifdef SUBGROUPS
// ---- subgroup broadcast -------------------------------------------------------------------------

void gemm_broadcast() {
  // one unit of work per subgroup: (n, row block, column block), column blocks fastest so that
  // neighbouring subgroups share rows of A in cache
  const uint block_cols = LANES * TILE_N;
  uint row_blocks = (p.rows + TILE_M - 1u) / TILE_M;
  uint col_blocks = (p.cols + block_cols - 1u) / block_cols;
  uint unit = flat_workgroup_id() * gl_NumSubgroups + gl_SubgroupID;
  if (unit >= p.batch * row_blocks * col_blocks) return;  // uniform per subgroup
  uint n = unit / (row_blocks * col_blocks);
  uint i0 = (unit / col_blocks) % row_blocks * TILE_M;
  uint j0 = unit % col_blocks * block_cols + gl_SubgroupInvocationID * TILE_N;
  uint my_rows[ROW_SETS];  // where the rows of A this lane loads start: i0 + lane, i0 + LANES + lane, …
  UNROLL for (uint s = 0u; s < ROW_SETS; ++s) my_rows[s] = a_row(n, min(i0 + s * LANES + gl_SubgroupInvocationID, p.rows - 1u));

#ifndef B_IS_K_BY_N
  // PACKED_B: where this lane's B for the first four k lies (shaders/gemm_pack.comp), a pass
  // block_cols vec4s on
  uint packed_at = ((n / p.group * col_blocks + unit % col_blocks) * ((p.inner + 3u) / 4u)) * block_cols +
                   gl_SubgroupInvocationID * TILE_N;
#endif
  vec4 acc[TILE_M][TILE_N / 4u];
  UNROLL for (uint r = 0u; r < TILE_M; ++r) {
    UNROLL for (uint q = 0u; q < TILE_N / 4u; ++q) acc[r][q] = vec4(0.0);
  }
  for (uint k = 0u; k < p.inner; k += 4u) {
    vec4 mine[ROW_SETS];
    UNROLL for (uint s = 0u; s < ROW_SETS; ++s) mine[s] = load_a(my_rows[s], k);
#ifdef B_IS_K_BY_N
    vec4 bk[4][TILE_N / 4u];  // B[k + t, j0 + 4q .. + 3]
    UNROLL for (uint t = 0u; t < 4u; ++t) {
      UNROLL for (uint q = 0u; q < TILE_N / 4u; ++q) bk[t][q] = load_b_row(n, k + t, min(j0 + 4u * q, p.cols - 1u));
    }
    UNROLL for (uint r = 0u; r < TILE_M; ++r) {
      vec4 ar = subgroupShuffle(mine[r / LANES], r % LANES);  // A[n, i0 + r, k..k+3]
      UNROLL for (uint q = 0u; q < TILE_N / 4u; ++q) {
        acc[r][q] += ar.x * bk[0][q] + ar.y * bk[1][q] + ar.z * bk[2][q] + ar.w * bk[3][q];
      }
    }
#else
    vec4 bj[TILE_N];  // B[n, j0 + j, k..k+3]
    UNROLL for (uint j = 0u; j < TILE_N; ++j) {
      bj[j] = PACKED_B ? b4_at(packed_at + j) : load_b_col(n, min(j0 + j, p.cols - 1u), k);
    }
    packed_at += block_cols;
    UNROLL for (uint r = 0u; r < TILE_M; ++r) {
      vec4 ar = subgroupShuffle(mine[r / LANES], r % LANES);
      UNROLL for (uint q = 0u; q < TILE_N / 4u; ++q) {
        acc[r][q] += vec4(dot(ar, bj[4u * q]), dot(ar, bj[4u * q + 1u]), dot(ar, bj[4u * q + 2u]),
                          dot(ar, bj[4u * q + 3u]));
      }
    }
#endif
  }
  // C_HEADS: heads_col of this lane's columns; with C_HEADS = 4 of each quad's first (a quad
  // starts on a multiple of 4, so with d one too its four columns lie in one head, in a row)
  uint cols_at[TILE_N];
  UNROLL for (uint j = 0u; j < TILE_N; ++j) {
    cols_at[j] = C_HEADS == 1u || (C_HEADS == 4u && j % 4u == 0u) ? heads_col(min(j0 + j, p.cols - 1u), p.cols) : 0u;
  }
  UNROLL for (uint r = 0u; r < TILE_M; ++r) {
    uint i = i0 + r, row_at = C_HEADS != 0u ? heads_row(min(i, p.rows - 1u), p.cols) : 0u;
    UNROLL for (uint q = 0u; q < TILE_N / 4u; ++q) {
      UNROLL for (uint t = 0u; t < 4u; ++t) {
        uint j = j0 + 4u * q + t;
        uint at = C_HEADS == 4u   ? row_at + cols_at[4u * q] + t
                  : C_HEADS == 1u ? row_at + cols_at[4u * q + t]
                                  : (n * p.rows + i) * p.cols + j;
        store_c(i, j, at, acc[r][q][t]);
      }
    }
  }
}

#else
// ---- a block of C a workgroup: shared-memory tiles, or float16 products on cooperative matrices -
#ifdef COOPMAT
// A workgroup of SUBGROUPS_M × SUBGROUPS_N = 2 × 4 subgroups of LANES lanes owns a BLOCK_M × BLOCK_N
// block of C, a subgroup the (MATRIX_M·TILE_M) × (MATRIX_N·TILE_N) part at (sm, sn) = (id / 4,
// id % 4): TILE_M × TILE_N (4 × 2) accumulators of MATRIX_M × MATRIX_N float32, each a sum of
// products of float16 matrices of MATRIX_M × MATRIX_K and MATRIX_K × MATRIX_N (a subgroup's): a
// block of 128 × 128 at 16 × 16, as NVIDIA's own cooperative-matrix GEMM shapes it, and 64
// registers of accumulators a lane (four subgroups of 4 × 4 held 128 and 32 of fragments beside
// the 64 of float32 loads in flight: by that count near a lane's 255, where a compiler spills).
// A and B are rounded to float16 as they are stashed, each quad where fetch_a and fetch_b number
// it, four float16 in one 64-bit store, half of a uvec4 (matrices.glsl's STASH): A's tile
// row-major (i, k), B's (j, k) where B is stored (N, K), read by the cooperative loads as B
// column-major, and (k, j) where it is stored (K, N), read row-major. The loads take the tiles as
// uvec4s, eight float16 each (offsets and strides in uvec4s), so that every row starts on 16
// bytes. The results go through the A tiles, free once K is walked, a MATRIX_M ×
// MATRIX_N float32 tile a subgroup, to store_c (bias, scale, C_HEADS, edges), one accumulator at
// a time. DEPTH is a multiple of MATRIX_K; MATRIX_M, MATRIX_N and MATRIX_K of 8
// (vulkan::MatrixProducts::shapes_fit).
const uint SUBGROUPS_M = 2u, SUBGROUPS_N = 4u, INVOCATIONS = SUBGROUPS_M * SUBGROUPS_N * LANES;
const uint BLOCK_M = SUBGROUPS_M * MATRIX_M * TILE_M, BLOCK_N = SUBGROUPS_N * MATRIX_N * TILE_N;
#else
// A workgroup of SIDE² invocations owns a BLOCK_M × BLOCK_N block of C; invocation (ti, tj) the
// TILE_M × TILE_N outputs at rows 4·ti + 4·SIDE·qa + r, columns 4·tj + 4·SIDE·qb + t (quads SIDE
// apart, so that a subgroup's reads of a k row of the tiles are neighbouring vec4s).
const uint BLOCK_M = SIDE * TILE_M, BLOCK_N = SIDE * TILE_N;
const uint QUADS_M = TILE_M / 4u, QUADS_N = TILE_N / 4u;  // vec4s of A and of B an invocation reads per k
const uint INVOCATIONS = SIDE * SIDE;
#endif
// Either way K is walked DEPTH at a time through two tiles of each input in shared memory: while
// the workgroup computes on one, its loads of the next are in flight (one barrier a step).
// vec4s of each tile and how many each invocation loads
const uint A_QUADS = BLOCK_M * DEPTH / 4u, B_QUADS = BLOCK_N * DEPTH / 4u;
const uint A_LOADS = (A_QUADS + INVOCATIONS - 1u) / INVOCATIONS, B_LOADS = (B_QUADS + INVOCATIONS - 1u) / INVOCATIONS;

#ifdef COOPMAT
// The two tiles of each input one after the other (the cooperative loads take a plain array), each
// row PAD float16 longer than its data (matrices.glsl; at DEPTH 32 a row of 64 bytes becomes 80):
// vulkan::MatrixProducts::shared_bytes counts it.
const uint A_STRIDE = (DEPTH + PAD) / HALVES;  // tile_a[s·A_TILE + i·A_STRIDE + k / 8] holds A[n, i0 + i, k0 + k]
const uint A_TILE = BLOCK_M * A_STRIDE;
#ifdef B_IS_K_BY_N
const uint B_STRIDE = (BLOCK_N + PAD) / HALVES;  // tile_b[s·B_TILE + k·B_STRIDE + j / 8]: B(n, k0 + k, j0 + j)
const uint B_TILE = DEPTH * B_STRIDE;
const uint B_ROW_QUADS = BLOCK_N / 4u;  // quads of a row of the tile
#else
const uint B_STRIDE = (DEPTH + PAD) / HALVES;  // tile_b[s·B_TILE + j·B_STRIDE + k / 8]: B(n, k0 + k, j0 + j)
const uint B_TILE = BLOCK_N * B_STRIDE;
const uint B_ROW_QUADS = DEPTH / 4u;
#endif
shared uvec4 tile_a[2u * A_TILE];
shared uvec4 tile_b[2u * B_TILE];

// Quad `e` of either tile (fetch_a's, fetch_b's) at its row e / (quads a row) and its place in
// the row: half of a uvec4
void stash_a(uint s, uint e, vec4 v) {
  if (e >= A_QUADS) return;
  uint q = e % (DEPTH / 4u), at = s * A_TILE + e / (DEPTH / 4u) * A_STRIDE + q / 2u;
  STASH(tile_a, at, q, v);
}
void stash_b(uint s, uint e, vec4 v) {
  if (e >= B_QUADS) return;
  uint q = e % B_ROW_QUADS, at = s * B_TILE + e / B_ROW_QUADS * B_STRIDE + q / 2u;
  STASH(tile_b, at, q, v);
}
#else
shared vec4 tile_a[2][DEPTH][BLOCK_M / 4u];  // tile_a[s][k][i / 4][i % 4] = A[n, i0 + i, k0 + k]
shared vec4 tile_b[2][DEPTH][BLOCK_N / 4u];  // tile_b[s][k][j / 4][j % 4] = B(n, k0 + k, j0 + j)

void stash_a(uint s, uint e, vec4 v) {
  if (e >= A_QUADS) return;
  uint i = e / (DEPTH / 4u), k = e % (DEPTH / 4u) * 4u;
  for (uint t = 0u; t < 4u; ++t) tile_a[s][k + t][i / 4u][i % 4u] = v[t];
}
#ifdef B_IS_K_BY_N
void stash_b(uint s, uint e, vec4 v) {
  if (e < B_QUADS) tile_b[s][e / (BLOCK_N / 4u)][e % (BLOCK_N / 4u)] = v;
}
#else
void stash_b(uint s, uint e, vec4 v) {
  if (e >= B_QUADS) return;
  uint j = e / (DEPTH / 4u), k = e % (DEPTH / 4u) * 4u;
  for (uint t = 0u; t < 4u; ++t) tile_b[s][k + t][j / 4u][j % 4u] = v[t];
}
#endif
#endif

// Quad `e` of the A tile at k0: A[n, i0 + row, k0 + 4·kq .. + 3], row = e / (DEPTH / 4): a row's
// DEPTH k are neighbouring lanes' loads
vec4 fetch_a(uint n, uint i0, uint k0, uint e) {
  uint k = k0 + e % (DEPTH / 4u) * 4u;
  if (e >= A_QUADS || (VEC4 && k >= p.inner)) return vec4(0.0);
  return load_a(a_row(n, min(i0 + e / (DEPTH / 4u), p.rows - 1u)), k);
}

#ifdef B_IS_K_BY_N
// Quad `e` of the B tile: B[n, k0 + kb, j0 + 4·jq .. + 3], kb = e / (BLOCK_N / 4): a k row's
// columns are neighbouring lanes' loads
vec4 fetch_b(uint n, uint j0, uint k0, uint e) {
  uint k = k0 + e / (BLOCK_N / 4u);
  if (e >= B_QUADS || k >= p.inner) return vec4(0.0);
  return load_b_row(n, k, min(j0 + e % (BLOCK_N / 4u) * 4u, (p.cols - 1u) & ~3u));
}
#else
// Quad `e` of the B tile: B[n, j0 + col, k0 + 4·kq .. + 3], as A's
vec4 fetch_b(uint n, uint j0, uint k0, uint e) {
  uint k = k0 + e % (DEPTH / 4u) * 4u;
  if (e >= B_QUADS || (VEC4 && k >= p.inner)) return vec4(0.0);
  return load_b_col(n, min(j0 + e / (DEPTH / 4u), p.cols - 1u), k);
}
#endif

// This workgroup's block: batch item n, first row i0 and column j0; false past the grid (uniform
// per workgroup)
bool block_origin(out uint n, out uint i0, out uint j0) {
  uint row_blocks = (p.rows + BLOCK_M - 1u) / BLOCK_M;
  uint col_blocks = (p.cols + BLOCK_N - 1u) / BLOCK_N;
  uint unit = flat_workgroup_id();
  n = unit / (row_blocks * col_blocks);
  i0 = (unit / col_blocks) % row_blocks * BLOCK_M;
  j0 = unit % col_blocks * BLOCK_N;
  return unit < p.batch * row_blocks * col_blocks;
}

// The tiles at k0 into registers (this invocation's quads), and from there into tiles s
void fetch_tiles(uint n, uint i0, uint j0, uint k0, out vec4 next_a[A_LOADS], out vec4 next_b[B_LOADS]) {
  uint lane = gl_LocalInvocationID.x;
  for (uint l = 0u; l < A_LOADS; ++l) next_a[l] = fetch_a(n, i0, k0, lane + l * INVOCATIONS);
  for (uint l = 0u; l < B_LOADS; ++l) next_b[l] = fetch_b(n, j0, k0, lane + l * INVOCATIONS);
}
void stash_tiles(uint s, vec4 next_a[A_LOADS], vec4 next_b[B_LOADS]) {
  uint lane = gl_LocalInvocationID.x;
  for (uint l = 0u; l < A_LOADS; ++l) stash_a(s, lane + l * INVOCATIONS, next_a[l]);
  for (uint l = 0u; l < B_LOADS; ++l) stash_b(s, lane + l * INVOCATIONS, next_b[l]);
}

#ifdef COOPMAT
void gemm_coopmat() {
  uint n, i0, j0;
  if (!block_origin(n, i0, j0)) return;
  uint sm = gl_SubgroupID / SUBGROUPS_N, sn = gl_SubgroupID % SUBGROUPS_N;

  MATRIX_C acc[TILE_M][TILE_N];
  [[unroll]] for (uint r = 0u; r < TILE_M; ++r) {
    [[unroll]] for (uint q = 0u; q < TILE_N; ++q) acc[r][q] = MATRIX_C(0.0);
  }
  vec4 next_a[A_LOADS], next_b[B_LOADS];  // the next tiles' quads, loaded while computing
  fetch_tiles(n, i0, j0, 0u, next_a, next_b);
  stash_tiles(0u, next_a, next_b);
  barrier();
  uint s = 0u;
  for (uint k0 = 0u; k0 < p.inner; k0 += DEPTH) {
    bool more = k0 + DEPTH < p.inner;  // uniform
    if (more) fetch_tiles(n, i0, j0, k0 + DEPTH, next_a, next_b);
    [[unroll]] for (uint kk = 0u; kk < DEPTH; kk += MATRIX_K) {
      MATRIX_A a[TILE_M];
      MATRIX_B b[TILE_N];
      [[unroll]] for (uint r = 0u; r < TILE_M; ++r) {
        LOAD_ROWS(a[r], tile_a, s * A_TILE + (sm * TILE_M + r) * MATRIX_M * A_STRIDE + kk / HALVES, A_STRIDE);
      }
      [[unroll]] for (uint q = 0u; q < TILE_N; ++q) {
#ifdef B_IS_K_BY_N
        LOAD_ROWS(b[q], tile_b, s * B_TILE + kk * B_STRIDE + (sn * TILE_N + q) * MATRIX_N / HALVES, B_STRIDE);
#else
        LOAD_COLUMNS(b[q], tile_b, s * B_TILE + (sn * TILE_N + q) * MATRIX_N * B_STRIDE + kk / HALVES, B_STRIDE);
#endif
      }
      [[unroll]] for (uint r = 0u; r < TILE_M; ++r) {
        [[unroll]] for (uint q = 0u; q < TILE_N; ++q) acc[r][q] = MULTIPLY_ADD(a[r], b[q], acc[r][q]);
      }
    }
    // the other tiles were last read before the previous step's barrier: free to overwrite
    if (more) stash_tiles(s ^ 1u, next_a, next_b);
    barrier();
    s ^= 1u;
  }
  // each accumulator through the subgroup's MATRIX_M × MATRIX_N floats of the A tiles (every
  // subgroup has read them last before the loop's final barrier) to store_c
  const uint area = MATRIX_M * MATRIX_N;
  uint mine = gl_SubgroupID * area / 4u;  // in uvec4s, four floats each
  [[unroll]] for (uint r = 0u; r < TILE_M; ++r) {
    [[unroll]] for (uint q = 0u; q < TILE_N; ++q) {
      STORE_ROWS(acc[r][q], tile_a, mine, MATRIX_N / 4u);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = gl_SubgroupInvocationID; e < area; e += gl_SubgroupSize) {
        uint i = i0 + (sm * TILE_M + r) * MATRIX_M + e / MATRIX_N;
        uint j = j0 + (sn * TILE_N + q) * MATRIX_N + e % MATRIX_N;
        uint at = C_HEADS != 0u ? heads_row(min(i, p.rows - 1u), p.cols) + heads_col(min(j, p.cols - 1u), p.cols)
                                : (n * p.rows + i) * p.cols + j;
        store_c(i, j, at, uintBitsToFloat(tile_a[mine + e / 4u][e % 4u]));
      }
      subgroupBarrier();  // read before the next accumulator overwrites it
    }
  }
}

#else
void gemm_shared() {
  uint n, i0, j0;
  if (!block_origin(n, i0, j0)) return;
  uint lane = gl_LocalInvocationID.x;
  uint ti = lane / SIDE, tj = lane % SIDE;

  vec4 acc[TILE_M][QUADS_N];  // acc[4·qa + r][qb] = C[n, i0 + 4·(ti + SIDE·qa) + r, j0 + 4·(tj + SIDE·qb) .. + 3]
  for (uint r = 0u; r < TILE_M; ++r) {
    for (uint q = 0u; q < QUADS_N; ++q) acc[r][q] = vec4(0.0);
  }
  vec4 next_a[A_LOADS], next_b[B_LOADS];  // the next tiles' quads, loaded while computing
  fetch_tiles(n, i0, j0, 0u, next_a, next_b);
  stash_tiles(0u, next_a, next_b);
  barrier();
  uint s = 0u;
  for (uint k0 = 0u; k0 < p.inner; k0 += DEPTH) {
    bool more = k0 + DEPTH < p.inner;  // uniform
    if (more) fetch_tiles(n, i0, j0, k0 + DEPTH, next_a, next_b);
    for (uint kk = 0u; kk < DEPTH; ++kk) {
      vec4 av[QUADS_M], bv[QUADS_N];
      for (uint q = 0u; q < QUADS_M; ++q) av[q] = tile_a[s][kk][ti + SIDE * q];
      for (uint q = 0u; q < QUADS_N; ++q) bv[q] = tile_b[s][kk][tj + SIDE * q];
      for (uint r = 0u; r < TILE_M; ++r) {
        float x = av[r / 4u][r % 4u];
        for (uint q = 0u; q < QUADS_N; ++q) acc[r][q] += x * bv[q];
      }
    }
    // the other tiles were last read before the previous step's barrier: free to overwrite
    if (more) stash_tiles(s ^ 1u, next_a, next_b);
    barrier();
    s ^= 1u;
  }
  for (uint r = 0u; r < TILE_M; ++r) {
    uint i = i0 + 4u * (ti + SIDE * (r / 4u)) + r % 4u;
    for (uint q = 0u; q < QUADS_N; ++q) {
      for (uint t = 0u; t < 4u; ++t) {
        uint j = j0 + 4u * (tj + SIDE * q) + t;
        uint at = C_HEADS != 0u ? heads_row(min(i, p.rows - 1u), p.cols) + heads_col(min(j, p.cols - 1u), p.cols)
                                : (n * p.rows + i) * p.cols + j;
        store_c(i, j, at, acc[r][q][t]);
      }
    }
  }
}
#endif

#endif

void main() {
#ifdef SUBGROUPS
  gemm_broadcast();
#elif defined(COOPMAT)
  gemm_coopmat();
#else
  gemm_shared();
#endif
}
