#pragma once
// GroupedQueryAttention: the self-attention of Llama, Mistral, Qwen and Gemma — Hugging Face's
// LlamaAttention — as a recipe of steps written once over any Backend:
//   q_proj, k_proj, v_proj          x (B, T, E) -> (B, T, H·d), and (B, T, H_kv·d) twice
//   split_heads_q, _k, _v           -> q (B, H, T, d), k and v (B, H_kv, T, d)
//   q_norm, k_norm                  with qk_norm: each head's q and k RMS-normalised over d (Qwen3)
//   rotary_embedding_q, _k          q and k rotated by their positions (RoPE), p … p + T - 1
//   unfused: attention_scores, attention_mask, softmax, attention_values
//   fused:   flash_attention        causal, and with a sliding window only the last W keys
//   merge_heads, o_proj             -> (B, T, E)
// Each key/value head serves H / H_kv query heads (grouped-query attention; H_kv = 1 is
// multi-query attention): the steps index the shared head, K and V are never copied per query
// head, and a KVCache holds H_kv heads — H / H_kv times less memory than multi-head attention's.
//
// Differences from the 2017 block (MultiHeadAttention): no positions are added to the input —
// RoPE rotates q and k instead, so Q·Kᵀ depends on how far apart two positions are; separate
// q/k/v/o projections (no packed in_proj), their biases optional; self-attention only.
#include <cstdint>
#include <optional>
#include <string>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tensor.h"

namespace vkattn {

// Hugging Face's config.json names in the comments.
struct GroupedQueryAttentionConfig {
  int64_t hidden_size = 0;   // E: features in and out                   hidden_size
  int64_t num_heads = 0;     // H: query heads                           num_attention_heads
  int64_t num_kv_heads = 0;  // H_kv: key/value heads, dividing H; 0 = H num_key_value_heads
  int64_t head_dim = 0;      // d; 0 = E / H                             head_dim
  bool attention_bias = false;  // biases on q_proj, k_proj, v_proj      attention_bias (Qwen2: true)
  bool o_proj_bias = false;     // a bias on o_proj                      (Llama: = attention_bias)
  float rope_theta = 10000.0f;  // RoPE's base θ                         rope_theta
  RotaryConvention rope = RotaryConvention::half;  // which features pair up (checkpoints do not say)
  int64_t rotary_dims = 0;      // features of each head rotated; 0 = d  partial_rotary_factor · d
  RopeScaling rope_scaling;     // none, linear or llama3                rope_scaling
  bool causal = true;           // decoders are; false for an encoder's attention
  int64_t sliding_window = 0;   // W: each query sees the last W keys; 0 = all  sliding_window
  bool qk_norm = false;         // q_norm, k_norm: RMSNorm over each head's d features of q and k,
                                // before RoPE                            (Qwen3: q_norm, k_norm)
  float qk_norm_eps = 1e-6f;    // their eps                              rms_norm_eps

  int64_t kv_heads() const { return num_kv_heads ? num_kv_heads : num_heads; }
  int64_t dim() const { return head_dim ? head_dim : (num_heads ? hidden_size / num_heads : 0); }
};

// The parameters under Hugging Face's names (q_proj.weight, …, o_proj.weight).
struct GroupedQueryAttentionWeights {
  Tensor q_proj_weight;  // (H·d, E)
  Tensor k_proj_weight;  // (H_kv·d, E)
  Tensor v_proj_weight;  // (H_kv·d, E)
  Tensor o_proj_weight;  // (E, H·d)
  std::optional<Tensor> q_proj_bias, k_proj_bias, v_proj_bias;  // (H·d,), (H_kv·d,) ×2: attention_bias
  std::optional<Tensor> o_proj_bias;                            // (E,): o_proj_bias
  std::optional<Tensor> q_norm_weight, k_norm_weight;           // (d,) each: qk_norm

