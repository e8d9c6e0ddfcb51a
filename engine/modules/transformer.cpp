#include "vkattn/modules/transformer.h"

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

}  // namespace

TransformerWeights TransformerWeights::random(const TransformerConfig& config, uint32_t seed) {
  return {TransformerEncoderWeights::random(encoder_config(config), seed),
          TransformerDecoderWeights::random(decoder_config(config), seed + 10000)};
}

Transformer::Transformer(TransformerConfig config, TransformerWeights weights)
    : config_(config),
      encoder_(encoder_config(config_), std::move(weights.encoder)),
      decoder_(decoder_config(config_), std::move(weights.decoder)) {}

Tensor Transformer::forward(Backend& backend, const Tensor& src, const Tensor& tgt,
                            const TransformerOptions& options) const {
  const std::string who = "Transformer.forward";
  EncoderOptions encoder_options;
  encoder_options.mask = options.src_mask;
  encoder_options.src_key_padding_mask = options.src_key_padding_mask;
  encoder_options.is_causal = options.src_is_causal;
  encoder_options.attention = options.attention;
  EncoderInput source = prepare_encoder_input(who, config_.layer, src, encoder_options);
  DecoderOptions decoder_options;
  decoder_options.tgt_mask = options.tgt_mask;
  decoder_options.memory_mask = options.memory_mask;
  decoder_options.tgt_key_padding_mask = options.tgt_key_padding_mask;
  decoder_options.memory_key_padding_mask = options.memory_key_padding_mask;
  decoder_options.tgt_is_causal = options.tgt_is_causal;
  decoder_options.attention = options.attention;
  // memory has src's shape: its checks are src's, named as torch's forward names them
  DecoderInput target = prepare_decoder_input(who, config_.layer, tgt, src, decoder_options);

  KeepWeights keep(backend, kept_on(backend), weights_owner());
  Tensor out = run_pass(backend, "transformer", [&](Backend& b) {
    Value memory;
    {
      StepScope scope(b, "encoder");
      memory = encoder_.steps(b, b.upload("src", source.src), source.attention);  // (B, S, E)
    }
    StepScope scope(b, "decoder");
    return decoder_.steps(b, b.upload("tgt", target.tgt), memory, target.self_attention,
                          target.cross_attention);  // (B, T, E)
  });
  if (!target.batched) out.shape.erase(out.shape.begin());
  return out;
}

}  // namespace vkattn
