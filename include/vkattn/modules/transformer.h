#pragma once
// Transformer: torch.nn.Transformer, in eval mode — an encoder over the source and a decoder over
// the target that attends to the encoder's output:
//   memory = encoder(src)            encoder.layers.N.…, encoder.norm
//   output = decoder(tgt, memory)    decoder.layers.N.…, decoder.norm
// Both stacks end with a LayerNorm, as torch builds them. Inputs are batch-first, (B, S, E) and
// (B, T, E), or unbatched; one traced pass "transformer", its steps under encoder. and decoder.
#include <cstdint>
#include <functional>
#include <optional>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace vkattn {

struct TransformerConfig {
  TransformerEncoderLayerConfig layer;  // d_model, nhead, dim_feedforward, activation, eps, norm_first
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
};

struct TransformerWeights {
  TransformerEncoderWeights encoder;  // its norm is required
  TransformerDecoderWeights decoder;  // likewise

  static TransformerWeights random(const TransformerConfig& config, uint32_t seed);
};

// torch's forward arguments, under its names.
struct TransformerOptions {
  std::optional<Tensor> src_mask;                 // (S, S) or (B·H, S, S)
  std::optional<Tensor> tgt_mask;                 // (T, T) or (B·H, T, T)
  std::optional<Tensor> memory_mask;              // (T, S) or (B·H, T, S)
  std::optional<Tensor> src_key_padding_mask;     // (B, S) or (S,)
  std::optional<Tensor> tgt_key_padding_mask;     // (B, T) or (T,)
  std::optional<Tensor> memory_key_padding_mask;  // (B, S) or (S,)
  bool src_is_causal = false;
  bool tgt_is_causal = false;
  AttentionPath attention = AttentionPath::automatic;
};

class Transformer : public KeepsWeights {
 public:
  // Validates like its encoder and decoder (ConfigError, ShapeError naming the tensor).
  Transformer(TransformerConfig config, TransformerWeights weights);

  const TransformerConfig& config() const { return config_; }
  const TransformerEncoder& encoder() const { return encoder_; }
  const TransformerDecoder& decoder() const { return decoder_; }

  // src (B, S, E) or (S, E), tgt (B, T, E) or (T, E) -> like tgt. One traced pass.
  Tensor forward(Backend& backend, const Tensor& src, const Tensor& tgt, const TransformerOptions& options = {}) const;
  // The same pass on src and tgt already on `backend`, its result left there (the decoder's).
  Value forward(Backend& backend, const Value& src, const Value& tgt, const TransformerOptions& options = {}) const;

 private:
  // The encoder's steps in scope encoder on src() (B, S, E), then the decoder's in scope decoder on
  // tgt() (B, T, E) over the encoder's output: each input made (uploaded) in its stack's scope.
  Value steps(Backend& backend, const std::function<Value()>& src, const std::function<Value()>& tgt,
              const ForwardOptions& source, const ForwardOptions& self_attention,
              const ForwardOptions& cross_attention) const;

  TransformerConfig config_;
  TransformerEncoder encoder_;
  TransformerDecoder decoder_;
};

}  // namespace vkattn
