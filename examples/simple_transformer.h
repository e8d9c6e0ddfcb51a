#pragma once
// The SimpleTransformer classifier of the seed article (../shared/articles/04-self-attention-in-
// pytorch.txt, "Practical Integration"), loaded from its PyTorch state_dict and run as traced
// steps on any Backend:
//   tokens (B, T) -> embedding -> + pos_encoding[:, :T] -> N encoder blocks -> mean over T
//                 -> classifier -> logits (B, num_classes)
// The article's TransformerEncoderBlock is torch's post-norm TransformerEncoderLayer with exact
// GELU and dim_feedforward = 4·E, its MultiHeadAttention torch's without masks; dropout is the
// identity in eval mode. Its state_dict names map to the layer's:
//   blocks.N.attention.W_q / W_k / W_v   -> self_attn's q / k / v projections
//   blocks.N.attention.W_o               -> self_attn.out_proj
//   blocks.N.ff.0 / blocks.N.ff.3        -> linear1 / linear2
//   blocks.N.norm1 / blocks.N.norm2      -> norm1 / norm2
// and the steps are traced as blocks.N.self_attn.q_proj, blocks.N.linear1, ….
#include <filesystem>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/io/safetensors.h"
#include "vkattn/modules/transformer_encoder.h"

namespace vkattn::examples {

class SimpleTransformer {
 public:
  // From the article model's state_dict; num_heads 0 takes __metadata__["num_heads"]. A missing
  // or mis-shaped tensor is a FileError naming it by the article's name.
  static SimpleTransformer from_state_dict(const io::Safetensors& file, int64_t num_heads, const std::string& source);
  static SimpleTransformer load(const std::filesystem::path& path, int64_t num_heads = 0);

  int64_t vocab_size() const { return embedding_.dim(0); }
  int64_t num_classes() const { return classifier_weight_.dim(0); }
  const TransformerEncoderLayerConfig& block_config() const { return blocks_.front().config(); }
  size_t num_layers() const { return blocks_.size(); }

  // tokens (B, T) int64, each in [0, vocab_size), T <= 512 -> logits (B, num_classes). One
  // traced pass; a bad token is a ShapeError naming it and where it is.
  Tensor forward(Backend& backend, const Tensor& tokens) const;

 private:
  Tensor embedding_;        // (V, E)
  Tensor pos_encoding_;     // (512, E): the parameter (1, 512, E) without its batch dim
  std::vector<TransformerEncoderLayer> blocks_;
  Tensor classifier_weight_;  // (C, E)
  Tensor classifier_bias_;    // (C,)
};

}  // namespace vkattn::examples
