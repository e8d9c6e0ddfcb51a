#pragma once
// MultiHeadAttention: torch.nn.MultiheadAttention's semantics, as a recipe of steps written once
// and run on any Backend (ReferenceBackend on the host, VulkanBackend on a GPU).
//
// Deliberate differences from PyTorch (DESIGN.md): is_causal works without an attn_mask (and
// is combined with one when both are given); a fully masked row gives zero weights (PyTorch's
// safe softmax) instead of NaN; dropout is the inference-time identity.
#include <cstdint>
#include <optional>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/tensor.h"

namespace vkattn {

struct MultiHeadAttentionConfig {
  int64_t embed_dim = 0;   // E
  int64_t num_heads = 0;   // H; must divide E
  bool bias = true;        // biases on the input and output projections
  bool add_bias_kv = false;    // learnt bias_k / bias_v appended as one more key/value position
  bool add_zero_attn = false;  // a zero key/value position appended after the heads are split
  int64_t kdim = 0;        // key features; 0 means embed_dim
  int64_t vdim = 0;        // value features; 0 means embed_dim
  bool batch_first = false;  // (B, L, E) when true, (L, B, E) when false, as PyTorch

  int64_t key_dim() const { return kdim ? kdim : embed_dim; }
  int64_t value_dim() const { return vdim ? vdim : embed_dim; }
  int64_t head_dim() const { return embed_dim / num_heads; }
};

// The parameters under PyTorch's names (in_proj_weight is q/k/v_proj_weight stacked).
struct MultiHeadAttentionWeights {
  Tensor q_proj_weight;  // (E, E)
  Tensor k_proj_weight;  // (E, kdim)
  Tensor v_proj_weight;  // (E, vdim)
  std::optional<Tensor> q_proj_bias, k_proj_bias, v_proj_bias;  // (E,) each, when bias
  Tensor out_proj_weight;                                       // (E, E)
  std::optional<Tensor> out_proj_bias;                          // (E,), when bias
  std::optional<Tensor> bias_k, bias_v;                         // (E,) each, when add_bias_kv

  // Every parameter drawn from U(-1/√fan_in, 1/√fan_in), biases included (non-zero, so tests
  // see them), reproducibly from `seed`.
  static MultiHeadAttentionWeights random(const MultiHeadAttentionConfig& config, uint32_t seed);
};

// unfused: attention_scores, attention_mask, softmax, attention_values, each a step (and the
// weights can be returned). fused: one flash_attention step that never holds the (L, S) scores;
// it cannot return the weights (need_weights must be false). automatic: fused when the weights
// are not wanted, unfused when they are (PyTorch picks its fused kernels the same way).
enum class AttentionPath { automatic, unfused, fused };

// The path a forward takes: `requested`, with automatic resolved by need_weights.
AttentionPath resolve_attention(AttentionPath requested, bool need_weights);
// "auto", "unfused", "fused" (the CLI's --attention) <-> the path; ConfigError for another name.
AttentionPath parse_attention_path(const std::string& name);
const char* attention_path_name(AttentionPath path);

// PyTorch's _canonical_mask: a bool mask becomes additive float (True -> -inf, False -> 0); a
// float mask is returned as it is.
Tensor canonical_mask(const Tensor& mask);

struct ForwardOptions {
  std::optional<Tensor> key_padding_mask;  // (B, S) or (S,) unbatched; bool True = ignore key, float = added
  bool need_weights = true;
  std::optional<Tensor> attn_mask;  // (L, S) or (B·H, L, S); bool True = blocked, float = added
  bool average_attn_weights = true;
  bool is_causal = false;  // block key j > query i
  AttentionPath attention = AttentionPath::automatic;
  // Self-attention's three projections as one GEMM, PyTorch's own packed in_proj: one `in_proj`
  // step (B, L, E) -> (B, L, 3E), from which split_heads_q/k/v take their chunk. Taken when the
  // three inputs are one value and there is no bias_k/bias_v (appended before the heads are
  // split); otherwise q_proj, k_proj and v_proj run as always. Off by default: on lavapipe the
  // (3E, E) GEMM is no faster than three (E, E) ones, and the pass peaks three (B, L, E) tensors
  // higher: it holds the packed projection and the three heads at once, and the buffer pool,
  // which hands a freed buffer only to a tensor of its size, gives the packed one to none later.
  bool pack_in_proj = false;
};

struct AttentionResult {
  Tensor output;                  // like query: (L, B, E), (B, L, E) batch_first, or (L, E)
  std::optional<Tensor> weights;  // (B, L, S) averaged or (B, H, L, S) per head; no B unbatched
};

// attend()'s results, still on the backend.
struct AttentionValues {
  Value output;                  // (B, L, E)
  std::optional<Value> weights;  // (B, L, S) averaged or (B, H, L, S), when need_weights
};

// keep_weights_on(backend) (KeepsWeights) keeps its weights on a backend between passes.
class MultiHeadAttention : public KeepsWeights {
 public:
  // Validates the config (ConfigError) and draws weights with MultiHeadAttentionWeights::random(seed 0).
  explicit MultiHeadAttention(MultiHeadAttentionConfig config);
  // Validates every weight's shape against the config (ShapeError naming the tensor).
  MultiHeadAttention(MultiHeadAttentionConfig config, MultiHeadAttentionWeights weights);

