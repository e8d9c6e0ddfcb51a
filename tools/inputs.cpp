#include "tools/inputs.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "tools/commands.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"

namespace vkattn::cli {

namespace {

// The first value that is NaN, or infinite (-inf is allowed where it means "blocked").
std::optional<size_t> first_bad_value(const Tensor& t, bool allow_negative_infinity) {
  for (size_t i = 0; i < t.data.size(); ++i) {
    float v = t.data[i];
    if (std::isnan(v) || (std::isinf(v) && !(allow_negative_infinity && v < 0))) return i;
  }
  return std::nullopt;
}

std::string describe_value(float v) { return std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"); }

}  // namespace

// query / key / value: float, (B, T, features) or unbatched (T, features), every value finite.
Tensor read_input(const std::string& path, const char* what) {
  Tensor t = io::read_npy(path);
  if (t.dtype != DType::float32) throw FileError(path + ": the " + what + " is " + dtype_name(t.dtype) + "; a float array is expected");
  if (t.rank() != 3 && t.rank() != 2) {
    throw FileError(path + ": the " + what + " has shape " + shape_string(t.shape) +
                    "; expected (B, T, features) batch-first, or (T, features) unbatched");
  }
  if (auto bad = first_bad_value(t, false)) {
    throw FileError(path + ": the " + what + " holds " + describe_value(t.data[*bad]) + " at " + shape_string(unravel_index(t.shape, static_cast<int64_t>(*bad))));
  }
  return t;
}

// A mask: bool (True blocks) or float (added to the scores; -inf blocks, NaN and +inf are refused).
std::optional<Tensor> read_mask(const std::string& path, const char* what) {
  if (path.empty()) return std::nullopt;
  Tensor t = io::read_npy(path);
  if (t.dtype == DType::int64) throw FileError(path + ": the " + what + " is int64; a bool or float array is expected");
  if (auto bad = first_bad_value(t, true)) {
    throw FileError(path + ": the " + what + " holds " + describe_value(t.data[*bad]) + " at " + shape_string(unravel_index(t.shape, static_cast<int64_t>(*bad))) +
                    " (a float mask is added to the scores: finite values, or -inf to block)");
  }
  return t;
}

// A result is never written with NaN or Inf in it: that is a failure, not an answer.
void require_finite(const Tensor& t, const char* what) {
  if (auto bad = first_bad_value(t, false)) {
    throw std::runtime_error(std::string("the ") + what + " " + shape_string(t.shape) + " holds " +
                             describe_value(t.data[*bad]) + " at " + shape_string(unravel_index(t.shape, static_cast<int64_t>(*bad))) + "; nothing was written");
  }
}

void add_attention_args(CLI::App& cmd, AttentionArgs& a, bool optional) {
  cmd.add_option("--weights", a.weights, "W.safetensors: the module's state_dict under PyTorch's names")->required(!optional);
  cmd.add_option("--query", a.query, "Q.npy: float (B, L, E) batch-first, or unbatched (L, E)")->required(!optional);
  auto* key = cmd.add_option("--key", a.key, "K.npy: (B, S, kdim); with --value; default: the query");
  auto* value = cmd.add_option("--value", a.value, "V.npy: (B, S, vdim); with --key; default: the query");
  key->needs(value);
  value->needs(key);
  cmd.add_option("--heads", a.heads, "H; default: num_heads in the weight file's __metadata__")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd.add_flag("--causal", a.causal, "block each query from later keys (with any --attn-mask)");
  cmd.add_option("--key-padding-mask", a.key_padding_mask, "M.npy (B, S): bool True ignores that key, or float added");
  cmd.add_option("--attn-mask", a.attn_mask, "A.npy (L, S) or (B*H, L, S): bool True blocks, or float added");
}

AttentionInputs read_attention_inputs(const AttentionArgs& a) {
  auto state = io::load_attention(a.weights, a.heads);
  state.config.batch_first = true;
  AttentionInputs in{MultiHeadAttention(state.config, std::move(state.weights)), read_input(a.query, "query"),
                     std::nullopt, std::nullopt, {}};
  if (!a.key.empty()) in.key = read_input(a.key, "key");
  if (!a.value.empty()) in.value = read_input(a.value, "value");
  in.options.key_padding_mask = read_mask(a.key_padding_mask, "key padding mask");
  in.options.attn_mask = read_mask(a.attn_mask, "attention mask");
  in.options.is_causal = a.causal;
  return in;
}

void add_grouped_query_args(CLI::App& cmd, GroupedQueryArgs& g) {
  const std::string only = " (a grouped-query attention: q_proj … o_proj in --weights)";
  cmd.add_option("--kv-heads", g.kv_heads, "H_kv key/value heads, each shared by H / H_kv query heads; "
                                           "default: from k_proj.weight" + only)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd.add_option("--rope", g.rope, "RoPE's convention: half (GPT-NeoX, Hugging Face) or pairs (GPT-J, Meta's "
                                   "Llama code); default: half" + only)
      ->check(CLI::IsMember({"half", "pairs"}));
  cmd.add_option("--rope-theta", g.rope_theta, "RoPE's base θ; default: 10000" + only)
      ->check(CLI::Range(1.0 + 1e-6, 1e30));
  cmd.add_option("--rotary-dims", g.rotary_dims, "features of each head that RoPE rotates, even; default: all" + only)
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd.add_option("--window", g.window, "sliding window W: each query sees the last W keys; needs --causal" + only)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
}

std::string module_kind(const std::string& weights) {
  bool encoder = false;
  for (const auto& [name, tensor] : io::read_safetensors(weights).tensors) {
    if (name == "o_proj.weight") return "grouped-query attention";
    if (name.starts_with("multihead_attn.") || name.find(".multihead_attn.") != std::string::npos) return "decoder";
    encoder |= name == "linear1.weight" || name.ends_with(".linear1.weight");
  }
  return encoder ? "encoder" : "attention";
}

CLI::Option* add_weights_dtype(CLI::App& cmd, std::string& dtype) {
  return cmd
      .add_option("--weights-dtype", dtype,
                  "BF16 or F16: --model's weights rounded to bfloat16 or float16 as they are read, kept so on the "
                  "GPU (an F32 checkpoint in half the memory, its numbers rounded); stored: as the files hold them")
      ->check(CLI::IsMember({"stored", "BF16", "F16"}))
      ->capture_default_str();
}

Narrow narrow_named(const std::string& dtype) {
  return dtype == "BF16" ? Narrow::bfloat16 : dtype == "F16" ? Narrow::float16 : Narrow::none;
}

io::Pretrained load_model(const std::string& dir, const std::string& weights_dtype) {
  return io::load_pretrained(dir, {.weights_dtype = narrow_named(weights_dtype)});
}

std::string rounded_words(const std::string& weights_dtype) {
  const Narrow narrow = narrow_named(weights_dtype);
  if (narrow == Narrow::none) return "";
  return std::string("\n  its weights rounded to ") + narrow_name(narrow) + " as they were read (--weights-dtype " +
         weights_dtype + ")";
}

Tensor text_tokens(const io::Pretrained& model, const std::string& text) {
  std::vector<int64_t> ids;
  try {
    ids = model.tokenizer->encode(text);
  } catch (const ShapeError& e) {  // not UTF-8
    throw UsageError("--text: " + std::string(e.what()));
  }
  if (ids.empty()) throw UsageError("--text is empty: give the model at least one token");
  return Tensor(Shape{1, static_cast<int64_t>(ids.size())}, std::vector<float>(ids.begin(), ids.end()), DType::int64);
}

TextPair text_pair_tokens(const io::Pretrained& model, const std::string& text, const std::string& pair) {
  text_tokens(model, text);  // its own checks
  text::EncodedPair joined;
  try {
    if (model.tokenizer->encode(pair).size() == model.tokenizer->encode("").size()) {  // the template's tokens alone
      throw UsageError("--text-pair is empty: give it at least one token");
    }
    joined = model.tokenizer->encode_pair(text, pair);
  } catch (const ShapeError& e) {  // not UTF-8
    throw UsageError("--text-pair: " + std::string(e.what()));
  } catch (const ConfigError& e) {  // no template for pairs
    throw UsageError("--text-pair: " + std::string(e.what()));
  }
  auto row = [](const std::vector<int64_t>& v) {
    return Tensor(Shape{1, static_cast<int64_t>(v.size())}, std::vector<float>(v.begin(), v.end()), DType::int64);
  };
  const bool types = model.encoder && model.encoder->config().type_vocab_size > 0;
  return {row(joined.ids), types ? std::optional<Tensor>(row(joined.type_ids)) : std::nullopt};
}

void add_layer_args(CLI::App& cmd, LayerArgs& a, const std::string& only) {
  cmd.add_option("--activation", a.activation, "the feed-forward activation: relu (torch's default) or gelu" + only)
      ->check(CLI::IsMember({"relu", "gelu"}))
      ->capture_default_str();
  cmd.add_flag("--norm-first", a.norm_first, "pre-norm layers (norm_first=True): x + attn(norm1(x)), …" + only);
  cmd.add_option("--eps", a.eps, "layer_norm_eps" + only)->capture_default_str()->check(kPositiveNumber);
}

void apply_layer_args(const LayerArgs& a, TransformerEncoderLayerConfig& layer) {
  layer.activation = a.activation == "gelu" ? Activation::gelu : Activation::relu;
  layer.norm_first = a.norm_first;
  layer.layer_norm_eps = static_cast<float>(a.eps);
}

GroupedQueryAttention read_grouped_query(const AttentionArgs& a, const GroupedQueryArgs& g) {
  if (!a.key.empty() || !a.value.empty()) {
    throw UsageError(a.weights + " is a grouped-query attention (q_proj … o_proj), which attends a sequence to "
                     "itself: drop --key and --value");
  }
  if (!a.attn_mask.empty()) {
    throw UsageError(a.weights + " is a grouped-query attention: it takes --causal, --window and "
                     "--key-padding-mask, not --attn-mask");
  }
  if (g.window && !a.causal) throw UsageError("--window " + std::to_string(g.window) + " needs --causal");
  GroupedQueryAttentionConfig config;
  config.num_heads = a.heads;
  config.num_kv_heads = g.kv_heads;
  config.rope = parse_rotary_convention(g.rope.empty() ? "half" : g.rope);
  if (g.rope_theta != 0) config.rope_theta = static_cast<float>(g.rope_theta);
  config.rotary_dims = g.rotary_dims;
  config.causal = a.causal;
  config.sliding_window = g.window;
  io::GroupedQueryState state = io::load_grouped_query(a.weights, config);
  return GroupedQueryAttention(state.config, std::move(state.weights));
}

void print_summary(const Tensor& t, const std::string& what, const std::string& path) {
  std::cout << what << " " << shape_string(t.shape);
  if (!path.empty()) {
    std::cout << " -> " << path << "\n";
    return;
  }
  float lo = INFINITY, hi = -INFINITY;
  double sum = 0;
  for (float v : t.data) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  std::cout << ": min " << lo << ", max " << hi << ", mean " << sum / static_cast<double>(t.data.size())
            << " (not saved)\n";
}

std::string describe_stack(const std::string& kind, const TransformerEncoderLayerConfig& l, bool single_layer,
                           int64_t num_layers, bool final_norm) {
  std::ostringstream layer;
  layer << "Transformer" << kind << "Layer(d_model=" << l.d_model << ", nhead=" << l.nhead
        << ", dim_feedforward=" << l.dim_feedforward << ", activation=" << activation_name(l.activation)
        << ", norm_first=" << (l.norm_first ? "True" : "False") << ", layer_norm_eps=" << l.layer_norm_eps
        << ", batch_first=True)";
  if (single_layer) return "nn." + layer.str();
  std::ostringstream out;
  out << "nn.Transformer" << kind << "(" << num_layers << " × " << layer.str();
  if (final_norm) out << ", norm=LayerNorm(" << l.d_model << ")";
  out << ")";
  return out.str();
}

}  // namespace vkattn::cli
