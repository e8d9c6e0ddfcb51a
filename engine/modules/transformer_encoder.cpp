#include "vkattn/modules/transformer_encoder.h"

#include <cmath>
#include <random>
#include <string>

#include "engine/modules/block.h"
#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

using block::check_norm;

// One traced pass of `steps(backend, src)` on src (B, L, E), back to the caller's layout.
template <class Steps>
Tensor encoder_pass(Backend& backend, const std::string& pass, const EncoderInput& input, const Steps& steps) {
  Tensor out = run_pass(backend, pass, [&](Backend& b) { return steps(b, b.upload("src", input.src)); });
  if (!input.batched) out.shape.erase(out.shape.begin());
  return out;
}

// One traced pass of `steps(backend, x)` on src already on the backend, (B, L, E) or (L, E) as
// unbatched (a view as (1, L, E)); its result left there, in src's layout.
template <class Steps>
Value encoder_pass(Backend& backend, const std::string& pass, const Value& src, const Steps& steps) {
  const bool batched = src.rank() == 3;
  return in_pass(backend, pass, [&] {
    const Value x = batched ? src : view(src, {1, src.dim(0), src.dim(1)});
    backend.preflight(pass, [&](Backend& b) { steps(b, b.input(x)); });
    Value out = steps(backend, x);
    return batched ? out : view(out, {out.dim(1), out.dim(2)});
  });
}

// The masks of `options` checked against PyTorch's rules for src of shape (B, L, E) or (L, E)
// (ShapeError "<who>: …"), in their batched shapes, with the rest of the self-attention's options.
ForwardOptions encoder_attention(const std::string& who, const TransformerEncoderLayerConfig& c, const Shape& src,
                                 const EncoderOptions& options) {
  auto require = [&](bool ok, const std::string& message) {
    if (!ok) throw ShapeError(who + ": " + message);
  };
  const bool batched = src.size() == 3;
  const int64_t B = batched ? src[0] : 1, L = src[src.size() - 2], H = c.nhead;
  ForwardOptions a;
  a.need_weights = false;
  a.is_causal = options.is_causal;
  a.attention = options.attention;
  a.pack_in_proj = options.pack_in_proj;
  if (options.src_key_padding_mask) {
    a.key_padding_mask = checks::padding_mask(who, "src_key_padding_mask", *options.src_key_padding_mask,
                                              batched ? Shape{B, L} : Shape{L}, batched ? "(B, L)" : "(L,)", {B, L},
                                              " for src " + shape_string(src));
  }
  if (options.mask) {
    const Tensor& m = *options.mask;
    Shape per_batch = {B * H, L, L};
    require(m.dtype != DType::int64, "mask is int64 but must be bool or float32");
    require(m.shape == Shape{L, L} || m.shape == per_batch,
            "mask " + shape_string(m.shape) + " must be (L, L) = " + shape_string({L, L}) + " or " +
                (batched ? "(B·H, L, L) = " : "(H, L, L) = ") + shape_string(per_batch) + " for src " +
                shape_string(src));
    a.attn_mask = m;
  }
  return a;
}

}  // namespace

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::relu: break;
  }
  return "relu";
}

std::optional<Activation> activation_from_name(std::string_view name) {
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh}) {
    if (name == activation_name(a)) return a;
  }
  return std::nullopt;
}

TransformerEncoderLayerWeights TransformerEncoderLayerWeights::random(const TransformerEncoderLayerConfig& c,
                                                                      uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t E = c.d_model, F = c.dim_feedforward;
  TransformerEncoderLayerWeights w;
  w.self_attn = MultiHeadAttentionWeights::random(block::attention_config(c), seed + 1);
  w.linear1_weight = linear_parameter({F, E}, E, rng);
  w.linear1_bias = linear_parameter({F}, E, rng);
  w.linear2_weight = linear_parameter({E, F}, F, rng);
  w.linear2_bias = linear_parameter({E}, F, rng);
  w.norm1 = random_norm(E, rng);
  w.norm2 = random_norm(E, rng);
  return w;
}

