// Cooperative matrices for the COOPMAT builds (gemm.glsl, flash_attention.comp): float16 A
// (MATRIX_M × MATRIX_K) and B (MATRIX_K × MATRIX_N) into float32 C (MATRIX_M × MATRIX_N), a
// subgroup's, on Khronos's extension (COOPMAT_KHR: the device's sizes, constants 14–16) or on
// NVIDIA's (16 × 16 × 16). The including shader enables the extensions. Loads and stores take
// their offset and stride in the array's elements: the float16 tiles in shared memory are uvec4s
// of HALVES float16 each (vulkan::MatrixProducts::shapes_fit: sizes of 8), so that every row
// starts on 16 bytes.
#ifdef COOPMAT_KHR
layout(constant_id = 14) const uint MATRIX_M = 16u;
layout(constant_id = 15) const uint MATRIX_N = 16u;
layout(constant_id = 16) const uint MATRIX_K = 16u;
#define MATRIX_A coopmat<float16_t, gl_ScopeSubgroup, MATRIX_M, MATRIX_K, gl_MatrixUseA>
#define MATRIX_B coopmat<float16_t, gl_ScopeSubgroup, MATRIX_K, MATRIX_N, gl_MatrixUseB>
#define MATRIX_C coopmat<float, gl_ScopeSubgroup, MATRIX_M, MATRIX_N, gl_MatrixUseAccumulator>
#define LOAD_ROWS(m, tile, at, stride) coopMatLoad(m, tile, at, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_COLUMNS(m, tile, at, stride) coopMatLoad(m, tile, at, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define STORE_ROWS(m, tile, at, stride) coopMatStore(m, tile, at, stride, gl_CooperativeMatrixLayoutRowMajor)
#define MULTIPLY_ADD coopMatMulAdd
#else
const uint MATRIX_M = 16u, MATRIX_N = 16u, MATRIX_K = 16u;
#define MATRIX_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MATRIX_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MATRIX_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define LOAD_ROWS(m, tile, at, stride) coopMatLoadNV(m, tile, at, stride, false)
#define LOAD_COLUMNS(m, tile, at, stride) coopMatLoadNV(m, tile, at, stride, true)
#define STORE_ROWS(m, tile, at, stride) coopMatStoreNV(m, tile, at, stride, false)
#define MULTIPLY_ADD coopMatMulAddNV
#endif
const uint HALVES = 8u;  // float16 a uvec4
// Float16 rows in shared memory are PAD float16 longer than their data: 8 successive rows of 64
// bytes would fall on the same banks every other row; 80 bytes apart they cover every bank once.
const uint PAD = 8u;

// A quad rounded to float16, the first in the low bits (a uvec4's halves in order)
uvec2 halves(vec4 v) { return uvec2(packFloat2x16(f16vec2(v.xy)), packFloat2x16(f16vec2(v.zw))); }
// Quad `quad` of a row, rounded to float16, into the uvec4 tile[at] that holds it and its
// neighbour: the low half for an even quad, the high for an odd one (one statement, safe after
// an unbraced if)
#define STASH(tile, at, quad, v) \
  do { \
    if ((quad) % 2u == 0u) tile[at].xy = halves(v); \
    else tile[at].zw = halves(v); \
  } while (false)
