#pragma once
// TransformerEncoderLayer and TransformerEncoder: torch.nn's, in eval mode, as recipes of steps
// written once and run on any Backend. One layer is
//   post-norm (norm_first=False, torch's default)     pre-norm (norm_first=True)
//     x = norm1(x + self_attn(x))                        x = x + self_attn(norm1(x))
//     x = norm2(x + ffn(x))                              x = x + ffn(norm2(x))
// with ffn(x) = linear2(activation(linear1(x))), activation relu (torch's default) or exact gelu.
// Each piece is a traced step named by the torch module that computes it, inside the module's
// path: layers.0.self_attn.q_proj … layers.0.self_attn.out_proj, layers.0.residual_add1,
// layers.0.norm1, layers.0.linear1, layers.0.gelu, layers.0.linear2, layers.0.residual_add2,
// layers.0.norm2, …, and the encoder's optional final norm.
//
// Inputs are batch-first, (B, L, E), or unbatched (L, E). Deliberate differences from PyTorch
// 1.13, as for MultiHeadAttention: is_causal works without a mask; dropout is the identity; and
// padded positions are computed like any other (torch's nested-tensor fast path, taken in eval
// mode with a src_key_padding_mask, returns zeros there instead).
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tensor.h"

namespace vkattn {

enum class Activation { relu, gelu, gelu_tanh };
// "relu" / "gelu" / "gelu_tanh": the step's name (torch's relu, gelu, gelu(approximate='tanh')).
const char* activation_name(Activation activation);
// The activation of that name; nullopt for any other.
std::optional<Activation> activation_from_name(std::string_view name);

struct TransformerEncoderLayerConfig {
  int64_t d_model = 0;             // E
  int64_t nhead = 0;               // H; must divide E
  int64_t dim_feedforward = 2048;  // F, the width of linear1
  Activation activation = Activation::relu;
  float layer_norm_eps = 1e-5f;
  bool norm_first = false;  // pre-norm when true
};

struct LayerNormWeights {
  Tensor weight;  // (E,)
  Tensor bias;    // (E,)
};

// The parameters under PyTorch's names (norm1.weight is norm1.weight, …).
struct TransformerEncoderLayerWeights {
  MultiHeadAttentionWeights self_attn;  // bias on, no bias_kv: what TransformerEncoderLayer builds
  Tensor linear1_weight;                // (F, E)
  Tensor linear1_bias;                  // (F,)
  Tensor linear2_weight;                // (E, F)
  Tensor linear2_bias;                  // (E,)
  LayerNormWeights norm1, norm2;

  // Linear weights from U(-1/√fan_in, 1/√fan_in), norm weights 1 ± 0.25 and norm biases ± 0.25,
  // reproducibly from `seed` (not torch's initialisation: non-trivial norms, so tests see them).
  static TransformerEncoderLayerWeights random(const TransformerEncoderLayerConfig& config, uint32_t seed);
  // Its numbers: every weight and bias there is.
  uint64_t parameter_count() const;
};

struct EncoderOptions {
  // (B, L), or (L,) unbatched: bool True = a padding position no query attends to, or float added
  std::optional<Tensor> src_key_padding_mask;
  // (L, L) or (B·H, L, L): bool True = blocked, or float added (torch's `mask`)
  std::optional<Tensor> mask;
  bool is_causal = false;  // block key j > query i
  AttentionPath attention = AttentionPath::automatic;  // the encoder never returns weights: fused
  bool pack_in_proj = false;  // each self_attn's q, k, v as one in_proj GEMM (ForwardOptions')
};

class TransformerEncoderLayer : public KeepsWeights {
 public:
  // Validates the config (ConfigError) and the weights' shapes (ShapeError naming the tensor).
  TransformerEncoderLayer(TransformerEncoderLayerConfig config, TransformerEncoderLayerWeights weights);
  // Random weights (seed 0).
  explicit TransformerEncoderLayer(TransformerEncoderLayerConfig config);

  const TransformerEncoderLayerConfig& config() const { return config_; }
  const TransformerEncoderLayerWeights& weights() const { return weights_; }