  const MultiHeadAttentionConfig& config() const { return config_; }
  const MultiHeadAttentionWeights& weights() const { return weights_; }
  // New weights; those kept on a backend (keep_weights_on) go up again at the next pass there.
  void set_weights(MultiHeadAttentionWeights weights);


  AttentionResult forward(Backend& backend, const Tensor& query, const Tensor& key, const Tensor& value,
                          const ForwardOptions& options = {}) const;
  // Self-attention: key = value = query.
  AttentionResult forward(Backend& backend, const Tensor& query, const ForwardOptions& options = {}) const;
  // A pass on tensors already on `backend` (Backend::upload, or an earlier pass's output), its
  // results left there (Backend::download reads them back): batch-first query (B, L, E), key
  // (B, S, kdim), value (B, S, vdim), masks as attend() takes them. With the weights kept on the
  // backend (keep_weights_on) nothing crosses to or from the host: torch's forward on CUDA
  // tensors. The steps check the shapes (ShapeError naming the step).
  AttentionValues forward(Backend& backend, const Value& query, const Value& key, const Value& value,
                          const ForwardOptions& options = {}) const;
  // The path forward() takes on `backend` for these inputs (query (L, E), (B, L, E) or (L, B, E)
  // as batch_first says; key likewise): options.attention when it names one, else unfused when
  // weights are wanted, else what the backend prefers (Backend::prefers_fused: a tuning GPU may
  // measure the unfused steps faster). Two passes meant to be compared (side by side) take this.
  AttentionPath path(Backend& backend, const Tensor& query, const Tensor& key, const ForwardOptions& options) const;

  // The recipe's steps alone, on values already on the backend, for modules built around this
  // one (TransformerEncoderLayer): no pass, no download. Inputs are batch-first — query
  // (B, L, E), key (B, S, kdim), value (B, S, vdim) — and the masks in options are in their
  // batched shapes, attn_mask (L, S) or (B·H, L, S) and key_padding_mask (B, S); the steps check
  // them (ShapeError naming the step). Weights are uploaded on each call. The inputs are taken by
  // value and let go of after the projections: moved in, their buffers take later steps' outputs.
  // `residual` (here and in attend_cached, attend_memory): the layer's residual_add after
  // out_proj, which out_proj's store may do (Backend::linear); the output is then the sum.
  AttentionValues attend(Backend& backend, Value query, Value key, Value value, const ForwardOptions& options,
                         const Backend::ResidualAfter* residual = nullptr) const;

