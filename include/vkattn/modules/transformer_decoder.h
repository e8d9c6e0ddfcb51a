#pragma once
// TransformerDecoderLayer and TransformerDecoder: torch.nn's, in eval mode, as recipes of steps
// written once and run on any Backend. One layer attends to the target so far (self_attn), then
// to the encoder's output, `memory` (multihead_attn: cross-attention), then feeds forward:
//   post-norm (norm_first=False, torch's default)       pre-norm (norm_first=True)
//     x = norm1(x + self_attn(x))                          x = x + self_attn(norm1(x))
//     x = norm2(x + multihead_attn(x, memory))             x = x + multihead_attn(norm2(x), memory)
//     x = norm3(x + ffn(x))                                x = x + ffn(norm3(x))
// Steps are named by torch's module paths: layers.0.self_attn.q_proj …, layers.0.residual_add1,
// layers.0.norm1, layers.0.multihead_attn.…, layers.0.residual_add2, layers.0.norm2,
// layers.0.linear1 …, layers.0.residual_add3, layers.0.norm3, and the decoder's optional norm.
//
// Inputs are batch-first — tgt (B, T, E), memory (B, S, E) — or unbatched, (T, E) and (S, E).
// As for the encoder: dropout is the identity and tgt_is_causal works without a tgt_mask.
//
// Generation decodes the target a token at a time. decode() takes the T positions after those a
// KVCache holds and runs each layer's self-attention over the cache (causal), and its
// cross-attention over memory's keys and values, which project_memory() computed once per
// sequence: per token, the work is one row's projections and attention over what is kept.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace vkattn {

// The same hyper-parameters as an encoder layer's (torch's constructors take the same ones).
using TransformerDecoderLayerConfig = TransformerEncoderLayerConfig;

// The parameters under PyTorch's names.
struct TransformerDecoderLayerWeights {
  MultiHeadAttentionWeights self_attn;       // biases on, no bias_kv
  MultiHeadAttentionWeights multihead_attn;  // the cross-attention; the same form
  Tensor linear1_weight;                     // (F, E)
  Tensor linear1_bias;                       // (F,)
  Tensor linear2_weight;                     // (E, F)
  Tensor linear2_bias;                       // (E,)
  LayerNormWeights norm1, norm2, norm3;

  // As TransformerEncoderLayerWeights::random: reproducible from `seed`, norms away from 1 and 0.
  static TransformerDecoderLayerWeights random(const TransformerDecoderLayerConfig& config, uint32_t seed);
};

struct DecoderOptions {
  // (T, T) or (B·H, T, T): bool True = blocked, or float added (torch's tgt_mask)
  std::optional<Tensor> tgt_mask;
  // (T, S) or (B·H, T, S): the cross-attention's, the same way (torch's memory_mask)
  std::optional<Tensor> memory_mask;
  // (B, T) or (T,): bool True = a padding position of the target no query attends to, or float added
  std::optional<Tensor> tgt_key_padding_mask;
  // (B, S) or (S,): the same for memory's positions
  std::optional<Tensor> memory_key_padding_mask;
  bool tgt_is_causal = false;  // block target key j > query i
  AttentionPath attention = AttentionPath::automatic;  // a decoder never returns weights: fused
};

// The host side of a decoder's forward: tgt and memory checked against PyTorch's rules
// (ShapeError "<who>: …") and brought to batch-first, the masks to their batched shapes.
struct DecoderInput {
  Tensor tgt;                      // (B, T, E)
  Tensor memory;                   // (B, S, E)
  bool batched = true;             // false: tgt was (T, E)
  ForwardOptions self_attention;   // tgt_mask, tgt_key_padding_mask, tgt_is_causal, the path
  ForwardOptions cross_attention;  // memory_mask, memory_key_padding_mask, the path
};
DecoderInput prepare_decoder_input(const std::string& who, const TransformerDecoderLayerConfig& config,
                                   const Tensor& tgt, const Tensor& memory, const DecoderOptions& options);
// The same checks of tgt and memory already on a backend, but for their values, which stay
// there: the two attentions' options.
struct DecoderAttention {
  ForwardOptions self_attention;   // tgt_mask, tgt_key_padding_mask, tgt_is_causal, the path
  ForwardOptions cross_attention;  // memory_mask, memory_key_padding_mask, the path
};
DecoderAttention decoder_attention(const std::string& who, const TransformerDecoderLayerConfig& config,
                                   const Value& tgt, const Value& memory, const DecoderOptions& options);

// Memory's keys and values for every layer's cross-attention, projected once (project_memory)
// and kept on the backend for decode(): layer i's keys and values (B, H, S, d).
struct DecoderMemory {
  std::vector<KVCache::Layer> layers;
  int64_t batch = 0, length = 0;         // B and S
  std::optional<Value> key_padding_mask;  // (B, S) additive, when memory has padding
};

class TransformerDecoderLayer : public KeepsWeights {
 public:
  // Validates the config (ConfigError) and the weights' shapes (ShapeError naming the tensor).
  TransformerDecoderLayer(TransformerDecoderLayerConfig config, TransformerDecoderLayerWeights weights);
  // Random weights (seed 0).
  explicit TransformerDecoderLayer(TransformerDecoderLayerConfig config);

