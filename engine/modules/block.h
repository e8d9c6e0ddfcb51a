#pragma once
// The pieces the transformer layers share (TransformerEncoderLayer, TransformerDecoderLayer):
// the residual sub-block around an attention or the feed-forward, with its norm before or after,
// the feed-forward itself, a LayerNorm step, and the checks of their weights.
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/modules/random_weights.h"
#include "vkattn/backends/backend.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace vkattn::block {

// A LayerNorm's weight and bias, (E,) each: checks::weight's ShapeError
void check_norm(const std::string& who, const std::string& name, const LayerNormWeights& norm, int64_t E);
// The config checks every layer shares (dim_feedforward, layer_norm_eps): ConfigError
void check_layer_config(const std::string& who, const TransformerEncoderLayerConfig& config);

// A stack's checks (TransformerEncoder, TransformerDecoder): num_layers >= 1 (ConfigError), one
// weight set per layer, and a final norm given exactly when final_norm (ShapeError).
void check_stack(const std::string& who, int64_t num_layers, size_t weight_layers, bool final_norm,
                 const std::optional<LayerNormWeights>& norm, int64_t E);
// A stack's random weights: layer i's from seed + 100·i, the final norm's from seed + 99.
template <class LayerWeights, class StackWeights, class StackConfig>
StackWeights random_stack(const StackConfig& config, uint32_t seed) {
  StackWeights w;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    w.layers.push_back(LayerWeights::random(config.layer, seed + 100 * static_cast<uint32_t>(i)));
  }
  if (config.final_norm) {
    std::mt19937 rng(seed + 99);
    w.norm = random_norm(config.layer.d_model, rng);
  }
  return w;
}

// A layer's attention: d_model, nhead, batch-first, biases on
MultiHeadAttentionConfig attention_config(const TransformerEncoderLayerConfig& config);

// The step `name` (a layer_norm) with its weights uploaded as name.weight and name.bias.
Value norm_step(Backend& backend, const std::string& name, const Value& x, const LayerNormWeights& norm, float eps);

// Sub-block i (1, 2, 3) of a layer around f: (B, L, E) -> (B, L, E)
//   pre-norm (norm_first)  x + f(norm_i(x))      post-norm  norm_i(x + f(x))
// with the steps residual_add<i> (f's residual, adding x) and norm<i>.
Value residual(Backend& backend, int i, const Value& x, const LayerNormWeights& norm,
               const TransformerEncoderLayerConfig& config, const SubBlock& f);

// linear `name` then the step of `activation`, named as it is ("gelu", "gelu_tanh", "relu"),
// folded into the product's store where the backend folds (Backend::linear_activation):
//   x (…, K) -> (…, M)
Value linear_activate(Backend& backend, const std::string& name, const Value& x, const Value& weight, const Value* bias,
                      Activation activation);

// linear2(activation(linear1(x))): (B, L, E) -> (B, L, F) -> (B, L, E), then the sub-block's
// residual_add after linear2
Value feed_forward(Backend& backend, const Value& x, const TransformerEncoderLayerConfig& config,
                   const Tensor& linear1_weight, const Tensor& linear1_bias, const Tensor& linear2_weight,
                   const Tensor& linear2_bias, const Backend::ResidualAfter& residual);

// A stack's steps on x (B, T, E): layer i's, `step(layer, out)`, under the scope "layers.i", each
// on the last's output; then the final norm, when there is one.
template <class Layer, class Step>
Value stack_steps(Backend& backend, const std::vector<Layer>& layers, const std::optional<LayerNormWeights>& norm,
                  float eps, Value x, const Step& step) {
  for (size_t i = 0; i < layers.size(); ++i) {
    StepScope scope(backend, "layers." + std::to_string(i));
    x = step(layers[i], x);  // (B, T, E)
  }
  if (norm) x = norm_step(backend, "norm", x, *norm, eps);
  return x;
}

}  // namespace vkattn::block
