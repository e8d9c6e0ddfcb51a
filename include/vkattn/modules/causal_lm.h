#pragma once
// CausalLM: a small decoder-only language model — GPT's shape — as a recipe of steps:
//   token_embedding (embedding)       ids (B, T) -> (B, T, E)
//   position_embedding (positional_encoding)  + a learnt row per position
//   layers.N.…                        decoder-only blocks: TransformerEncoderLayer with a causal mask
//   norm (layer_norm), lm_head (linear)        -> logits (B, T, V)
// In PyTorch it is nn.Embedding ×2, N nn.TransformerEncoderLayer(batch_first=True) called with a
// causal src_mask, nn.LayerNorm and nn.Linear (models/tiny_char/train.py builds one).
//
// Two ways to run it. forward() computes every position of a sequence at once, as torch's
// forward does. decode() takes the T positions after those a KVCache holds — a prompt, then one
// token at a time — computes only them, and leaves their keys and values in the cache: per
// token the work is the projections of one row and attention over the cache, instead of the
// whole sequence again. At each position the two give the same logits (to fp32 rounding).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/language_model.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace vkattn {

struct CausalLMConfig {
  int64_t vocab_size = 0;     // V
  int64_t max_positions = 0;  // P: rows of the position table, the longest sequence
  TransformerEncoderLayerConfig layer;  // E, H, F, activation, eps, norm_first (every block's)
  int64_t num_layers = 1;
  bool lm_head_bias = true;
  bool tie_word_embeddings = false;  // lm_head is token_embedding (GPT-2's): no lm_head.weight of its own
};

struct CausalLMWeights {
  Tensor token_embedding;     // (V, E)  token_embedding.weight
  Tensor position_embedding;  // (P, E)  position_embedding.weight
  std::vector<TransformerEncoderLayerWeights> layers;  // layers.N.…
  LayerNormWeights norm;                               // norm.weight, norm.bias (E,)
  Tensor lm_head_weight;                               // (V, E)  lm_head.weight; none when tied
  std::optional<Tensor> lm_head_bias;                  // (V,)    lm_head.bias, when lm_head_bias

  static CausalLMWeights random(const CausalLMConfig& config, uint32_t seed);
};

class CausalLM : public LanguageModel {
 public:
  // Validates the config (ConfigError) and every weight's shape (ShapeError naming it).
  CausalLM(CausalLMConfig config, CausalLMWeights weights);

  const CausalLMConfig& config() const { return config_; }

  // A cache for `batch` sequences of up to `capacity` positions (<= max_positions) on `backend`.
  KVCache make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype = Narrow::none) const override;
  // ids (B, T): the T positions after the cache's length() -> their logits (B, T, V); their keys
  // and values stay in the cache (length() grows by T). One traced pass "causal_lm_decode".
  // ShapeError naming the capacity when the cache has no room for T more.
  Tensor decode(Backend& backend, const Tensor& ids, KVCache& cache, const DecodeOptions& options = {}) const override;

  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_positions; }
  uint64_t parameter_count() const override;
  std::string describe() const override;

 private:
  // forward()'s pass "causal_lm" (LanguageModel's): ids (B, T) int64 -> logits (B, T, V), every
  // position computed, or the last logits_to_keep. key_padding_mask (B, T) as DecodeOptions'.
  ForwardPass forward_pass(const std::string& who, const Tensor& ids, const std::optional<Tensor>& key_padding_mask,
                           AttentionPath attention, int64_t logits_to_keep) const override;
  // ids' checks: int64 (B, T), every id in [0, V), positions within max_positions
  void check_ids(const std::string& who, const Tensor& ids, int64_t first_position) const;
  // token_embedding + position_embedding's rows first_position … first_position + T - 1
  Value embed(Backend& backend, const Value& ids, int64_t first_position) const;
  // the last logits_to_keep positions (all where 0), norm, lm_head: (B, T, E) -> (B, n, V)
  Value head(Backend& backend, const Value& x, int64_t logits_to_keep) const;

  CausalLMConfig config_;
  CausalLMWeights weights_;
  std::vector<TransformerEncoderLayer> layers_;
};

}  // namespace vkattn
