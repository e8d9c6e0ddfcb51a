#include "vkattn/modules/transformer_decoder.h"

#include <random>
#include <string>

#include "engine/modules/block.h"
#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

void check_attention(const std::string& who, const char* name, const MultiHeadAttentionWeights& w) {
  if (!w.q_proj_bias || !w.out_proj_bias || w.bias_k) {
    throw ShapeError(who + ": " + name + " must have biases and no bias_k / bias_v, as TransformerDecoderLayer builds it");
  }
}

// tgt (B, T, E) or (T, E) and memory (B, S, E) or (S, E), by their shapes, and the masks of
// `options` checked against PyTorch's rules (ShapeError "<who>: …"): the masks in their batched
// shapes, with the rest of the attentions' options.
DecoderAttention decoder_attention(const std::string& who, const TransformerDecoderLayerConfig& c,
                                   const Shape& tgt, const Shape& memory, const DecoderOptions& options) {
  auto require = [&](bool ok, const std::string& message) {
    if (!ok) throw ShapeError(who + ": " + message);
  };
  const int64_t E = c.d_model, H = c.nhead;
  require(tgt.size() == 3 || tgt.size() == 2,
          "tgt " + shape_string(tgt) + " must be (B, T, E) batch-first, or (T, E) unbatched");
  require(memory.size() == tgt.size(), "memory " + shape_string(memory) + " must be " +
                                           (tgt.size() == 3 ? "(B, S, E)" : "(S, E)") + " like tgt " +
                                           shape_string(tgt));
  checks::features(who, "tgt", tgt, E, "d_model");
  checks::features(who, "memory", memory, E, "d_model");

  const bool batched = tgt.size() == 3;
  const int64_t B = batched ? tgt[0] : 1, T = tgt[tgt.size() - 2], S = memory[memory.size() - 2];
  require(!batched || memory[0] == B,
          "tgt " + shape_string(tgt) + " and memory " + shape_string(memory) + " must share the batch size");
  require(T >= 1 && S >= 1,
          "tgt " + shape_string(tgt) + " and memory " + shape_string(memory) + " need at least one position each");

  auto padding = [&](const char* name, const std::optional<Tensor>& m, int64_t N, const char* axis) {
    if (!m) return std::optional<Tensor>();
    const std::string dims = batched ? std::string("(B, ") + axis + ")" : std::string("(") + axis + ",)";
    return std::optional<Tensor>(checks::padding_mask(who, name, *m, batched ? Shape{B, N} : Shape{N}, dims, {B, N}));
  };
  auto attn_mask = [&](const char* name, const std::optional<Tensor>& m, int64_t N, const char* axis) {
    if (!m) return std::optional<Tensor>();
    Shape per_batch = {B * H, T, N};
    require(m->dtype != DType::int64, std::string(name) + " is int64 but must be bool or float32");
    require(m->shape == Shape{T, N} || m->shape == per_batch,
            std::string(name) + " " + shape_string(m->shape) + " must be (T, " + axis + ") = " +
                shape_string({T, N}) + " or " + (batched ? "(B·H, T, " : "(H, T, ") + axis + ") = " +
                shape_string(per_batch));
    return m;
  };
  DecoderAttention a;
  for (ForwardOptions* o : {&a.self_attention, &a.cross_attention}) {
    o->need_weights = false;
    o->attention = options.attention;
  }
  a.self_attention.is_causal = options.tgt_is_causal;
  a.self_attention.attn_mask = attn_mask("tgt_mask", options.tgt_mask, T, "T");
  a.self_attention.key_padding_mask = padding("tgt_key_padding_mask", options.tgt_key_padding_mask, T, "T");
  a.cross_attention.attn_mask = attn_mask("memory_mask", options.memory_mask, S, "S");
  a.cross_attention.key_padding_mask = padding("memory_key_padding_mask", options.memory_key_padding_mask, S, "S");
  return a;
}

