#include "vkattn/io/state_dict.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <set>
#include <vector>

#include "vkattn/errors.h"

namespace vkattn::io {

namespace {

constexpr std::array kKnownNames = {"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                                    "in_proj_bias",   "out_proj.weight", "out_proj.bias", "bias_k",
                                    "bias_v"};

bool known(const std::string& name) {
  for (const char* k : kKnownNames)
    if (name == k) return true;
  return false;
}

// The tensors of one module in a state_dict: names are relative to `prefix` ("layers.0.self_attn."
// inside an encoder's file), messages give them whole.
class StateDict {
 public:
  StateDict(const Safetensors& file, const std::string& source, std::string prefix = "")
      : file_(file), source_(source), prefix_(std::move(prefix)) {}

  FileError error(const std::string& what) const { return FileError(source_ + ": " + what); }
  bool has(const std::string& name) const { return file_.tensors.count(prefix_ + name) != 0; }
  const Tensor* find(const std::string& name) const {
    auto it = file_.tensors.find(prefix_ + name);
    return it == file_.tensors.end() ? nullptr : &it->second;
  }

  // The tensor, which must exist with this shape (`expected_text` spells it, e.g. "(3·E, E) = (24, 8)").
  Tensor take(const std::string& relative, const Shape& expected, const std::string& expected_text) const {
    const std::string name = prefix_ + relative;
    auto it = file_.tensors.find(name);
    if (it == file_.tensors.end()) throw error("missing tensor '" + name + "', expected shape " + expected_text);
    const Tensor& t = it->second;
    if (t.dtype != DType::float32) throw error("tensor '" + name + "' is " + dtype_name(t.dtype) + "; a float tensor is expected");
    if (t.shape != expected) {
      throw error("tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " + expected_text);
    }
    return t;
  }

  // A matrix with one dim fixed at `fixed` (dim `fixed_dim`) and the other decided by the file
  // (kdim, vdim, the feed-forward width); `expected` spells the shape, e.g. "(E, kdim) = (8, kdim)".
  Tensor take_matrix(const std::string& relative, int fixed_dim, int64_t fixed, const std::string& expected) const {
    const std::string name = prefix_ + relative;
    const Tensor* t = find(relative);
    if (!t) throw error("missing tensor '" + name + "', expected shape " + expected);
    if (t->rank() != 2 || t->dim(fixed_dim) != fixed || t->dim(1 - fixed_dim) == 0) {
      throw error("tensor '" + name + "' has shape " + shape_string(t->shape) + ", expected " + expected);
    }
    return take(relative, t->shape, expected);
  }
  Tensor take_input_projection(const std::string& relative, int64_t E, const std::string& width) const {
    return take_matrix(relative, 0, E, "(E, " + width + ") = (" + std::to_string(E) + ", " + width + ")");
  }


 private:
  const Safetensors& file_;
  const std::string& source_;
  std::string prefix_;
};

std::string dims(std::initializer_list<std::string> names, const Shape& values) {
  std::string text = "(";
  size_t i = 0;
  for (const auto& n : names) text += (i++ ? ", " : "") + n;
  return text + (names.size() == 1 ? ",)" : ")") + " = " + shape_string(values);
}

}  // namespace

int64_t num_heads(const Safetensors& file, int64_t requested, const std::string& source) {
  StateDict sd(file, source);
  auto it = file.metadata.find("num_heads");
  std::optional<int64_t> stored;
  if (it != file.metadata.end()) {
    int64_t value = 0;
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value <= 0) {
      throw sd.error("__metadata__ num_heads is '" + text + "', not a positive integer");
    }
    stored = value;
  }
  if (requested > 0 && stored && *stored != requested) {
    throw sd.error("--heads " + std::to_string(requested) + " disagrees with num_heads " + std::to_string(*stored) +
                   " in __metadata__");
  }
  if (requested > 0) return requested;
  if (!stored) throw sd.error("the number of heads is unknown: pass --heads, or store num_heads in __metadata__");
  return *stored;
}

