#pragma once
// The .npy inputs and outputs of `vkattn run` and `vkattn encode`: read and checked with one
// readable error each (a FileError naming the file), results refused when not finite.
#include <cstdint>
#include <optional>
#include <string>

#include "vkattn/io/pretrained.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace CLI {
class App;
class Option;
}

namespace vkattn::cli {

// The module and inputs of `vkattn run` and `vkattn check`: a state_dict and batch-first .npy files.
struct AttentionArgs {
  std::string weights, query, key, value;
  int64_t heads = 0;  // 0: from the weight file's __metadata__
  bool causal = false;
  std::string key_padding_mask, attn_mask;
};
// --weights, --query, --key, --value, --heads, --causal, --key-padding-mask, --attn-mask;
// --weights and --query required unless `optional` (a command that checks them itself).
void add_attention_args(CLI::App& cmd, AttentionArgs& args, bool optional = false);

// What those name, read and checked.
struct AttentionInputs {
  MultiHeadAttention module;         // batch_first
  Tensor query;
  std::optional<Tensor> key, value;  // cross-attention's; self-attention has the query alone
  ForwardOptions options;            // the masks and is_causal
  // Self-attention passes the query itself three times: uploaded once, and one input to pack.
  const Tensor& key_or_query() const { return key ? *key : query; }
  const Tensor& value_or_query() const { return value ? *value : query; }
};
AttentionInputs read_attention_inputs(const AttentionArgs& args);

// --weights-dtype stored|BF16|F16 (run, check, generate): a --model folder's weights rounded to
// bfloat16 or float16 as they are read and kept so on the GPU (io::LoadOptions::weights_dtype).
CLI::Option* add_weights_dtype(CLI::App& cmd, std::string& dtype);
// --weights-dtype's and --cache-dtype's BF16 and F16 (safetensors' names); float32 otherwise
Narrow narrow_named(const std::string& dtype);
// The --model folder, its weights as --weights-dtype rounds them
io::Pretrained load_model(const std::string& dir, const std::string& weights_dtype);
// "", or where --weights-dtype rounded the weights: "\n  its weights rounded to bfloat16 as they were
// read (--weights-dtype BF16)", a line to follow the module's description
std::string rounded_words(const std::string& weights_dtype);

// A checkpoint's text as its tokenizer reads it: int64 ids (1, T). UsageError "--text: …" for
// text that is not UTF-8 or gives no token.
Tensor text_tokens(const io::Pretrained& model, const std::string& text);
// --text and --text-pair joined by the tokenizer's template for pairs (Tokenizer::encode_pair):
// the ids (1, T) and their token types (1, T), int64, those where the encoder has token types
// (not DistilBERT's). UsageError "--text-pair: …" where a text is empty or not UTF-8, or the
// tokenizer has no template for pairs.
struct TextPair {
  Tensor ids;
  std::optional<Tensor> type_ids;
};
TextPair text_pair_tokens(const io::Pretrained& model, const std::string& text, const std::string& pair);

// An encoder's or decoder's layers: what their state_dict cannot say.
struct LayerArgs {
  std::string activation = "relu";  // or "gelu"
  bool norm_first = false;
  double eps = 1e-5;
};
// --activation, --norm-first, --eps, each named as for `only` (" (an encoder or decoder)") where
// the command runs other modules too.
void add_layer_args(CLI::App& cmd, LayerArgs& args, const std::string& only = "");
// The flags onto the config read from the state_dict.
void apply_layer_args(const LayerArgs& args, TransformerEncoderLayerConfig& layer);

// `vkattn run`'s flags for a grouped-query attention (a state_dict under Hugging Face's names,
// q_proj … o_proj): what the file cannot say. Zero or empty: not given.
struct GroupedQueryArgs {
  int64_t kv_heads = 0;     // H_kv, checked against k_proj.weight; 0: from its shape
  std::string rope;         // "half" | "pairs"; empty: half (Hugging Face's rotate_half)
  double rope_theta = 0;    // θ; 0: 10000
  int64_t rotary_dims = 0;  // features of each head rotated; 0: all
  int64_t window = 0;       // the sliding window W; 0: none
  bool given() const { return kv_heads || !rope.empty() || rope_theta != 0 || rotary_dims || window; }
};
// --kv-heads, --rope, --rope-theta, --rotary-dims, --window.
void add_grouped_query_args(CLI::App& cmd, GroupedQueryArgs& args);
// The module they and AttentionArgs name (--heads, --causal; the file's shapes give the rest).
// UsageError for what a grouped-query attention does not take: --key/--value (it is
// self-attention), --attn-mask, and --window without --causal.
GroupedQueryAttention read_grouped_query(const AttentionArgs& args, const GroupedQueryArgs& grouped);
// Which module a state_dict is, by its names: "grouped-query attention" (o_proj.weight),
// "decoder" (multihead_attn.…), "encoder" (linear1.… without multihead_attn) or "attention".
std::string module_kind(const std::string& weights);

// An input sequence: float, (B, T, features) batch-first or unbatched (T, features), every value
// finite. `what` names it in errors ("query", "input").
Tensor read_input(const std::string& path, const char* what);

// A mask, or nothing for an empty path: bool (True blocks) or float (added to the scores; -inf
// blocks, NaN and +inf are refused).
std::optional<Tensor> read_mask(const std::string& path, const char* what);

// A result is never written with NaN or Inf in it: a runtime error naming the first one.
void require_finite(const Tensor& t, const char* what);

// "output (2, 5, 16) -> O.npy", or its min, max and mean when it is not saved.
void print_summary(const Tensor& t, const std::string& what, const std::string& path);

// torch's repr of a layer stack, e.g. "nn.TransformerEncoder(2 × TransformerEncoderLayer(d_model=16,
// nhead=2, …), norm=LayerNorm(16))", or "nn.TransformerDecoderLayer(…)" for one layer. `kind`:
// "Encoder" or "Decoder".
std::string describe_stack(const std::string& kind, const TransformerEncoderLayerConfig& layer, bool single_layer,
                           int64_t num_layers, bool final_norm);

}  // namespace vkattn::cli