  // src (B, L, E) or (L, E) -> the same shape. One traced pass.
  Tensor forward(Backend& backend, const Tensor& src, const EncoderOptions& options = {}) const;
  // The same pass on src already on `backend` (Backend::upload, or an earlier pass's output), its
  // result left there: with the weights kept there (keep_weights_on) only the masks cross from the
  // host, as torch's forward on CUDA tensors. The checks are the host's but for src's values.
  Value forward(Backend& backend, const Value& src, const EncoderOptions& options = {}) const;
  // The layer's steps on a backend value x (B, L, E), in the backend's current step scope.
  // `attention` carries the masks in their batched shapes (MultiHeadAttention::attend's rules).
  Value steps(Backend& backend, const Value& x, const ForwardOptions& attention) const;
  // The same steps for x (B, T, E), the T positions after the `position` ones `cache` holds, its
  // self-attention over the cache (MultiHeadAttention::attend_cached): a decoder-only block's
  // decoding step, equal to steps() with is_causal over the whole sequence at these T rows.
  Value steps_cached(Backend& backend, const Value& x, const KVCache::Layer& cache, int64_t position,
                     const Value* key_padding_mask, int64_t parts = 0) const;

 private:
  // The block around a self-attention: norms, residual adds and the feed-forward.
  Value block(Backend& backend, const Value& x, const SubBlock& attend) const;

  TransformerEncoderLayerConfig config_;
  TransformerEncoderLayerWeights weights_;
  MultiHeadAttention self_attn_;
};

struct TransformerEncoderConfig {
  TransformerEncoderLayerConfig layer;  // every layer's (torch deep-copies one layer)
  int64_t num_layers = 1;
  bool final_norm = false;  // nn.TransformerEncoder(norm=nn.LayerNorm(E))
};

struct TransformerEncoderWeights {
  std::vector<TransformerEncoderLayerWeights> layers;  // layers.0, layers.1, …
  std::optional<LayerNormWeights> norm;                // when final_norm

  static TransformerEncoderWeights random(const TransformerEncoderConfig& config, uint32_t seed);
};

class TransformerEncoder : public KeepsWeights {
 public:
  // Validates: num_layers >= 1, one weight set per layer, norm given exactly when final_norm.
  TransformerEncoder(TransformerEncoderConfig config, TransformerEncoderWeights weights);

  const TransformerEncoderConfig& config() const { return config_; }
  const std::vector<TransformerEncoderLayer>& layers() const { return layers_; }

  // src (B, L, E) or (L, E) -> the same shape. One traced pass.
  Tensor forward(Backend& backend, const Tensor& src, const EncoderOptions& options = {}) const;
  // The same pass on src on `backend`, its result left there (TransformerEncoderLayer's).
  Value forward(Backend& backend, const Value& src, const EncoderOptions& options = {}) const;
  // Every layer's steps in scope layers.N, then the final norm, on x (B, L, E).
  Value steps(Backend& backend, const Value& x, const ForwardOptions& attention) const;

 private:
  TransformerEncoderConfig config_;
  std::vector<TransformerEncoderLayer> layers_;
  std::optional<LayerNormWeights> norm_;
};

// The host side of an encoder's forward, shared with modules built around one: checks src and
// the masks against PyTorch's rules (ShapeError "<who>: …"), brings src to (B, L, E) and the
// masks to their batched shapes. need_weights is false: an encoder never returns weights.
struct EncoderInput {
  Tensor src;                 // (B, L, E)
  bool batched = true;        // false: src was (L, E)
  ForwardOptions attention;   // masks (L, L) | (B·H, L, L) and (B, L), is_causal, the path
};
EncoderInput prepare_encoder_input(const std::string& who, const TransformerEncoderLayerConfig& config,
                                   const Tensor& src, const EncoderOptions& options);
// The same checks of src already on a backend, (B, L, E) or (L, E), but for its values, which
// stay there: the self-attention's options.
ForwardOptions encoder_attention(const std::string& who, const TransformerEncoderLayerConfig& config,
                                 const Value& src, const EncoderOptions& options);

}  // namespace vkattn