AttentionState attention_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source,
                                         const std::string& prefix) {
  StateDict sd(file, source, prefix);
  for (const auto& [full_name, tensor] : file.tensors) {
    if (!full_name.starts_with(prefix)) continue;  // another module's, for the caller to judge
    const std::string name = full_name.substr(prefix.size());
    if (known(name)) continue;
    std::string hint;
    for (const char* k : kKnownNames) {
      std::string suffix = std::string(".") + k;
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        hint = "; save the nn.MultiheadAttention's own state_dict, without the '" +
               name.substr(0, name.size() - suffix.size() + 1) + "' prefix";
      }
    }
    if (!prefix.empty()) hint.clear();  // inside a larger module the prefix is the module's path
    throw sd.error("unexpected tensor '" + full_name + "' " + shape_string(tensor.shape) +
                   " in an nn.MultiheadAttention state_dict" + hint);
  }

  AttentionState state;
  auto& c = state.config;
  auto& w = state.weights;
  const Tensor* out_weight = sd.find("out_proj.weight");
  if (!out_weight) throw sd.error("missing tensor '" + prefix + "out_proj.weight', expected shape (E, E)");
  const Tensor& out = *out_weight;
  if (out.rank() != 2 || out.dim(0) != out.dim(1) || out.dim(0) == 0) {
    throw sd.error("tensor '" + prefix + "out_proj.weight' has shape " + shape_string(out.shape) + ", expected (E, E)");
  }
  const int64_t E = out.dim(0);
  c.embed_dim = E;
  w.out_proj_weight = sd.take("out_proj.weight", {E, E}, dims({"E", "E"}, {E, E}));

  if (sd.has("in_proj_weight")) {
    for (const char* separate : {"q_proj_weight", "k_proj_weight", "v_proj_weight"}) {
      if (sd.has(separate)) {
        throw sd.error("tensor '" + prefix + separate + "' given beside '" + prefix + "in_proj_weight'; a state_dict has one or the other");
      }
    }
    Tensor in = sd.take("in_proj_weight", {3 * E, E}, dims({"3·E", "E"}, {3 * E, E}));
    w.q_proj_weight = slice_rows(in, 0, E);
    w.k_proj_weight = slice_rows(in, E, E);
    w.v_proj_weight = slice_rows(in, 2 * E, E);
  } else {
    if (!sd.has("q_proj_weight") && !sd.has("k_proj_weight") && !sd.has("v_proj_weight")) {
      throw sd.error("missing tensor '" + prefix + "in_proj_weight', expected shape " + dims({"3·E", "E"}, {3 * E, E}) +
                     " (or q_proj_weight, k_proj_weight and v_proj_weight)");
    }
    w.q_proj_weight = sd.take("q_proj_weight", {E, E}, dims({"E", "E"}, {E, E}));
    w.k_proj_weight = sd.take_input_projection("k_proj_weight", E, "kdim");
    w.v_proj_weight = sd.take_input_projection("v_proj_weight", E, "vdim");
    c.kdim = w.k_proj_weight.dim(1);
    c.vdim = w.v_proj_weight.dim(1);
  }

  // Biases: PyTorch's bias=True gives both in_proj_bias and out_proj.bias, bias=False neither.
  c.bias = sd.has("in_proj_bias") || sd.has("out_proj.bias");
  if (c.bias) {
    Tensor in_bias = sd.take("in_proj_bias", {3 * E}, dims({"3·E"}, {3 * E}));
    w.q_proj_bias = slice_rows(in_bias, 0, E);
    w.k_proj_bias = slice_rows(in_bias, E, E);
    w.v_proj_bias = slice_rows(in_bias, 2 * E, E);
    w.out_proj_bias = sd.take("out_proj.bias", {E}, dims({"E"}, {E}));
  }
  // bias_k / bias_v are (1, 1, E) parameters in PyTorch; the engine keeps them as (E,).
  c.add_bias_kv = sd.has("bias_k") || sd.has("bias_v");
  if (c.add_bias_kv) {
    for (auto [name, slot] : {std::pair{"bias_k", &w.bias_k}, std::pair{"bias_v", &w.bias_v}}) {
      Tensor t = sd.take(name, {1, 1, E}, dims({"1", "1", "E"}, {1, 1, E}));
      t.shape = {E};
      *slot = std::move(t);
    }
  }
  c.num_heads = io::num_heads(file, num_heads, source);
  return state;
}

AttentionState load_attention(const std::filesystem::path& path, int64_t num_heads) {
  return attention_from_state_dict(read_safetensors(path), num_heads, path.string());
}