  // nn.Linear's initialisation, U(-1/√in, 1/√in), biases included, reproducibly from `seed` (the
  // q/k norms' weights ones, as Hugging Face's RMSNorm starts them);
  // ConfigError for a config GroupedQueryAttention would refuse.
  static GroupedQueryAttentionWeights random(const GroupedQueryAttentionConfig& config, uint32_t seed);
};

struct GroupedQueryOptions {
  std::optional<Tensor> key_padding_mask;  // (B, T) or (T,) unbatched: bool True = ignore key, float = added
  AttentionPath attention = AttentionPath::automatic;  // automatic: fused unless the weights are wanted
  bool need_weights = false;  // the attention weights (unfused): per head (B, H, T, T), as Hugging Face's
  bool average_attn_weights = false;  // or averaged over the heads (B, T, T), as nn.MultiheadAttention's
  int64_t position = 0;  // the position of x's first row: RoPE's offset
};

class GroupedQueryAttention : public KeepsWeights {
 public:
  // Validates the config (ConfigError: H_kv dividing H, d·H and the rotary dims) and the weights'
  // shapes (ShapeError naming the tensor); without weights, random ones (seed 0).
  explicit GroupedQueryAttention(GroupedQueryAttentionConfig config);
  GroupedQueryAttention(GroupedQueryAttentionConfig config, GroupedQueryAttentionWeights weights);

  const GroupedQueryAttentionConfig& config() const { return config_; }
  const GroupedQueryAttentionWeights& weights() const { return weights_; }

  // x (B, T, E) batch-first, or (T, E) unbatched -> like x. One traced pass
  // "grouped_query_attention"; with need_weights the weights too, without B when unbatched.
  AttentionResult forward(Backend& backend, const Tensor& x, const GroupedQueryOptions& options = {}) const;
  // The same pass on x already on `backend` (Backend::upload, or an earlier pass's output), its
  // output and weights left there, in x's layout: with the weights kept there (keep_weights_on)
  // only the mask crosses from the host. The checks are the host's but for x's values.
  AttentionValues forward(Backend& backend, const Value& x, const GroupedQueryOptions& options = {}) const;
  // The steps alone on x (B, T, E) already on the backend; key_padding_mask (B, T) additive or
  // null (options' own mask is forward()'s to check and upload). `residual` (here and in
  // attend_cached): the layer's residual_add after o_proj, which o_proj's store may do
  // (Backend::linear); the output is then the sum.
  AttentionValues attend(Backend& backend, Value x, const Value* key_padding_mask, const GroupedQueryOptions& options,
                         const Backend::ResidualAfter* residual = nullptr) const;

  // A one-layer cache of H_kv heads for `batch` sequences of up to `capacity` positions.
  KVCache make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype = Narrow::none) const;
  // x (B, T, E) or (T, E): the T positions after the cache's length(), attending over all of
  // them; their keys and values stay in the cache (length() grows by T). Equals forward() on
  // the whole sequence at these rows. One traced pass "grouped_query_attention_decode".
  Tensor decode(Backend& backend, const Tensor& x, KVCache& cache, const DecodeOptions& options = {}) const;
  // decode()'s steps on values already on the backend: q/k/v_proj, split_heads, rotary_embedding
  // at position…, kv_cache_append_k/v, flash_decoding (causal, the window), attention_combine,
  // merge_heads, o_proj. key_padding_mask (B, position + T) additive, or null.
  Value attend_cached(Backend& backend, Value x, const KVCache::Layer& cache, int64_t position,
                      const Value* key_padding_mask, int64_t parts = 0,
                      const Backend::ResidualAfter* residual = nullptr) const;

 private:
  // x -> q (B, H, T, d), k and v (B, H_kv, T, d), q and k rotated from `position`
  struct Heads {
    Value q, k, v;
  };
  Heads project(Backend& backend, Value x, int64_t position) const;
  // merge_heads and o_proj: (B, H, T, d) -> (B, T, E) (+ residual.x)
  Value merge_and_project(Backend& backend, const Value& heads, const Backend::ResidualAfter* residual) const;
  // x's checks and its batch-first form (B, T, E); `batched` says whether x had a batch dim
  Tensor batch_first(const std::string& who, const Tensor& x, bool& batched) const;

  GroupedQueryAttentionConfig config_;
  GroupedQueryAttentionWeights weights_;
};

}  // namespace vkattn
