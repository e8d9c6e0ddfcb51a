#include "engine/modules/block.h"

#include <cmath>

#include "engine/modules/checks.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"

namespace vkattn::block {

void check_norm(const std::string& who, const std::string& name, const LayerNormWeights& norm, int64_t E) {
  checks::weight(who, name + ".weight", norm.weight, {E}, "(E,)");
  checks::weight(who, name + ".bias", norm.bias, {E}, "(E,)");
}

void check_layer_config(const std::string& who, const TransformerEncoderLayerConfig& c) {
  if (c.dim_feedforward <= 0) {
    throw ConfigError(who + ": dim_feedforward=" + std::to_string(c.dim_feedforward) + " must be >= 1");
  }
  if (!(c.layer_norm_eps > 0.0f) || !std::isfinite(c.layer_norm_eps)) {
    throw ConfigError(who + ": layer_norm_eps=" + std::to_string(c.layer_norm_eps) + " must be a positive number");
  }
}

void check_stack(const std::string& who, int64_t num_layers, size_t weight_layers, bool final_norm,
                 const std::optional<LayerNormWeights>& norm, int64_t E) {
  if (num_layers < 1) throw ConfigError(who + ": num_layers=" + std::to_string(num_layers) + " must be >= 1");
  if (static_cast<int64_t>(weight_layers) != num_layers) {
    throw ShapeError(who + ": " + std::to_string(weight_layers) + " layers of weights for num_layers=" +
                     std::to_string(num_layers));
  }
  if (final_norm != norm.has_value()) {
    throw ShapeError(who + (final_norm ? ": final_norm is on but norm.weight / norm.bias are missing"
                                       : ": norm.weight / norm.bias are given but final_norm is off"));
  }
  if (norm) check_norm(who, "norm", *norm, E);
}

MultiHeadAttentionConfig attention_config(const TransformerEncoderLayerConfig& c) {
  MultiHeadAttentionConfig a;
  a.embed_dim = c.d_model;
  a.num_heads = c.nhead;
  a.batch_first = true;
  return a;
}

Value norm_step(Backend& backend, const std::string& name, const Value& x, const LayerNormWeights& norm, float eps) {
  Value weight = backend.upload_weight(name + ".weight", norm.weight);
  Value bias = backend.upload_weight(name + ".bias", norm.bias);
  return backend.layer_norm(name, x, weight, bias, eps);
}

Value residual(Backend& backend, int i, const Value& x, const LayerNormWeights& norm,
               const TransformerEncoderLayerConfig& c, const SubBlock& f) {
  const std::string n = std::to_string(i);
  const Backend::ResidualAfter add = backend.residual_after("residual_add" + n, x);
  if (c.norm_first) return f(norm_step(backend, "norm" + n, x, norm, c.layer_norm_eps), add);
  return norm_step(backend, "norm" + n, f(x, add), norm, c.layer_norm_eps);
}

Value linear_activate(Backend& backend, const std::string& name, const Value& x, const Value& weight, const Value* bias,
                      Activation activation) {
  const ActivationStep step = activation == Activation::gelu        ? ActivationStep::gelu
                              : activation == Activation::gelu_tanh ? ActivationStep::gelu_tanh
                                                                    : ActivationStep::relu;
  return backend.linear_activation(name, activation_name(activation), step, x, weight, bias);
}

Value feed_forward(Backend& backend, const Value& x, const TransformerEncoderLayerConfig& c,
                   const Tensor& linear1_weight, const Tensor& linear1_bias, const Tensor& linear2_weight,
                   const Tensor& linear2_bias, const Backend::ResidualAfter& residual) {
  Value w1 = backend.upload_matrix("linear1.weight", linear1_weight);
  Value b1 = backend.upload_weight("linear1.bias", linear1_bias);
  Value w2 = backend.upload_matrix("linear2.weight", linear2_weight);
  Value b2 = backend.upload_weight("linear2.bias", linear2_bias);
  Value hidden = linear_activate(backend, "linear1", x, w1, &b1, c.activation);  // (B, L, F)
  return backend.linear("linear2", hidden, w2, &b2, &residual);                  // (B, L, E)
}

}  // namespace vkattn::block