std::map<std::string, Tensor> attention_state_dict(const MultiHeadAttentionConfig& c,
                                                   const MultiHeadAttentionWeights& w) {
  std::map<std::string, Tensor> state;
  if (c.key_dim() == c.embed_dim && c.value_dim() == c.embed_dim) {
    state["in_proj_weight"] = stack_rows({&w.q_proj_weight, &w.k_proj_weight, &w.v_proj_weight});
  } else {
    state["q_proj_weight"] = w.q_proj_weight;
    state["k_proj_weight"] = w.k_proj_weight;
    state["v_proj_weight"] = w.v_proj_weight;
  }
  state["out_proj.weight"] = w.out_proj_weight;
  if (c.bias) {
    state["in_proj_bias"] = stack_rows({&*w.q_proj_bias, &*w.k_proj_bias, &*w.v_proj_bias});
    state["out_proj.bias"] = *w.out_proj_bias;
  }
  if (c.add_bias_kv) {
    state["bias_k"] = Tensor({1, 1, c.embed_dim}, w.bias_k->data);
    state["bias_v"] = Tensor({1, 1, c.embed_dim}, w.bias_v->data);
  }
  return state;
}

namespace {

// What a transformer layer holds besides its attentions' tensors, and what they are called.
struct LayerKind {
  const char* layer;                     // "nn.TransformerEncoderLayer"
  const char* stack;                     // "nn.TransformerEncoder"
  std::vector<std::string> attentions;   // "self_attn" (, "multihead_attn")
  std::vector<std::string> norms;        // "norm1", "norm2" (, "norm3")
};
const LayerKind kEncoderLayer{"nn.TransformerEncoderLayer", "nn.TransformerEncoder", {"self_attn"}, {"norm1", "norm2"}};
const LayerKind kDecoderLayer{"nn.TransformerDecoderLayer", "nn.TransformerDecoder", {"self_attn", "multihead_attn"},
                              {"norm1", "norm2", "norm3"}};

// Whether `name`, relative to a layer's prefix, is one of a layer's tensors.
bool known_in_layer(const LayerKind& kind, const std::string& name) {
  for (const auto& a : kind.attentions)
    if (name.starts_with(a + ".")) return known(name.substr(a.size() + 1));
  for (const char* k : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"})
    if (name == k) return true;
  for (const auto& n : kind.norms)
    if (name == n + ".weight" || name == n + ".bias") return true;
  return false;
}

// "layers.12.norm1.weight" -> 12 (and the rest after "layers.12."); nothing when it is no layer's.
std::optional<int64_t> layer_index(const std::string& name, std::string* rest) {
  if (!name.starts_with("layers.")) return std::nullopt;
  size_t dot = name.find('.', 7);
  if (dot == std::string::npos || dot == 7 || dot - 7 > 6) return std::nullopt;
  std::string digits = name.substr(7, dot - 7);
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  int64_t index = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  *rest = name.substr(dot + 1);
  return index;
}

// One layer's tensors under `prefix`, in the kind's order.
struct ParsedLayer {
  std::vector<MultiHeadAttentionWeights> attentions;
  Tensor linear1_weight, linear1_bias, linear2_weight, linear2_bias;
  std::vector<LayerNormWeights> norms;
  int64_t E = 0, F = 0, heads = 0;
};

ParsedLayer parse_layer(const Safetensors& file, int64_t num_heads, const std::string& source,
                        const std::string& prefix, const LayerKind& kind) {
  StateDict sd(file, source, prefix);
  ParsedLayer layer;
  for (const auto& name : kind.attentions) {
    AttentionState attention = attention_from_state_dict(file, num_heads, source, prefix + name + ".");
    const auto& a = attention.config;
    if (!a.bias || a.add_bias_kv || a.kdim || a.vdim) {
      throw sd.error("'" + prefix + name + "' must be a " + kind.layer +
                     "'s: in_proj_weight and in_proj_bias, no bias_k / bias_v");
    }
    if (layer.attentions.empty()) {
      layer.E = a.embed_dim;
      layer.heads = a.num_heads;
    } else if (a.embed_dim != layer.E) {
      throw sd.error("'" + prefix + name + "' has embed_dim " + std::to_string(a.embed_dim) + " but '" + prefix +
                     kind.attentions[0] + "' has " + std::to_string(layer.E));
    }
    layer.attentions.push_back(std::move(attention.weights));
  }
  const int64_t E = layer.E;
  layer.linear1_weight = sd.take_matrix("linear1.weight", 1, E, "(F, E) = (F, " + std::to_string(E) + ")");
  const int64_t F = layer.F = layer.linear1_weight.dim(0);
  layer.linear1_bias = sd.take("linear1.bias", {F}, dims({"F"}, {F}));
  layer.linear2_weight = sd.take("linear2.weight", {E, F}, dims({"E", "F"}, {E, F}));
  layer.linear2_bias = sd.take("linear2.bias", {E}, dims({"E"}, {E}));
  for (const auto& name : kind.norms) {
    layer.norms.push_back({sd.take(name + ".weight", {E}, dims({"E"}, {E})), sd.take(name + ".bias", {E}, dims({"E"}, {E}))});
  }
  return layer;
}

// A stack of layers under `root` ("" or "encoder."): root.layers.N.… and root.norm.…, or — when
// `root` is "" and no name starts with layers. — one layer's names.
struct ParsedStack {
  std::vector<ParsedLayer> layers;
  std::optional<LayerNormWeights> norm;
  TransformerEncoderLayerConfig layer;  // d_model, nhead, dim_feedforward; the rest at torch's defaults
  bool single_layer = false;
};

ParsedStack parse_stack(const Safetensors& file, int64_t num_heads, const std::string& source, const LayerKind& kind,
                        const std::string& root = "") {
  StateDict sd(file, source, root);
  ParsedStack stack;
  std::vector<std::string> prefixes;
  auto mine = [&](const std::string& name) { return name.starts_with(root); };
  stack.single_layer = root.empty() && std::none_of(file.tensors.begin(), file.tensors.end(),
                                                    [](const auto& t) { return t.first.starts_with("layers."); });
  if (stack.single_layer) {
    for (const auto& [name, tensor] : file.tensors) {
      if (!known_in_layer(kind, name)) {
        throw sd.error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) + " in an " + kind.layer +
                       " state_dict");
      }
    }
    prefixes.push_back("");
  } else {
    std::set<int64_t> indices;
    for (const auto& [name, tensor] : file.tensors) {
      if (!mine(name)) continue;  // the caller's to judge
      std::string rest;
      auto index = layer_index(name.substr(root.size()), &rest);
      if (index && known_in_layer(kind, rest)) {
        indices.insert(*index);
      } else if (name != root + "norm.weight" && name != root + "norm.bias") {
        throw sd.error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) + " in an " + kind.stack +
                       " state_dict (" + root + "layers.N.… and " + root + "norm.… are expected)");
      }
    }
    if (indices.empty()) {
      throw sd.error("missing tensor '" + root + "layers.0." + kind.attentions[0] + ".in_proj_weight': an " +
                     kind.stack + " has at least one layer");
    }
    int64_t expected = 0;
    for (int64_t index : indices) {
      if (index != expected) {
        std::string found;
        for (int64_t i : indices) found += (found.empty() ? "" : ", ") + std::to_string(i);
        throw sd.error("layer " + std::to_string(expected) + " is missing: the file has " + root +
                       "layers.N for N in {" + found + "}");
      }
      ++expected;
    }
    for (int64_t i = 0; i < expected; ++i) prefixes.push_back(root + "layers." + std::to_string(i) + ".");
  }

  auto& c = stack.layer;
  for (const std::string& prefix : prefixes) {
    stack.layers.push_back(parse_layer(file, num_heads, source, prefix, kind));
    const ParsedLayer& l = stack.layers.back();
    if (prefix == prefixes.front()) {
      c.d_model = l.E;
      c.nhead = l.heads;
      c.dim_feedforward = l.F;
    } else if (l.E != c.d_model || l.F != c.dim_feedforward) {
      throw sd.error("'" + prefix + "' has d_model " + std::to_string(l.E) + " and dim_feedforward " +
                     std::to_string(l.F) + " but " + prefixes.front().substr(0, prefixes.front().size() - 1) + " has " + std::to_string(c.d_model) + " and " +
                     std::to_string(c.dim_feedforward) + "; every layer of a stack has the same shape");
    }
  }
  if (sd.has("norm.weight") || sd.has("norm.bias")) {
    const int64_t E = c.d_model;
    stack.norm = LayerNormWeights{sd.take("norm.weight", {E}, dims({"E"}, {E})), sd.take("norm.bias", {E}, dims({"E"}, {E}))};
  }
  return stack;
}