uint64_t TransformerEncoderLayerWeights::parameter_count() const {
  auto count = [](const Tensor& t) { return static_cast<uint64_t>(t.size()); };
  const auto& a = self_attn;
  uint64_t n = 0;
  for (const Tensor* t : {&a.q_proj_weight, &a.k_proj_weight, &a.v_proj_weight, &a.out_proj_weight, &linear1_weight,
                          &linear1_bias, &linear2_weight, &linear2_bias, &norm1.weight, &norm1.bias, &norm2.weight,
                          &norm2.bias}) {
    n += count(*t);
  }
  for (const auto* t : {&a.q_proj_bias, &a.k_proj_bias, &a.v_proj_bias, &a.out_proj_bias, &a.bias_k, &a.bias_v}) {
    if (*t) n += count(**t);
  }
  return n;
}

TransformerEncoderLayer::TransformerEncoderLayer(TransformerEncoderLayerConfig config)
    : TransformerEncoderLayer(config, TransformerEncoderLayerWeights::random(config, 0)) {}

TransformerEncoderLayer::TransformerEncoderLayer(TransformerEncoderLayerConfig config,
                                                 TransformerEncoderLayerWeights weights)
    : config_(config), weights_(std::move(weights)), self_attn_(block::attention_config(config_), weights_.self_attn) {
  const std::string who = "TransformerEncoderLayer";
  const auto& c = config_;
  block::check_layer_config(who, c);
  const int64_t E = c.d_model, F = c.dim_feedforward;
  const auto& w = weights_;
  if (!w.self_attn.q_proj_bias || !w.self_attn.out_proj_bias || w.self_attn.bias_k) {
    throw ShapeError(who + ": self_attn must have biases and no bias_k / bias_v, as TransformerEncoderLayer builds it");
  }
  checks::weight(who, "linear1.weight", w.linear1_weight, {F, E}, "(F, E)");
  checks::weight(who, "linear1.bias", w.linear1_bias, {F}, "(F,)");
  checks::weight(who, "linear2.weight", w.linear2_weight, {E, F}, "(E, F)");
  checks::weight(who, "linear2.bias", w.linear2_bias, {E}, "(E,)");
  check_norm(who, "norm1", w.norm1, E);
  check_norm(who, "norm2", w.norm2, E);
}

Value TransformerEncoderLayer::steps(Backend& backend, const Value& x, const ForwardOptions& attention) const {
  return block(backend, x, [&](const Value& in, const Backend::ResidualAfter& residual) {
    return self_attn_.attend(backend, in, in, in, attention, &residual).output;
  });
}

Value TransformerEncoderLayer::steps_cached(Backend& backend, const Value& x, const KVCache::Layer& cache, int64_t position,
                                            const Value* key_padding_mask, int64_t parts) const {
  return block(backend, x, [&](const Value& in, const Backend::ResidualAfter& residual) {
    return self_attn_.attend_cached(backend, in, cache, position, key_padding_mask, parts, &residual);
  });
}

Value TransformerEncoderLayer::block(Backend& backend, const Value& x, const SubBlock& attend) const {
  const auto& c = config_;
  const auto& w = weights_;
  Value h = block::residual(backend, 1, x, w.norm1, c, [&](const Value& in, const Backend::ResidualAfter& residual) {
    StepScope scope(backend, "self_attn");
    return attend(in, residual);  // (B, L, E)
  });
  return block::residual(backend, 2, h, w.norm2, c, [&](const Value& in, const Backend::ResidualAfter& residual) {
    return block::feed_forward(backend, in, c, w.linear1_weight, w.linear1_bias, w.linear2_weight, w.linear2_bias,
                               residual);
  });
}

