#pragma once
// torch.nn.MultiheadAttention's state_dict, by PyTorch's key names, as a config and weights:
//   in_proj_weight (3E, E)                         when kdim = vdim = E, or
//   q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim)
//   in_proj_bias (3E,) and out_proj.bias (E,)     both or neither (bias=False)
//   out_proj.weight (E, E)
//   bias_k, bias_v (1, 1, E)                       both or neither (add_bias_kv)
// `safetensors.torch.save_file(mha.state_dict(), "w.safetensors")` writes exactly these.
// num_heads is not in a state_dict: it comes from the caller or from __metadata__["num_heads"].
// A missing, extra or mis-shaped tensor is a FileError naming it and the shape expected.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "vkattn/io/safetensors.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/modules/transformer_encoder.h"

namespace vkattn::io {

struct AttentionState {
  // embed_dim, num_heads, bias, add_bias_kv, kdim and vdim as the file says; batch_first and
  // add_zero_attn are the caller's (they leave no trace in a state_dict).
  MultiHeadAttentionConfig config;
  MultiHeadAttentionWeights weights;
};

// The number of heads: `requested` when > 0, else __metadata__["num_heads"]; given and stored,
// they must agree. A FileError "SOURCE: …" when neither says, or the metadata is no positive integer.
int64_t num_heads(const Safetensors& file, int64_t requested, const std::string& source);

// `num_heads` 0 means: take it from the metadata. Given and present in the metadata, they must agree.
// `prefix` reads the attention of a larger module ("layers.0.self_attn."): only names under it
// are looked at, and messages name tensors in full.
AttentionState attention_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source,
                                         const std::string& prefix = "");
AttentionState load_attention(const std::filesystem::path& path, int64_t num_heads = 0);
// The other way: a module's weights under PyTorch's names, as nn.MultiheadAttention.state_dict()
// holds them (in_proj_weight when kdim = vdim = E, else q/k/v_proj_weight; bias_k, bias_v (1, 1, E)).
std::map<std::string, Tensor> attention_state_dict(const MultiHeadAttentionConfig& config,
                                                   const MultiHeadAttentionWeights& weights);

// torch.nn.TransformerEncoder's state_dict — layers.N.self_attn.in_proj_weight (3E, E),
// layers.N.self_attn.in_proj_bias (3E,), layers.N.self_attn.out_proj.weight / .bias,
// layers.N.linear1.weight (F, E) / .bias (F,), layers.N.linear2.weight (E, F) / .bias,
// layers.N.norm1.weight / .bias, layers.N.norm2.weight / .bias (E,) for N = 0 … n-1, and
// norm.weight / norm.bias (E,) when it has a final norm — or one nn.TransformerEncoderLayer's
// (the same names without "layers.N."). The layer count, E and F come from the file; num_heads
// as for attention; activation, norm_first and layer_norm_eps leave no trace in a state_dict and
// stay at torch's defaults (relu, post-norm, 1e-5) for the caller to set. A missing, extra or
// mis-shaped tensor, or a gap in the layer numbers, is a FileError naming it.
struct EncoderState {
  TransformerEncoderConfig config;
  TransformerEncoderWeights weights;
  bool single_layer = false;  // the file is one TransformerEncoderLayer's (config.num_layers == 1)
};

EncoderState encoder_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source);
EncoderState load_encoder(const std::filesystem::path& path, int64_t num_heads = 0);

// torch.nn.TransformerDecoder's state_dict — layers.N.self_attn.…, layers.N.multihead_attn.…
// (in_proj_weight, in_proj_bias, out_proj.weight / .bias each), layers.N.linear1 / linear2,
// layers.N.norm1 / norm2 / norm3, and norm.… when it has a final norm — or one
// nn.TransformerDecoderLayer's. As for the encoder: shapes from the file, heads from the caller
// or __metadata__, the rest at torch's defaults, and a FileError naming what is wrong.
struct DecoderState {
  TransformerDecoderConfig config;
  TransformerDecoderWeights weights;
  bool single_layer = false;
};
DecoderState decoder_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source);
DecoderState load_decoder(const std::filesystem::path& path, int64_t num_heads = 0);

// torch.nn.Transformer's state_dict: an encoder's names under encoder. and a decoder's under
// decoder., both with their final norm.
struct TransformerState {
  TransformerConfig config;
  TransformerWeights weights;
};
TransformerState transformer_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source);
TransformerState load_transformer(const std::filesystem::path& path, int64_t num_heads = 0);

// A Llama / Mistral / Qwen attention's state_dict under Hugging Face's names: q_proj.weight
// (H·d, E), k_proj.weight and v_proj.weight (H_kv·d, E), o_proj.weight (E, H·d), and
// q_proj.bias, k_proj.bias, v_proj.bias (all or none) and o_proj.bias when the model has them.
// `prefix` reads one layer of a whole model's file ("model.layers.0.self_attn."). The heads H
// come from config.num_heads or __metadata__ num_heads (as for nn.MultiheadAttention); E, d and
// H_kv follow from the shapes, and config.num_kv_heads, when given, must agree. RoPE (θ,
// convention, rotary dims), causal and the window leave no trace in a state_dict: they are
// taken from `config`. A missing, extra or mis-shaped tensor is a FileError naming it.
struct GroupedQueryState {
  GroupedQueryAttentionConfig config;
  GroupedQueryAttentionWeights weights;
};
GroupedQueryState grouped_query_from_state_dict(const Safetensors& file, GroupedQueryAttentionConfig config,
                                                const std::string& source, const std::string& prefix = "");
GroupedQueryState load_grouped_query(const std::filesystem::path& path, GroupedQueryAttentionConfig config);

// A CausalLM's state_dict, under the names <vkattn/modules/causal_lm.h> gives, in a safetensors
// file. E, F, V, P and the layer count come from the shapes; num_heads, activation ("relu" | "gelu"), norm_first ("true" |
// "false") and layer_norm_eps from __metadata__ (num_heads is required). A missing, extra or
// mis-shaped tensor is a FileError naming it.
struct CausalLMState {
  CausalLMConfig config;
  CausalLMWeights weights;
  std::map<std::string, std::string> metadata;  // the file's, for a tokenizer's vocabulary
};
CausalLMState causal_lm_from_state_dict(const Safetensors& file, const std::string& source);
CausalLMState load_causal_lm(const std::filesystem::path& path);

}  // namespace vkattn::io