EncoderState to_encoder(ParsedStack stack) {
  EncoderState state;
  state.single_layer = stack.single_layer;
  state.config.layer = stack.layer;
  state.config.num_layers = static_cast<int64_t>(stack.layers.size());
  state.config.final_norm = stack.norm.has_value();
  state.weights.norm = std::move(stack.norm);
  for (auto& l : stack.layers) {
    state.weights.layers.push_back({std::move(l.attentions[0]), std::move(l.linear1_weight), std::move(l.linear1_bias),
                                    std::move(l.linear2_weight), std::move(l.linear2_bias), std::move(l.norms[0]),
                                    std::move(l.norms[1])});
  }
  return state;
}

DecoderState to_decoder(ParsedStack stack) {
  DecoderState state;
  state.single_layer = stack.single_layer;
  state.config.layer = stack.layer;
  state.config.num_layers = static_cast<int64_t>(stack.layers.size());
  state.config.final_norm = stack.norm.has_value();
  state.weights.norm = std::move(stack.norm);
  for (auto& l : stack.layers) {
    state.weights.layers.push_back({std::move(l.attentions[0]), std::move(l.attentions[1]),
                                    std::move(l.linear1_weight), std::move(l.linear1_bias),
                                    std::move(l.linear2_weight), std::move(l.linear2_bias), std::move(l.norms[0]),
                                    std::move(l.norms[1]), std::move(l.norms[2])});
  }
  return state;
}

}  // namespace