  // Self-attention of x (B, T, E) — the T positions after the `position` ones `cache` holds —
  // over all position + T of them, for decoding one token (or a prompt) at a time:
  //   q_proj, k_proj, v_proj, split_heads_q/k/v     x's own queries, keys and values (B, H, T, d)
  //   kv_cache_append_k, kv_cache_append_v          x's keys and values written into the cache
  //   flash_decoding, attention_combine             over the cache's first position + T rows, causal
  //   merge_heads, out_proj                         -> (B, T, E)
  // key_padding_mask (B, position + T) additive, or null; `parts` as flash_decoding's. Equals
  // attend() over the whole sequence with is_causal, at these T rows. Needs kdim = vdim = E and
  // neither add_bias_kv nor add_zero_attn (ConfigError).
  Value attend_cached(Backend& backend, Value x, const KVCache::Layer& cache, int64_t position,
                      const Value* key_padding_mask, int64_t parts = 0,
                      const Backend::ResidualAfter* residual = nullptr) const;

  // Cross-attention for decoding: the keys and values of memory (B, S, E), once per sequence —
  //   k_proj, v_proj, split_heads_k/v          -> (B, H, S, d) each
  // — then, per step, x's queries (B, T, E) over them (not causal):
  //   q_proj, split_heads_q, flash_decoding, attention_combine, merge_heads, out_proj -> (B, T, E)
  // Equals attend(x, memory, memory) at these rows. key_padding_mask (B, S) additive, or null.
  // Needs kdim = vdim = E and neither add_bias_kv nor add_zero_attn (ConfigError).
  KVCache::Layer project_memory(Backend& backend, const Value& memory) const;
  Value attend_memory(Backend& backend, Value x, const KVCache::Layer& memory, const Value* key_padding_mask,
                      int64_t parts = 0, const Backend::ResidualAfter* residual = nullptr) const;

 private:
  // q_proj's, k_proj's and v_proj's weights and biases, uploaded (the weights first: a pass's
  // buffers are reused in the order its tensors come), and the steps on them: each projection
  // with its split_heads, and k_proj and v_proj alone (add_bias_kv appends a row before the split)
  struct Projections {
    Value q_weight, k_weight, v_weight;
    std::optional<Value> q_bias, k_bias, v_bias;
    Value k(Backend& b, const Value& x) const { return b.linear("k_proj", x, k_weight, k_bias ? &*k_bias : nullptr); }
    Value v(Backend& b, const Value& x) const { return b.linear("v_proj", x, v_weight, v_bias ? &*v_bias : nullptr); }
    // each then split into H heads: (B, T, C) -> (B, H, T, d), the split folded where the backend folds
    Value q_heads(Backend& b, const Value& x, int64_t H) const {
      return b.linear_split_heads("q_proj", "split_heads_q", x, q_weight, q_bias ? &*q_bias : nullptr, H);
    }
    Value k_heads(Backend& b, const Value& x, int64_t H) const {
      return b.linear_split_heads("k_proj", "split_heads_k", x, k_weight, k_bias ? &*k_bias : nullptr, H);
    }
    Value v_heads(Backend& b, const Value& x, int64_t H) const {
      return b.linear_split_heads("v_proj", "split_heads_v", x, v_weight, v_bias ? &*v_bias : nullptr, H);
    }
  };
  Projections upload_projections(Backend& backend) const;
  // out_proj's weight and bias, uploaded
  struct OutProj {
    Value weight;
    std::optional<Value> bias;
  };
  OutProj upload_out_proj(Backend& backend) const;
  // ConfigError unless the attention can decode: kdim = vdim = E, no add_bias_kv, no add_zero_attn
  void check_decodable() const;
  // merge_heads then out_proj: (B, H, T, d) -> (B, T, E) (+ residual.x)
  Value merge_and_project(Backend& backend, const Value& heads, const OutProj& out_proj,
                          const Backend::ResidualAfter* residual) const;
  // forward() without the pass around it.
  AttentionResult run_steps(Backend& backend, const Tensor& query, const Tensor& key, const Tensor& value,
                            const ForwardOptions& options) const;

  // The path forward() takes on `backend` for B batch items of L queries over S keys.
  AttentionPath path(Backend& backend, int64_t B, int64_t L, int64_t S, const ForwardOptions& options) const;

  MultiHeadAttentionConfig config_;
  MultiHeadAttentionWeights weights_;
  // q/k/v_proj_weight stacked (3E, E) and their biases (3E), when kdim = vdim = E: pack_in_proj's
  std::optional<Tensor> in_proj_weight_, in_proj_bias_;
};

}  // namespace vkattn
