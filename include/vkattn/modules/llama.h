#pragma once
// Llama: the decoder-only language model of Llama, Mistral, Qwen2, Qwen3, Phi-3 and Gemma — Hugging
// Face's LlamaForCausalLM — as a recipe of steps:
//   embed_tokens (embedding)                          ids (B, T) -> (B, T, E), times √E for Gemma
//   layers.N.input_layernorm (rms_norm)
//   layers.N.self_attn.…                              GroupedQueryAttention: q/k/v_proj, RoPE,
//                                                     causal (and a sliding window, in every
//                                                     layer or in windowed_layers), o_proj
//   layers.N.residual_add1
//   layers.N.post_attention_layernorm (rms_norm)
//   layers.N.mlp.gate_proj, up_proj (linear)          (B, T, E) -> (B, T, F) twice
//   layers.N.mlp.silu, mlp.multiply                   SwiGLU: silu(gate) · up (Gemma's GeGLU:
//                                                     mlp.gelu_tanh)
//   layers.N.mlp.down_proj (linear)                   -> (B, T, E)
//   layers.N.residual_add2
//   norm (rms_norm), lm_head (linear)                 -> logits (B, T, V)
// No positions are added to the tokens: RoPE turns q and k by theirs. forward() computes every
// position at once; decode() the positions after those a KVCache of H_kv heads holds, as
// CausalLM's.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/language_model.h"
#include "vkattn/tensor.h"

namespace vkattn {

// Hugging Face's config.json names in the comments.
struct LlamaConfig {
  int64_t vocab_size = 0;         // V                                      vocab_size
  int64_t max_positions = 0;      // P: the longest sequence                max_position_embeddings
  int64_t intermediate_size = 0;  // F: the SwiGLU's width                  intermediate_size
  int64_t num_layers = 1;         //                                        num_hidden_layers
  float rms_norm_eps = 1e-6f;     //                                        rms_norm_eps
  bool mlp_bias = false;          // biases on gate/up/down_proj            mlp_bias
  bool tie_word_embeddings = false;  // lm_head is embed_tokens              tie_word_embeddings
  // gate_proj's activation: silu (SwiGLU), or gelu_tanh, gelu (Gemma's GeGLU)  hidden_act
  ActivationStep hidden_act = ActivationStep::silu;
  float embedding_scale = 1.0f;  // each embedding times it: Gemma's √E (GemmaModel's normalizer)
  GroupedQueryAttentionConfig attention;  // E, H, H_kv, d, RoPE θ, biases, window (causal)
  // Per layer: whether it attends within attention.sliding_window (Qwen2's layers from
  // max_window_layers on; layer_types' "sliding_attention"); empty: every layer does.
  std::vector<bool> windowed_layers;
};

struct LlamaLayerWeights {
  GroupedQueryAttentionWeights self_attn;  // self_attn.q_proj … o_proj
  Tensor gate_proj, up_proj;               // (F, E)  mlp.gate_proj.weight, mlp.up_proj.weight
  Tensor down_proj;                        // (E, F)  mlp.down_proj.weight
  std::optional<Tensor> gate_proj_bias, up_proj_bias, down_proj_bias;  // (F,), (F,), (E,): mlp_bias
  Tensor input_layernorm, post_attention_layernorm;  // (E,) each: RMSNorm's weight (Gemma's 1 + weight)
};

struct LlamaWeights {
  Tensor embed_tokens;  // (V, E)  model.embed_tokens.weight
  std::vector<LlamaLayerWeights> layers;
  Tensor norm;     // (E,)    model.norm.weight
  Tensor lm_head;  // (V, E)  lm_head.weight; none when tie_word_embeddings

  // Linear weights U(-1/√in, 1/√in), norm weights 1 ± 0.25, reproducibly from `seed`.
  static LlamaWeights random(const LlamaConfig& config, uint32_t seed);
};

class Llama : public LanguageModel {
 public:
  // Validates the config (ConfigError) and every weight's shape (ShapeError naming it).
  Llama(LlamaConfig config, LlamaWeights weights);

  const LlamaConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }

  // A cache of H_kv heads for `batch` sequences of up to `capacity` positions (<= max_positions).
  KVCache make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype = Narrow::none) const override;
  // ids (B, T): the T positions after the cache's length() -> their logits (B, T, V); their keys
  // and values stay in the cache. One traced pass "llama_decode".
  Tensor decode(Backend& backend, const Tensor& ids, KVCache& cache, const DecodeOptions& options = {}) const override;

  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_positions; }
  uint64_t parameter_count() const override;
  std::string describe() const override;

 private:
  // forward()'s pass "llama" (LanguageModel's): ids (B, T) int64 -> logits (B, T, V), every
  // position computed, or the last logits_to_keep.
  ForwardPass forward_pass(const std::string& who, const Tensor& ids, const std::optional<Tensor>& key_padding_mask,
                           AttentionPath attention, int64_t logits_to_keep) const override;
  // the layer's steps after its attention: residual, post_attention_layernorm, the SwiGLU, residual
  Value block(Backend& backend, size_t layer, const Value& x, const SubBlock& attend) const;
  // the last logits_to_keep positions (all where 0), norm, lm_head: (B, T, E) -> (B, n, V)
  Value head(Backend& backend, const Value& x, int64_t logits_to_keep) const;
  // embed_tokens: ids (B, T) on the backend -> (B, T, E)
  Value embed(Backend& backend, const Value& ids) const;

  LlamaConfig config_;
  LlamaWeights weights_;
  std::vector<GroupedQueryAttention> attention_;
};

}  // namespace vkattn