  const TransformerDecoderLayerConfig& config() const { return config_; }
  const TransformerDecoderLayerWeights& weights() const { return weights_; }

  // tgt (B, T, E) or (T, E), memory (B, S, E) or (S, E) -> like tgt. One traced pass.
  Tensor forward(Backend& backend, const Tensor& tgt, const Tensor& memory, const DecoderOptions& options = {}) const;
  // The same pass on tgt and memory already on `backend` (Backend::upload, or earlier passes'
  // outputs: an encoder's for memory), its result left there: with the weights kept there
  // (keep_weights_on) only the masks cross from the host, as torch's forward on CUDA tensors. The
  // checks are the host's but for the values.
  Value forward(Backend& backend, const Value& tgt, const Value& memory, const DecoderOptions& options = {}) const;
  // The layer's steps on backend values x (B, T, E) and memory (B, S, E), in the current scope.
  Value steps(Backend& backend, const Value& x, const Value& memory, const ForwardOptions& self_attention,
              const ForwardOptions& cross_attention) const;
  // multihead_attn's keys and values of memory (B, S, E): (B, H, S, d) each.
  KVCache::Layer project_memory(Backend& backend, const Value& memory) const;
  // The steps for x (B, T, E), the T positions after the `position` ones `cache` holds: causal
  // self-attention over the cache, cross-attention over `memory` (project_memory's).
  Value steps_cached(Backend& backend, const Value& x, const KVCache::Layer& cache, int64_t position,
                     const Value* tgt_key_padding_mask, const KVCache::Layer& memory,
                     const Value* memory_key_padding_mask, int64_t parts = 0) const;

 private:
  // norm/residual sub-blocks around the two attentions (given) and the feed-forward
  Value block(Backend& backend, const Value& x, const SubBlock& self_attend, const SubBlock& cross_attend) const;

  TransformerDecoderLayerConfig config_;
  TransformerDecoderLayerWeights weights_;
  MultiHeadAttention self_attn_, multihead_attn_;
};

struct TransformerDecoderConfig {
  TransformerDecoderLayerConfig layer;  // every layer's
  int64_t num_layers = 1;
  bool final_norm = false;  // nn.TransformerDecoder(norm=nn.LayerNorm(E)); nn.Transformer has one
};

struct TransformerDecoderWeights {
  std::vector<TransformerDecoderLayerWeights> layers;  // layers.0, layers.1, …
  std::optional<LayerNormWeights> norm;                // when final_norm

  static TransformerDecoderWeights random(const TransformerDecoderConfig& config, uint32_t seed);
};

class TransformerDecoder : public KeepsWeights {
 public:
  // Validates: num_layers >= 1, one weight set per layer, norm given exactly when final_norm.
  TransformerDecoder(TransformerDecoderConfig config, TransformerDecoderWeights weights);

  const TransformerDecoderConfig& config() const { return config_; }
  const std::vector<TransformerDecoderLayer>& layers() const { return layers_; }

  // tgt (B, T, E) or (T, E), memory (B, S, E) or (S, E) -> like tgt. One traced pass.
  Tensor forward(Backend& backend, const Tensor& tgt, const Tensor& memory, const DecoderOptions& options = {}) const;
  // The same pass on tgt and memory on `backend`, its result left there (TransformerDecoderLayer's).
  Value forward(Backend& backend, const Value& tgt, const Value& memory, const DecoderOptions& options = {}) const;
  // Every layer's steps in scope layers.N, then the final norm.
  Value steps(Backend& backend, const Value& x, const Value& memory, const ForwardOptions& self_attention,
              const ForwardOptions& cross_attention) const;

  // ---- generation, a token at a time -------------------------------------------------------------
  // memory (B, S, E) -> every layer's cross-attention keys and values, computed once (one traced
  // pass "transformer_decoder_memory"). memory_key_padding_mask (B, S), bool or float.
  DecoderMemory project_memory(Backend& backend, const Tensor& memory,
                               const std::optional<Tensor>& memory_key_padding_mask = {}) const;
  // A cache of the self-attention's keys and values for `batch` sequences of up to `capacity`
  // target positions on `backend`.
  KVCache make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype = Narrow::none) const;
  // tgt (B, T, E): the T target positions after the cache's length() -> the decoder's output
  // at them (B, T, E), the target attended causally (tgt_is_causal); their keys and values stay
  // in the cache. Equals forward(whole target, memory, tgt_is_causal) at these rows. One traced
  // pass "transformer_decoder_decode". tgt_key_padding_mask (B, length() + T), or none.
  Tensor decode(Backend& backend, const Tensor& tgt, const DecoderMemory& memory, KVCache& cache,
                const std::optional<Tensor>& tgt_key_padding_mask = {}, int64_t parts = 0) const;

 private:
  TransformerDecoderConfig config_;
  std::vector<TransformerDecoderLayer> layers_;
  std::optional<LayerNormWeights> norm_;
};

}  // namespace vkattn
