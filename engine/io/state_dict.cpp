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

// Rows [begin, begin + count) of a (rows, cols) matrix, or elements of a vector.
Tensor rows(const Tensor& t, int64_t begin, int64_t count) {
  int64_t cols = t.rank() == 2 ? t.dim(1) : 1;
  Shape shape = t.shape;
  shape[0] = count;
  return Tensor(shape, std::vector<float>(t.data.begin() + begin * cols, t.data.begin() + (begin + count) * cols));
}

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
    w.q_proj_weight = rows(in, 0, E);
    w.k_proj_weight = rows(in, E, E);
    w.v_proj_weight = rows(in, 2 * E, E);
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
    w.q_proj_bias = rows(in_bias, 0, E);
    w.k_proj_bias = rows(in_bias, E, E);
    w.v_proj_bias = rows(in_bias, 2 * E, E);
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

// The tensors of one TransformerEncoderLayer besides self_attn's, relative to its prefix.
constexpr std::array kLayerNames = {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                    "norm1.weight",   "norm1.bias",   "norm2.weight",   "norm2.bias"};

bool known_in_layer(const std::string& name) {
  if (name.starts_with("self_attn.")) return known(name.substr(10));
  for (const char* k : kLayerNames)
    if (name == k) return true;
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

TransformerEncoderLayerWeights layer_from_state_dict(const Safetensors& file, int64_t num_heads,
                                                     const std::string& source, const std::string& prefix,
                                                     int64_t* feedforward, int64_t* heads) {
  AttentionState attention = attention_from_state_dict(file, num_heads, source, prefix + "self_attn.");
  const auto& a = attention.config;
  StateDict sd(file, source, prefix);
  if (!a.bias || a.add_bias_kv || a.kdim || a.vdim) {
    throw sd.error("'" + prefix + "self_attn' must be a TransformerEncoderLayer's: in_proj_weight and in_proj_bias, no bias_k / bias_v");
  }
  const int64_t E = a.embed_dim;
  TransformerEncoderLayerWeights w;
  w.self_attn = std::move(attention.weights);
  w.linear1_weight = sd.take_matrix("linear1.weight", 1, E, "(F, E) = (F, " + std::to_string(E) + ")");
  const int64_t F = w.linear1_weight.dim(0);
  w.linear1_bias = sd.take("linear1.bias", {F}, dims({"F"}, {F}));
  w.linear2_weight = sd.take("linear2.weight", {E, F}, dims({"E", "F"}, {E, F}));
  w.linear2_bias = sd.take("linear2.bias", {E}, dims({"E"}, {E}));
  for (auto [name, norm] : {std::pair{"norm1", &w.norm1}, std::pair{"norm2", &w.norm2}}) {
    norm->weight = sd.take(std::string(name) + ".weight", {E}, dims({"E"}, {E}));
    norm->bias = sd.take(std::string(name) + ".bias", {E}, dims({"E"}, {E}));
  }
  *feedforward = F;
  *heads = a.num_heads;
  return w;
}

}  // namespace

EncoderState encoder_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source) {
  StateDict sd(file, source);
  EncoderState state;
  // One nn.TransformerEncoderLayer's names, or an nn.TransformerEncoder's (layers.N. and norm.).
  std::vector<std::string> prefixes;
  state.single_layer = std::none_of(file.tensors.begin(), file.tensors.end(),
                                    [](const auto& t) { return t.first.starts_with("layers."); });
  if (state.single_layer) {
    for (const auto& [name, tensor] : file.tensors) {
      if (!known_in_layer(name)) {
        throw sd.error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) +
                       " in an nn.TransformerEncoderLayer state_dict");
      }
    }
    prefixes.push_back("");
  } else {
    std::set<int64_t> indices;
    for (const auto& [name, tensor] : file.tensors) {
      std::string rest;
      auto index = layer_index(name, &rest);
      if (index && known_in_layer(rest)) {
        indices.insert(*index);
      } else if (name != "norm.weight" && name != "norm.bias") {
        throw sd.error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) +
                       " in an nn.TransformerEncoder state_dict (layers.N.… and norm.… are expected)");
      }
    }
    int64_t expected = 0;
    for (int64_t index : indices) {
      if (index != expected) {
        std::string found;
        for (int64_t i : indices) found += (found.empty() ? "" : ", ") + std::to_string(i);
        throw sd.error("layer " + std::to_string(expected) + " is missing: the file has layers.N for N in {" + found + "}");
      }
      ++expected;
    }
    for (int64_t i = 0; i < expected; ++i) prefixes.push_back("layers." + std::to_string(i) + ".");
  }

  auto& c = state.config;
  int64_t first_feedforward = 0;
  for (const std::string& prefix : prefixes) {
    int64_t feedforward = 0, heads = 0;
    state.weights.layers.push_back(layer_from_state_dict(file, num_heads, source, prefix, &feedforward, &heads));
    const int64_t E = state.weights.layers.back().self_attn.out_proj_weight.dim(0);
    if (prefix == prefixes.front()) {
      c.layer.d_model = E;
      c.layer.nhead = heads;
      c.layer.dim_feedforward = first_feedforward = feedforward;
    } else if (E != c.layer.d_model || feedforward != first_feedforward) {
      throw sd.error("'" + prefix + "' has d_model " + std::to_string(E) + " and dim_feedforward " +
                     std::to_string(feedforward) + " but layers.0 has " + std::to_string(c.layer.d_model) + " and " +
                     std::to_string(first_feedforward) + "; every layer of an encoder has the same shape");
    }
  }
  c.num_layers = static_cast<int64_t>(prefixes.size());
  c.final_norm = sd.has("norm.weight") || sd.has("norm.bias");
  if (c.final_norm) {
    const int64_t E = c.layer.d_model;
    state.weights.norm = LayerNormWeights{sd.take("norm.weight", {E}, dims({"E"}, {E})),
                                          sd.take("norm.bias", {E}, dims({"E"}, {E}))};
  }
  return state;
}

EncoderState load_encoder(const std::filesystem::path& path, int64_t num_heads) {
  return encoder_from_state_dict(read_safetensors(path), num_heads, path.string());
}

}  // namespace vkattn::io