EncoderState encoder_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source) {
  return to_encoder(parse_stack(file, num_heads, source, kEncoderLayer));
}

DecoderState decoder_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source) {
  return to_decoder(parse_stack(file, num_heads, source, kDecoderLayer));
}

DecoderState load_decoder(const std::filesystem::path& path, int64_t num_heads) {
  return decoder_from_state_dict(read_safetensors(path), num_heads, path.string());
}

TransformerState transformer_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source) {
  StateDict sd(file, source);
  for (const auto& [name, tensor] : file.tensors) {
    if (!name.starts_with("encoder.") && !name.starts_with("decoder.")) {
      throw sd.error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) +
                     " in an nn.Transformer state_dict (encoder.… and decoder.… are expected)");
    }
  }
  EncoderState encoder = to_encoder(parse_stack(file, num_heads, source, kEncoderLayer, "encoder."));
  DecoderState decoder = to_decoder(parse_stack(file, num_heads, source, kDecoderLayer, "decoder."));
  for (auto [name, has] : {std::pair{"encoder", encoder.config.final_norm}, {"decoder", decoder.config.final_norm}}) {
    if (!has) throw sd.error(std::string("missing tensor '") + name + ".norm.weight': nn.Transformer's " + name + " ends with a LayerNorm (E,)");
  }
  const auto& e = encoder.config.layer;
  const auto& d = decoder.config.layer;
  if (e.d_model != d.d_model || e.nhead != d.nhead || e.dim_feedforward != d.dim_feedforward) {
    throw sd.error("the encoder has d_model " + std::to_string(e.d_model) + " and dim_feedforward " +
                   std::to_string(e.dim_feedforward) + " but the decoder " + std::to_string(d.d_model) + " and " +
                   std::to_string(d.dim_feedforward) + "; nn.Transformer's are the same");
  }
  TransformerState state;
  state.config.layer = e;
  state.config.num_encoder_layers = encoder.config.num_layers;
  state.config.num_decoder_layers = decoder.config.num_layers;
  state.weights.encoder = std::move(encoder.weights);
  state.weights.decoder = std::move(decoder.weights);
  return state;
}

TransformerState load_transformer(const std::filesystem::path& path, int64_t num_heads) {
  return transformer_from_state_dict(read_safetensors(path), num_heads, path.string());
}

EncoderState load_encoder(const std::filesystem::path& path, int64_t num_heads) {
  return encoder_from_state_dict(read_safetensors(path), num_heads, path.string());
}