// One traced pass of `steps(backend, tgt, memory)`, back to the caller's layout.
template <class Steps>
Tensor decoder_pass(Backend& backend, const std::string& pass, const DecoderInput& input, const Steps& steps) {
  Tensor out = run_pass(backend, pass, [&](Backend& b) {
    Value tgt = b.upload("tgt", input.tgt);
    return steps(b, tgt, b.upload("memory", input.memory));
  });
  if (!input.batched) out.shape.erase(out.shape.begin());
  return out;
}

// One traced pass of `steps(backend, tgt, memory)` on values already on the backend, (B, T, E) and
// (B, S, E), or unbatched (viewed as a batch of one); its result left there, in tgt's layout.
template <class Steps>
Value decoder_pass(Backend& backend, const std::string& pass, const Value& tgt, const Value& memory,
                   const Steps& steps) {
  const bool batched = tgt.rank() == 3;
  auto as_batch = [&](const Value& v) { return batched ? v : view(v, {1, v.dim(0), v.dim(1)}); };
  return in_pass(backend, pass, [&] {
    const Value x = as_batch(tgt), m = as_batch(memory);
    backend.preflight(pass, [&](Backend& b) { steps(b, b.input(x), b.input(m)); });
    Value out = steps(backend, x, m);
    return batched ? out : view(out, {out.dim(1), out.dim(2)});
  });
}

}  // namespace

TransformerDecoderLayerWeights TransformerDecoderLayerWeights::random(const TransformerDecoderLayerConfig& c,
                                                                      uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t E = c.d_model, F = c.dim_feedforward;
  TransformerDecoderLayerWeights w;
  w.self_attn = MultiHeadAttentionWeights::random(block::attention_config(c), seed + 1);
  w.multihead_attn = MultiHeadAttentionWeights::random(block::attention_config(c), seed + 2);
  w.linear1_weight = linear_parameter({F, E}, E, rng);
  w.linear1_bias = linear_parameter({F}, E, rng);
  w.linear2_weight = linear_parameter({E, F}, F, rng);
  w.linear2_bias = linear_parameter({E}, F, rng);
  w.norm1 = random_norm(E, rng);
  w.norm2 = random_norm(E, rng);
  w.norm3 = random_norm(E, rng);
  return w;
}

TransformerDecoderLayer::TransformerDecoderLayer(TransformerDecoderLayerConfig config)
    : TransformerDecoderLayer(config, TransformerDecoderLayerWeights::random(config, 0)) {}

TransformerDecoderLayer::TransformerDecoderLayer(TransformerDecoderLayerConfig config,
                                                 TransformerDecoderLayerWeights weights)
    : config_(config),
      weights_(std::move(weights)),
      self_attn_(block::attention_config(config_), weights_.self_attn),
      multihead_attn_(block::attention_config(config_), weights_.multihead_attn) {
  const std::string who = "TransformerDecoderLayer";
  const auto& c = config_;
  block::check_layer_config(who, c);
  const int64_t E = c.d_model, F = c.dim_feedforward;
  const auto& w = weights_;
  check_attention(who, "self_attn", w.self_attn);
  check_attention(who, "multihead_attn", w.multihead_attn);
  checks::weight(who, "linear1.weight", w.linear1_weight, {F, E}, "(F, E)");
  checks::weight(who, "linear1.bias", w.linear1_bias, {F}, "(F,)");
  checks::weight(who, "linear2.weight", w.linear2_weight, {E, F}, "(E, F)");
  checks::weight(who, "linear2.bias", w.linear2_bias, {E}, "(E,)");
  block::check_norm(who, "norm1", w.norm1, E);
  block::check_norm(who, "norm2", w.norm2, E);
  block::check_norm(who, "norm3", w.norm3, E);
}

