#include "vkattn/modules/transformer.h"

#include <functional>
#include <string>

#include "engine/modules/pass.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

TransformerEncoderConfig encoder_config(const TransformerConfig& c) {
  return {c.layer, c.num_encoder_layers, /*final_norm=*/true};
}

TransformerDecoderConfig decoder_config(const TransformerConfig& c) {
  return {c.layer, c.num_decoder_layers, /*final_norm=*/true};
}

EncoderOptions encoder_options(const TransformerOptions& o) {
  EncoderOptions e;
  e.mask = o.src_mask;
  e.src_key_padding_mask = o.src_key_padding_mask;
  e.is_causal = o.src_is_causal;
  e.attention = o.attention;
  return e;
}

DecoderOptions decoder_options(const TransformerOptions& o) {
  DecoderOptions d;
  d.tgt_mask = o.tgt_mask;
  d.memory_mask = o.memory_mask;
  d.tgt_key_padding_mask = o.tgt_key_padding_mask;
  d.memory_key_padding_mask = o.memory_key_padding_mask;
  d.tgt_is_causal = o.tgt_is_causal;
  d.attention = o.attention;
  return d;
}

}  // namespace

TransformerWeights TransformerWeights::random(const TransformerConfig& config, uint32_t seed) {
  return {TransformerEncoderWeights::random(encoder_config(config), seed),
          TransformerDecoderWeights::random(decoder_config(config), seed + 10000)};
}

Transformer::Transformer(TransformerConfig config, TransformerWeights weights)
    : config_(config),
      encoder_(encoder_config(config_), std::move(weights.encoder)),
      decoder_(decoder_config(config_), std::move(weights.decoder)) {}

Value Transformer::steps(Backend& b, const std::function<Value()>& src, const std::function<Value()>& tgt,
                         const ForwardOptions& source, const ForwardOptions& self_attention,
                         const ForwardOptions& cross_attention) const {
  Value memory;
  {
    StepScope scope(b, "encoder");
    memory = encoder_.steps(b, src(), source);  // (B, S, E)
  }
  StepScope scope(b, "decoder");
  return decoder_.steps(b, tgt(), memory, self_attention, cross_attention);  // (B, T, E)
}

Tensor Transformer::forward(Backend& backend, const Tensor& src, const Tensor& tgt,
                            const TransformerOptions& options) const {
  const std::string who = "Transformer.forward";
  EncoderInput source = prepare_encoder_input(who, config_.layer, src, encoder_options(options));
  // memory has src's shape: its checks are src's, named as torch's forward names them
  DecoderInput target = prepare_decoder_input(who, config_.layer, tgt, src, decoder_options(options));

  KeepWeights keep(backend, kept_on(backend), weights_owner());
  Tensor out = run_pass(backend, "transformer", [&](Backend& b) {
    return steps(
        b, [&] { return b.upload("src", source.src); }, [&] { return b.upload("tgt", target.tgt); },
        source.attention, target.self_attention, target.cross_attention);
  });
  if (!target.batched) out.shape.erase(out.shape.begin());
  return out;
}

Value Transformer::forward(Backend& backend, const Value& src, const Value& tgt,
                           const TransformerOptions& options) const {
  const std::string who = "Transformer.forward";
  const ForwardOptions source = encoder_attention(who, config_.layer, src, encoder_options(options));
  const DecoderAttention target = decoder_attention(who, config_.layer, tgt, src, decoder_options(options));
  const bool batched = tgt.rank() == 3;
  auto as_batch = [&](const Value& v) { return batched ? v : view(v, {1, v.dim(0), v.dim(1)}); };
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return in_pass(backend, "transformer", [&] {
    const Value s = as_batch(src), t = as_batch(tgt);
    auto recipe = [&](Backend& b, const Value& in_src, const Value& in_tgt) {
      return steps(
          b, [&] { return in_src; }, [&] { return in_tgt; }, source, target.self_attention, target.cross_attention);
    };
    backend.preflight("transformer", [&](Backend& b) { recipe(b, b.input(s), b.input(t)); });
    Value out = recipe(backend, s, t);
    return batched ? out : view(out, {out.dim(1), out.dim(2)});
  });
}

}  // namespace vkattn