GroupedQueryState grouped_query_from_state_dict(const Safetensors& file, GroupedQueryAttentionConfig config,
                                                const std::string& source, const std::string& prefix) {
  StateDict sd(file, source, prefix);
  constexpr std::array kNames = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                                 "q_proj.bias",   "k_proj.bias",   "v_proj.bias",   "o_proj.bias",
                                 "q_norm.weight", "k_norm.weight"};
  for (const auto& [full_name, tensor] : file.tensors) {
    if (!full_name.starts_with(prefix)) continue;  // another module's, for the caller to judge
    const std::string name = full_name.substr(prefix.size());
    if (std::find(kNames.begin(), kNames.end(), name) == kNames.end()) {
      std::string hint = name == "in_proj_weight" || name == "out_proj.weight"
                             ? "; that is an nn.MultiheadAttention's: run it without --kv-heads, --rope and --window"
                             : "";
      throw sd.error("unexpected tensor '" + full_name + "' " + shape_string(tensor.shape) +
                     " in a grouped-query attention state_dict (q_proj, k_proj, v_proj, o_proj, q_norm, k_norm)" +
                     hint);
    }
  }
  const Tensor* o = sd.find("o_proj.weight");
  if (!o) throw sd.error("missing tensor '" + prefix + "o_proj.weight', expected shape (E, H·d)");
  if (o->rank() != 2) throw sd.error("tensor '" + prefix + "o_proj.weight' has shape " + shape_string(o->shape) + ", expected (E, H·d)");
  const int64_t E = o->dim(0), Hd = o->dim(1);
  const int64_t H = num_heads(file, config.num_heads, source);
  if (Hd % H != 0) {
    throw sd.error("tensor '" + prefix + "o_proj.weight' " + shape_string(o->shape) + " has " + std::to_string(Hd) +
                   " columns, not H·d for H = " + std::to_string(H) + " heads");
  }
  const int64_t d = Hd / H;
  GroupedQueryState state;
  auto& w = state.weights;
  w.o_proj_weight = sd.take("o_proj.weight", {E, Hd}, dims({"E", "H·d"}, {E, Hd}));
  w.q_proj_weight = sd.take("q_proj.weight", {Hd, E}, dims({"H·d", "E"}, {Hd, E}));
  const Tensor* k = sd.find("k_proj.weight");
  if (!k) throw sd.error("missing tensor '" + prefix + "k_proj.weight', expected shape (H_kv·d, E) with d = " + std::to_string(d));
  if (k->rank() != 2 || k->dim(0) % d != 0 || k->dim(0) == 0) {
    throw sd.error("tensor '" + prefix + "k_proj.weight' has shape " + shape_string(k->shape) + ", expected (H_kv·d, E) with d = " +
                   std::to_string(d) + " (H = " + std::to_string(H) + " heads in o_proj.weight's " + std::to_string(Hd) + " columns)");
  }
  const int64_t H_kv = k->dim(0) / d;
  if (config.num_kv_heads > 0 && config.num_kv_heads != H_kv) {
    throw sd.error("--kv-heads " + std::to_string(config.num_kv_heads) + " disagrees with tensor '" + prefix +
                   "k_proj.weight' " + shape_string(k->shape) + ": " + std::to_string(H_kv) + " heads of d = " + std::to_string(d));
  }
  w.k_proj_weight = sd.take("k_proj.weight", {H_kv * d, E}, dims({"H_kv·d", "E"}, {H_kv * d, E}));
  w.v_proj_weight = sd.take("v_proj.weight", {H_kv * d, E}, dims({"H_kv·d", "E"}, {H_kv * d, E}));
  const bool bias = sd.has("q_proj.bias") || sd.has("k_proj.bias") || sd.has("v_proj.bias");
  if (bias) {
    w.q_proj_bias = sd.take("q_proj.bias", {Hd}, dims({"H·d"}, {Hd}));
    w.k_proj_bias = sd.take("k_proj.bias", {H_kv * d}, dims({"H_kv·d"}, {H_kv * d}));
    w.v_proj_bias = sd.take("v_proj.bias", {H_kv * d}, dims({"H_kv·d"}, {H_kv * d}));
  }
  if (sd.has("o_proj.bias")) w.o_proj_bias = sd.take("o_proj.bias", {E}, dims({"E"}, {E}));
  const bool qk_norm = sd.has("q_norm.weight") || sd.has("k_norm.weight");  // Qwen3's, both or neither
  if (qk_norm) {
    w.q_norm_weight = sd.take("q_norm.weight", {d}, dims({"d"}, {d}));
    w.k_norm_weight = sd.take("k_norm.weight", {d}, dims({"d"}, {d}));
  }
  auto& c = state.config = config;
  c.hidden_size = E;
  c.num_heads = H;
  c.num_kv_heads = H_kv;
  c.head_dim = d;
  c.attention_bias = bias;
  c.o_proj_bias = w.o_proj_bias.has_value();
  c.qk_norm = qk_norm;
  return state;
}