Value TransformerDecoderLayer::block(Backend& backend, const Value& x, const SubBlock& self_attend,
                                     const SubBlock& cross_attend) const {
  const auto& c = config_;
  const auto& w = weights_;
  Value h = block::residual(backend, 1, x, w.norm1, c, [&](const Value& in, const Backend::ResidualAfter& residual) {
    StepScope scope(backend, "self_attn");
    return self_attend(in, residual);  // (B, T, E)
  });
  h = block::residual(backend, 2, h, w.norm2, c, [&](const Value& in, const Backend::ResidualAfter& residual) {
    StepScope scope(backend, "multihead_attn");
    return cross_attend(in, residual);  // (B, T, E)
  });
  return block::residual(backend, 3, h, w.norm3, c, [&](const Value& in, const Backend::ResidualAfter& residual) {
    return block::feed_forward(backend, in, c, w.linear1_weight, w.linear1_bias, w.linear2_weight, w.linear2_bias,
                               residual);
  });
}

Value TransformerDecoderLayer::steps(Backend& backend, const Value& x, const Value& memory,
                                     const ForwardOptions& self_attention, const ForwardOptions& cross_attention) const {
  return block(
      backend, x,
      [&](const Value& in, const Backend::ResidualAfter& residual) {
        return self_attn_.attend(backend, in, in, in, self_attention, &residual).output;
      },
      [&](const Value& in, const Backend::ResidualAfter& residual) {
        return multihead_attn_.attend(backend, in, memory, memory, cross_attention, &residual).output;
      });
}

KVCache::Layer TransformerDecoderLayer::project_memory(Backend& backend, const Value& memory) const {
  StepScope scope(backend, "multihead_attn");
  return multihead_attn_.project_memory(backend, memory);
}

Value TransformerDecoderLayer::steps_cached(Backend& backend, const Value& x, const KVCache::Layer& cache,
                                            int64_t position, const Value* tgt_key_padding_mask,
                                            const KVCache::Layer& memory, const Value* memory_key_padding_mask,
                                            int64_t parts) const {
  return block(
      backend, x,
      [&](const Value& in, const Backend::ResidualAfter& residual) {
        return self_attn_.attend_cached(backend, in, cache, position, tgt_key_padding_mask, parts, &residual);
      },
      [&](const Value& in, const Backend::ResidualAfter& residual) {
        return multihead_attn_.attend_memory(backend, in, memory, memory_key_padding_mask, parts, &residual);
      });
}