Tensor TransformerEncoderLayer::forward(Backend& backend, const Tensor& src, const EncoderOptions& options) const {
  EncoderInput input = prepare_encoder_input("TransformerEncoderLayer.forward", config_, src, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return encoder_pass(backend, "transformer_encoder_layer", input,
                      [&](Backend& b, const Value& x) { return steps(b, x, input.attention); });
}

Value TransformerEncoderLayer::forward(Backend& backend, const Value& src, const EncoderOptions& options) const {
  const ForwardOptions attention = encoder_attention("TransformerEncoderLayer.forward", config_, src, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return encoder_pass(backend, "transformer_encoder_layer", src,
                      [&](Backend& b, const Value& x) { return steps(b, x, attention); });
}

TransformerEncoderWeights TransformerEncoderWeights::random(const TransformerEncoderConfig& config, uint32_t seed) {
  return block::random_stack<TransformerEncoderLayerWeights, TransformerEncoderWeights>(config, seed);
}

TransformerEncoder::TransformerEncoder(TransformerEncoderConfig config, TransformerEncoderWeights weights)
    : config_(config) {
  block::check_stack("TransformerEncoder", config_.num_layers, weights.layers.size(), config_.final_norm, weights.norm,
                     config_.layer.d_model);
  norm_ = std::move(weights.norm);
  for (auto& layer : weights.layers) layers_.emplace_back(config_.layer, std::move(layer));
}

Value TransformerEncoder::steps(Backend& backend, const Value& x, const ForwardOptions& attention) const {
  return block::stack_steps(backend, layers_, norm_, config_.layer.layer_norm_eps, x,
                            [&](const TransformerEncoderLayer& layer, const Value& in) {
                              return layer.steps(backend, in, attention);
                            });
}

Tensor TransformerEncoder::forward(Backend& backend, const Tensor& src, const EncoderOptions& options) const {
  EncoderInput input = prepare_encoder_input("TransformerEncoder.forward", config_.layer, src, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return encoder_pass(backend, "transformer_encoder", input,
                      [&](Backend& b, const Value& x) { return steps(b, x, input.attention); });
}

Value TransformerEncoder::forward(Backend& backend, const Value& src, const EncoderOptions& options) const {
  const ForwardOptions attention = encoder_attention("TransformerEncoder.forward", config_.layer, src, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return encoder_pass(backend, "transformer_encoder", src,
                      [&](Backend& b, const Value& x) { return steps(b, x, attention); });
}

EncoderInput prepare_encoder_input(const std::string& who, const TransformerEncoderLayerConfig& c, const Tensor& src,
                                   const EncoderOptions& options) {
  auto require = [&](bool ok, const std::string& message) {
    if (!ok) throw ShapeError(who + ": " + message);
  };
  const int64_t E = c.d_model;
  checks::float_input(who, "src", src);
  require(src.rank() == 3 || src.rank() == 2,
          "src " + shape_string(src.shape) + " must be (B, L, E) batch-first, or (L, E) unbatched");
  checks::features(who, "src", src.shape, E, "d_model");

  EncoderInput input;
  input.batched = src.rank() == 3;
  input.src = input.batched ? src : Tensor({1, src.dim(0), E}, src.data);
  input.attention = encoder_attention(who, c, src.shape, options);
  return input;
}

ForwardOptions encoder_attention(const std::string& who, const TransformerEncoderLayerConfig& c, const Value& src,
                                 const EncoderOptions& options) {
  if ((src.rank() != 3 && src.rank() != 2) || src.dtype != DType::float32 || src.narrow != Narrow::none ||
      src.dim(-1) != c.d_model) {
    throw ShapeError(who + ": src " + shape_string(src.shape) + " on the backend must be float32, (B, L, E) " +
                     "batch-first or (L, E) unbatched, with E = d_model = " + std::to_string(c.d_model));
  }
  return encoder_attention(who, c, src.shape, options);
}

}  // namespace vkattn
