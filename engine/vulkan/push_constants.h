#pragma once
// The push-constant blocks of shaders/*.comp, mirrored field for field (std430: every field
// here is a 4-byte scalar, so C++ and GLSL agree on offsets). Keep each in step with its shader.
#include <glm/glm.hpp>

namespace vkattn::vulkan {

struct GemmParams {  // shaders/gemm.glsl: linear, attention_scores, attention_values
  glm::uint batch;    // 1 for linear, B·H for attention
  glm::uint rows;     // M
  glm::uint cols;     // N
  glm::uint inner;    // K
  float scale;        // 1, or 1/√d for attention_scores
  glm::uint group;    // items of A per item of B: H / H_kv for attention, 1 for linear
  glm::uint heads;    // linear with a layout step folded in: H of the (B, H, T, d) side, else 0
  glm::uint tokens;   //   and its T
};

struct GemmPackParams {  // shaders/gemm_pack.comp (its workgroup: lanes · tile_n)
  glm::uint count;        // vec4s written
  glm::uint cols;         // N
  glm::uint inner4;       // K / 4
};

struct PeakFlopsParams {  // shaders/peak_flops.comp
  glm::uint count;         // invocations
  glm::uint iterations;    // multiply-adds of each of the 8 vec4 chains
  float multiplier;
  float addend;
};

struct PeakBytesParams {  // shaders/peak_bytes.comp
  glm::uint count;        // invocations
  glm::uint per;          // vec4s each copies
};

struct HeadsParams {   // shaders/split_heads.comp, shaders/merge_heads.comp
  glm::uint batch;     // B
  glm::uint heads;     // H
  glm::uint tokens;    // T
  glm::uint head_dim;  // d
  glm::uint chunks;    // split_heads: n tensors side by side in x's rows (3: the packed in_proj)
  glm::uint chunk;     // split_heads: the one split out; merge_heads: 1 and 0
};

struct AppendRowParams {  // shaders/append_row.comp
  glm::uint batch;        // N
  glm::uint tokens;       // T of the input
  glm::uint channels;     // C
};

struct FlashAttentionParams {        // shaders/flash_attention.comp
  glm::uint batch;                   // B
  glm::uint heads;                   // H
  glm::uint rows;                    // L
  glm::uint cols;                    // S
  float scale;                       // 1/√d
  glm::uint attn_mask_rank;          // 0, 2 or 3
  glm::uint has_key_padding_mask;    // 0 or 1
  glm::uint causal;                  // 0 or 1
  glm::uint window;                  // 0, or the causal window W
  glm::uint group;                   // query heads per key/value head: H / H_kv
  glm::uint first_group = 0;         // the first workgroup of this submission's part of the grid
};

struct KvCacheAppendParams {  // shaders/kv_cache_append.comp
  glm::uint batch;            // N = B·H
  glm::uint tokens;           // T
  glm::uint capacity;         // C
  glm::uint head_dim;         // d
  glm::uint position;         // the first row written
};

struct FlashDecodingParams {       // shaders/flash_decoding.comp
  glm::uint batch;                 // B
  glm::uint heads;                 // H
  glm::uint rows;                  // L
  glm::uint capacity;              // C
  glm::uint keys;                  // S: the cache rows attended to
  glm::uint parts;                 // P
  float scale;                     // 1/√d
  glm::uint has_key_padding_mask;  // 0 or 1
  glm::uint causal;                // 0 or 1
  glm::uint window;                // 0, or the causal window W
  glm::uint group;                 // query heads per key/value head: H / H_kv
};

struct AttentionCombineParams {  // shaders/attention_combine.comp
  glm::uint rows;                // R = B·H·L
  glm::uint parts;               // P
  glm::uint head_dim;            // d
};

struct AttentionMaskParams {         // shaders/attention_mask.comp
  glm::uint batch;                   // B
  glm::uint heads;                   // H
  glm::uint rows;                    // L
  glm::uint cols;                    // S
  glm::uint attn_mask_rank;          // 0, 2 or 3
  glm::uint has_key_padding_mask;    // 0 or 1
  glm::uint causal;                  // 0 or 1
  glm::uint window;                  // 0, or the causal window W
};

struct SoftmaxParams {  // shaders/softmax.comp
  glm::uint rows;       // R
  glm::uint cols;       // S
};

struct AverageHeadsParams {  // shaders/average_heads.comp
  glm::uint batch;           // B
  glm::uint heads;           // H
  glm::uint plane;           // L·S
};

struct LayerNormParams {  // shaders/layer_norm.comp, shaders/rms_norm.comp
  glm::uint rows;         // N
  glm::uint cols;         // E
  float eps;
};

struct ElementwiseParams {  // shaders/unary.glsl (gelu, gelu_tanh, relu, silu), residual_add.comp, multiply.comp
  glm::uint count;          // n
};

struct EmbeddingParams {  // shaders/embedding.comp
  glm::uint tokens;       // N = B·T
  glm::uint vocab;        // V
  glm::uint dim;          // E
  float scale;            // each row times it (Gemma's √E; 1 elsewhere)
};

struct PositionalEncodingParams {  // shaders/positional_encoding.comp
  glm::uint count;                 // B·T·E
  glm::uint period;                // T·E
};

struct RotaryEmbeddingParams {  // shaders/rotary_embedding.comp
  glm::uint count;              // N·T·d
  glm::uint tokens;             // T
  glm::uint dim;                // d
  glm::uint rotary_dims;        // r, even, <= d
  glm::uint pairs;              // 1: pairs (2i, 2i + 1); 0: halves (i, i + r/2)
};

struct MeanPoolParams {  // shaders/mean_pool.comp, first_token.comp
  glm::uint batch;       // B
  glm::uint tokens;      // T
  glm::uint dim;         // E
};

struct LastTokensParams {  // shaders/last_tokens.comp
  glm::uint batch;         // B
  glm::uint tokens;        // T
  glm::uint kept;          // n, 1 <= n <= T
  glm::uint dim;           // E
};

static_assert(sizeof(GemmParams) == 32 && sizeof(GemmPackParams) == 12 && sizeof(PeakFlopsParams) == 16);
static_assert(sizeof(PeakBytesParams) == 8);
static_assert(sizeof(HeadsParams) == 24 && sizeof(AppendRowParams) == 12);
static_assert(sizeof(AttentionMaskParams) == 32 && sizeof(FlashAttentionParams) == 44);
static_assert(sizeof(KvCacheAppendParams) == 20 && sizeof(FlashDecodingParams) == 44);
static_assert(sizeof(AttentionCombineParams) == 12 && sizeof(RotaryEmbeddingParams) == 20);
static_assert(sizeof(SoftmaxParams) == 8 && sizeof(AverageHeadsParams) == 12);
static_assert(sizeof(LayerNormParams) == 12 && sizeof(ElementwiseParams) == 4 && sizeof(EmbeddingParams) == 16);
static_assert(sizeof(PositionalEncodingParams) == 8 && sizeof(MeanPoolParams) == 12);

}  // namespace vkattn::vulkan