GroupedQueryState load_grouped_query(const std::filesystem::path& path, GroupedQueryAttentionConfig config) {
  return grouped_query_from_state_dict(read_safetensors(path), config, path.string());
}

CausalLMState causal_lm_from_state_dict(const Safetensors& file, const std::string& source) {
  auto error = [&](const std::string& what) { return FileError(source + ": " + what); };
  Safetensors blocks;  // layers.N.… and norm.…: a TransformerEncoder's names
  blocks.metadata = file.metadata;
  for (const auto& [name, tensor] : file.tensors) {
    if (name.starts_with("layers.") || name.starts_with("norm.")) {
      blocks.tensors.emplace(name, tensor);
    } else if (name != "token_embedding.weight" && name != "position_embedding.weight" && name != "lm_head.weight" &&
               name != "lm_head.bias") {
      throw error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) +
                  " in a CausalLM state_dict (token_embedding, position_embedding, layers.N, norm, lm_head)");
    }
  }
  if (blocks.tensors.count("layers.0.self_attn.out_proj.weight") == 0) {
    throw error("missing tensor 'layers.0.self_attn.out_proj.weight': a CausalLM has at least one layer");
  }
  EncoderState encoder = encoder_from_state_dict(blocks, num_heads(file, 0, source), source);
  if (!encoder.weights.norm) throw error("missing tensor 'norm.weight', the final LayerNorm (E,)");

  CausalLMState state;
  state.metadata = file.metadata;
  auto& c = state.config;
  c.layer = encoder.config.layer;
  c.num_layers = encoder.config.num_layers;
  auto meta = [&](const char* key) -> const std::string* {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? nullptr : &it->second;
  };
  if (const auto* a = meta("activation")) {
    const auto activation = activation_from_name(*a);
    if (!activation) throw error("__metadata__ activation is '" + *a + "', not relu, gelu or gelu_tanh");
    c.layer.activation = *activation;
  }
  if (const auto* n = meta("norm_first")) {
    if (*n != "true" && *n != "false") throw error("__metadata__ norm_first is '" + *n + "', not true or false");
    c.layer.norm_first = *n == "true";
  }
  if (const auto* e = meta("layer_norm_eps")) {
    try {
      c.layer.layer_norm_eps = std::stof(*e);
    } catch (const std::exception&) {
      throw error("__metadata__ layer_norm_eps is '" + *e + "', not a number");
    }
  }
  const int64_t E = c.layer.d_model;
  auto take = [&](const std::string& name, int64_t rows) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw error("missing tensor '" + name + "', expected shape (·, " + std::to_string(E) + ")");
    const Tensor& t = it->second;
    if (t.dtype != DType::float32 || t.rank() != 2 || t.dim(1) != E || (rows > 0 && t.dim(0) != rows)) {
      throw error("tensor '" + name + "' is " + dtype_name(t.dtype) + " " + shape_string(t.shape) + ", expected float32 (" +
                  (rows > 0 ? std::to_string(rows) : std::string("·")) + ", " + std::to_string(E) + ")");
    }
    return t;
  };
  auto& w = state.weights;
  w.token_embedding = take("token_embedding.weight", 0);
  c.vocab_size = w.token_embedding.dim(0);
  w.position_embedding = take("position_embedding.weight", 0);
  c.max_positions = w.position_embedding.dim(0);
  w.lm_head_weight = take("lm_head.weight", c.vocab_size);
  if (auto it = file.tensors.find("lm_head.bias"); it != file.tensors.end()) {
    if (it->second.shape != Shape{c.vocab_size} || it->second.dtype != DType::float32) {
      throw error("tensor 'lm_head.bias' is " + shape_string(it->second.shape) + ", expected float32 (" +
                  std::to_string(c.vocab_size) + ",)");
    }
    w.lm_head_bias = it->second;
  }
  c.lm_head_bias = w.lm_head_bias.has_value();
  w.layers = std::move(encoder.weights.layers);
  w.norm = *encoder.weights.norm;
  return state;
}

CausalLMState load_causal_lm(const std::filesystem::path& path) {
  return causal_lm_from_state_dict(read_safetensors(path), path.string());
}

}  // namespace vkattn::io
