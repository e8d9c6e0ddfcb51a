// linear for a few rows — a decode step's projections, N = B·T ≤ ROWS (linear.comp's _gemv build):
//   y[n, m] = Σ_k x[n, k] · W[m, k] (+ bias[m])
//   x (N, K) row-major;  W (M, K), PyTorch's Linear.weight;  y (N, M)
// The GEMM's tilings (gemm.glsl) give a GPU's workgroup a 128 × 128 block of y: for one row, a
// handful of workgroups, each walking all of K alone through shared tiles, and the GPU idles. Here
// a workgroup owns COLUMNS = workgroup size / LANES_PER_COLUMN columns of y; the LANES_PER_COLUMN
// invocations of a column read its row of W side by side (neighbouring vec4s: coalesced loads),
// each keeping every row's partial sum, and sum them through shared memory. W is read once; the
// few rows of x, from the cache. No subgroup instruction: any device runs it.
//
// VEC4 (constant 1): K a multiple of 4, x and W read as vec4. HAS_BIAS (2). B_FORMAT (3): W kept
// 16-bit (sixteen_bit.glsl), widened as it is read. ACTIVATION (4): as gemm.glsl's, the folded
// activation applied to each y[n, m] as it is stored (activations.glsl). RESIDUAL (5): the
// residual_add after it folded too, residual[n, m] added last. Bindings as gemm.glsl's with
// RESIDUAL_BINDING: 0 = x, 1 = W, 2 = bias, 3 = the residual, 4 = y; the push constants its
// Params, of which rows (N), cols (M) and inner (K).
// Layout steps folded, as gemm.glsl's (Backend::linear_split_heads, merge_heads_linear):
// C_HEADS (constant 6) stores y (B·T, H·d) as (B, H, T, d); A_HEADS (constant 7) reads x
// (B·T, H·d) from (B, H, T, d), its quads whole where d is a multiple of 4 (4), else element by
// element (1). Each lane sums the same products in the same order as for the plain layouts, so a
// folded step's numbers are the copying path's bit for bit.
#include "common.glsl"
#include "sixteen_bit.glsl"
#include "activations.glsl"

layout(constant_id = 1) const bool VEC4 = false;
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const uint B_FORMAT = 0u;  // W stored float32 (0), float16 (1), bfloat16 (2)
layout(constant_id = 4) const uint ACTIVATION = 0u;  // the folded activation's number, or 0
layout(constant_id = 5) const bool RESIDUAL = false;  // add residual[n, m]
layout(constant_id = 6) const bool C_HEADS = false;  // store y (B·T, H·d) as (B, H, T, d)
layout(constant_id = 7) const uint A_HEADS = 0u;     // read x (B·T, H·d) from (B, H, T, d): 4 or 1
// the most rows of x and the invocations a column: kGemvRows and kGemvLanesPerColumn of
// engine/vulkan/gemm_plan.h (32, a warp of NVIDIA's: 512 bytes of W a load of the column's lanes)
const uint ROWS = 8u;
const uint LANES_PER_COLUMN = 32u;

#include "gemm_storage.glsl"  // x as A, W as B
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) readonly buffer Residual { float residual[]; };
layout(std430, binding = 4) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint batch;   // 1
  uint rows;    // N ≤ ROWS
  uint cols;    // M
  uint inner;   // K
  float scale;  // 1
  uint group;   // 1
  uint heads;   // H where A_HEADS or C_HEADS, else unused
  uint tokens;  // T where A_HEADS or C_HEADS, else unused
} p;

#include "heads_index.glsl"

// x[n, k] lies at x_row(n) + x_col(k)
uint x_row(uint n) { return A_HEADS != 0u ? heads_row(n, p.inner) : n * p.inner; }
uint x_col(uint k) { return A_HEADS != 0u ? heads_col(k, p.inner) : k; }
// x[n, k..k+3], row_at = x_row(n), k a multiple of 4 (VEC4)
vec4 x_quad(uint row_at, uint k) {
  if (A_HEADS != 1u) return a4_at((row_at + x_col(k)) / 4u);
  return vec4(a_at(row_at + x_col(k)), a_at(row_at + x_col(k + 1u)), a_at(row_at + x_col(k + 2u)),
              a_at(row_at + x_col(k + 3u)));
}

shared float partial[ROWS][gl_WorkGroupSize.x];

void main() {
  const uint lane = gl_LocalInvocationID.x % LANES_PER_COLUMN;
  const uint column_base = gl_LocalInvocationID.x - lane;  // the column's first invocation
  const uint m = flat_workgroup_id() * (gl_WorkGroupSize.x / LANES_PER_COLUMN) + gl_LocalInvocationID.x / LANES_PER_COLUMN;
  float sum[ROWS];  // every row's, in registers: the loops over rows run to the constant ROWS
  uint row_at[ROWS];  // x_row of each row (a row past N: the last row's, never read)
  for (uint n = 0u; n < ROWS; ++n) {
    sum[n] = 0.0;
    row_at[n] = x_row(min(n, p.rows - 1u));
  }
  if (m < p.cols) {  // no return before the barriers: every invocation takes part
    if (VEC4) {
      const uint quads = p.inner / 4u;
      for (uint q = lane; q < quads; q += LANES_PER_COLUMN) {
        const vec4 wv = b4_at(m * quads + q);
        for (uint n = 0u; n < ROWS; ++n) {
          if (n < p.rows) sum[n] += dot(x_quad(row_at[n], 4u * q), wv);
        }
      }
    } else {
      for (uint k = lane; k < p.inner; k += LANES_PER_COLUMN) {
        const float wk = b_at(m * p.inner + k);
        for (uint n = 0u; n < ROWS; ++n) {
          if (n < p.rows) sum[n] += a_at(row_at[n] + x_col(k)) * wk;
        }
      }
    }
  }
  for (uint n = 0u; n < ROWS; ++n) partial[n][gl_LocalInvocationID.x] = sum[n];
  barrier();
  // the column's LANES_PER_COLUMN sums halved until one is left, at its first invocation
  for (uint half_width = LANES_PER_COLUMN / 2u; half_width > 0u; half_width /= 2u) {
    if (lane < half_width) {
      for (uint n = 0u; n < p.rows; ++n) {
        partial[n][gl_LocalInvocationID.x] += partial[n][gl_LocalInvocationID.x + half_width];
      }
    }
    barrier();
  }
  if (lane == 0u && m < p.cols) {
    for (uint n = 0u; n < p.rows; ++n) {
      float value = partial[n][column_base] + (HAS_BIAS ? bias[m] : 0.0);
      if (ACTIVATION != 0u) value = activate(ACTIVATION, value);
      const uint at = C_HEADS ? heads_row(n, p.cols) + heads_col(m, p.cols) : n * p.cols + m;
      if (RESIDUAL) value += residual[at];
      y[at] = value;
    }
  }
}