Tensor TransformerDecoderLayer::forward(Backend& backend, const Tensor& tgt, const Tensor& memory,
                                        const DecoderOptions& options) const {
  DecoderInput input = prepare_decoder_input("TransformerDecoderLayer.forward", config_, tgt, memory, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return decoder_pass(backend, "transformer_decoder_layer", input, [&](Backend& b, const Value& x, const Value& m) {
    return steps(b, x, m, input.self_attention, input.cross_attention);
  });
}

Value TransformerDecoderLayer::forward(Backend& backend, const Value& tgt, const Value& memory,
                                       const DecoderOptions& options) const {
  const DecoderAttention a = decoder_attention("TransformerDecoderLayer.forward", config_, tgt, memory, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return decoder_pass(backend, "transformer_decoder_layer", tgt, memory,
                      [&](Backend& b, const Value& x, const Value& m) {
                        return steps(b, x, m, a.self_attention, a.cross_attention);
                      });
}

TransformerDecoderWeights TransformerDecoderWeights::random(const TransformerDecoderConfig& config, uint32_t seed) {
  return block::random_stack<TransformerDecoderLayerWeights, TransformerDecoderWeights>(config, seed);
}

TransformerDecoder::TransformerDecoder(TransformerDecoderConfig config, TransformerDecoderWeights weights)
    : config_(config) {
  block::check_stack("TransformerDecoder", config_.num_layers, weights.layers.size(), config_.final_norm, weights.norm,
                     config_.layer.d_model);
  norm_ = std::move(weights.norm);
  for (auto& layer : weights.layers) layers_.emplace_back(config_.layer, std::move(layer));
}

Value TransformerDecoder::steps(Backend& backend, const Value& x, const Value& memory,
                                const ForwardOptions& self_attention, const ForwardOptions& cross_attention) const {
  return block::stack_steps(backend, layers_, norm_, config_.layer.layer_norm_eps, x,
                            [&](const TransformerDecoderLayer& layer, const Value& in) {
                              return layer.steps(backend, in, memory, self_attention, cross_attention);
                            });
}

Tensor TransformerDecoder::forward(Backend& backend, const Tensor& tgt, const Tensor& memory,
                                   const DecoderOptions& options) const {
  DecoderInput input = prepare_decoder_input("TransformerDecoder.forward", config_.layer, tgt, memory, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return decoder_pass(backend, "transformer_decoder", input, [&](Backend& b, const Value& x, const Value& m) {
    return steps(b, x, m, input.self_attention, input.cross_attention);
  });
}

Value TransformerDecoder::forward(Backend& backend, const Value& tgt, const Value& memory,
                                  const DecoderOptions& options) const {
  const DecoderAttention a = decoder_attention("TransformerDecoder.forward", config_.layer, tgt, memory, options);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return decoder_pass(backend, "transformer_decoder", tgt, memory, [&](Backend& b, const Value& x, const Value& m) {
    return steps(b, x, m, a.self_attention, a.cross_attention);
  });
}

DecoderMemory TransformerDecoder::project_memory(Backend& backend, const Tensor& memory,
                                                 const std::optional<Tensor>& memory_key_padding_mask) const {
  const std::string who = "TransformerDecoder.project_memory";
  const int64_t E = config_.layer.d_model;
  if (memory.dtype != DType::float32 || memory.rank() != 3 || memory.dim(2) != E || memory.dim(1) < 1) {
    throw ShapeError(who + ": memory is " + dtype_name(memory.dtype) + " " + shape_string(memory.shape) +
                     " but must be float32 (B, S, E) with E = d_model = " + std::to_string(E));
  }
  const int64_t B = memory.dim(0), S = memory.dim(1);
  DecoderMemory kept{{}, B, S, std::nullopt};
  if (memory_key_padding_mask) {
    kept.key_padding_mask = backend.upload(
        "memory_key_padding_mask",
        checks::padding_mask(who, "memory_key_padding_mask", *memory_key_padding_mask, {B, S}, "(B, S)", {B, S}));
  }
  // The pass's result is the last layer's values; every layer's stay alive in `kept`.
  run_pass(backend, "transformer_decoder_memory", [&](Backend& b) {
    Value x = b.upload("memory", memory);
    std::vector<KVCache::Layer> layers;
    for (size_t i = 0; i < layers_.size(); ++i) {
      StepScope scope(b, "layers." + std::to_string(i));
      layers.push_back(layers_[i].project_memory(b, x));
    }
    if (&b == &backend) kept.layers = layers;
    return layers.back().values;
  });
  return kept;
}

KVCache TransformerDecoder::make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype) const {
  const auto& l = config_.layer;
  return KVCache(backend, config_.num_layers, batch, l.nhead, capacity, l.d_model / l.nhead, dtype);
}

Tensor TransformerDecoder::decode(Backend& backend, const Tensor& tgt, const DecoderMemory& memory, KVCache& cache,
                                  const std::optional<Tensor>& tgt_key_padding_mask, int64_t parts) const {
  const std::string who = "TransformerDecoder.decode";
  const int64_t E = config_.layer.d_model, position = cache.length();
  if (tgt.dtype != DType::float32 || tgt.rank() != 3 || tgt.dim(2) != E || tgt.dim(1) < 1) {
    throw ShapeError(who + ": tgt is " + dtype_name(tgt.dtype) + " " + shape_string(tgt.shape) +
                     " but must be float32 (B, T, E) with E = d_model = " + std::to_string(E));
  }
  const int64_t B = tgt.dim(0), T = tgt.dim(1);
  cache.check_room(T);
  if (cache.layers() != config_.num_layers || cache.batch() != B || cache.heads() != config_.layer.nhead) {
    throw ShapeError(who + ": the cache is for " + std::to_string(cache.layers()) + " layers of " +
                     std::to_string(cache.batch()) + " sequences and " + std::to_string(cache.heads()) +
                     " heads; the decoder has " + std::to_string(config_.num_layers) + " layers of " +
                     std::to_string(config_.layer.nhead) + " heads and tgt " + std::to_string(B) + " sequences");
  }
  if (static_cast<int64_t>(memory.layers.size()) != config_.num_layers || memory.batch != B) {
    throw ShapeError(who + ": the memory was projected for " + std::to_string(memory.layers.size()) + " layers and " +
                     std::to_string(memory.batch) + " sequences; the decoder has " +
                     std::to_string(config_.num_layers) + " layers and tgt " + std::to_string(B) + " sequences");
  }
  std::optional<Tensor> mask;
  if (tgt_key_padding_mask) {
    const Shape expected{B, position + T};
    mask = checks::padding_mask(who, "tgt_key_padding_mask", *tgt_key_padding_mask, expected, "(B, S)", expected,
                                ", S the cache's length after");
  }
  const Value* memory_padding = memory.key_padding_mask ? &*memory.key_padding_mask : nullptr;
  KeepWeights keep(backend, cache.kept_weights(backend), weights_owner());  // the first step uploads them
  Tensor out = run_pass(backend, "transformer_decoder_decode", [&](Backend& b) {
    std::optional<Value> padding;
    if (mask) padding = b.upload("tgt_key_padding_mask", *mask);
    Value x = b.upload("tgt", tgt);
    for (size_t i = 0; i < layers_.size(); ++i) {
      StepScope scope(b, "layers." + std::to_string(i));
      const KVCache::Layer& layer = cache.layer(backend, static_cast<int64_t>(i));  // preflight's b sizes it only
      x = layers_[i].steps_cached(b, x, layer, position, padding ? &*padding : nullptr, memory.layers[i],
                                  memory_padding, parts);  // (B, T, E)
    }
    if (norm_) x = block::norm_step(b, "norm", x, *norm_, config_.layer.layer_norm_eps);
    return x;
  });
  cache.advance(T);
  return out;
}

DecoderInput prepare_decoder_input(const std::string& who, const TransformerDecoderLayerConfig& c, const Tensor& tgt,
                                   const Tensor& memory, const DecoderOptions& options) {
  checks::float_input(who, "tgt", tgt);
  checks::float_input(who, "memory", memory);
  DecoderAttention attention = decoder_attention(who, c, tgt.shape, memory.shape, options);
  DecoderInput input;
  input.batched = tgt.rank() == 3;
  input.tgt = input.batched ? tgt : Tensor({1, tgt.dim(0), c.d_model}, tgt.data);
  input.memory = input.batched ? memory : Tensor({1, memory.dim(0), c.d_model}, memory.data);
  input.self_attention = std::move(attention.self_attention);
  input.cross_attention = std::move(attention.cross_attention);
  return input;
}

DecoderAttention decoder_attention(const std::string& who, const TransformerDecoderLayerConfig& c, const Value& tgt,
                                   const Value& memory, const DecoderOptions& options) {
  for (auto [name, v] : {std::pair{"tgt", &tgt}, std::pair{"memory", &memory}}) {
    if (v->dtype != DType::float32 || v->narrow != Narrow::none) {
      throw ShapeError(who + ": " + name + " " + shape_string(v->shape) + " on the backend must be float32");
    }
  }
  return decoder_attention(who, c, tgt.shape, memory.shape, options);
}

}  // namespace vkattn
