#include "engine/io/state_dict.h"

#include <array>
#include <charconv>
#include <optional>

#include "engine/errors.h"

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

class StateDict {
 public:
  StateDict(const Safetensors& file, const std::string& source) : file_(file), source_(source) {}

  FileError error(const std::string& what) const { return FileError(source_ + ": " + what); }
  bool has(const std::string& name) const { return file_.tensors.count(name) != 0; }

  // The tensor, which must exist with this shape (`expected_text` spells it, e.g. "(3·E, E) = (24, 8)").
  Tensor take(const std::string& name, const Shape& expected, const std::string& expected_text) const {
    auto it = file_.tensors.find(name);
    if (it == file_.tensors.end()) throw error("missing tensor '" + name + "', expected shape " + expected_text);
    const Tensor& t = it->second;
    if (t.dtype != DType::float32) throw error("tensor '" + name + "' is " + dtype_name(t.dtype) + "; a float tensor is expected");
    if (t.shape != expected) {
      throw error("tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " + expected_text);
    }
    return t;
  }

  // A (E, n) projection whose input width n (kdim or vdim) the file decides.
  Tensor take_input_projection(const std::string& name, int64_t E, const std::string& width) const {
    std::string expected = "(E, " + width + ") = (" + std::to_string(E) + ", " + width + ")";
    auto it = file_.tensors.find(name);
    if (it == file_.tensors.end()) throw error("missing tensor '" + name + "', expected shape " + expected);
    const Tensor& t = it->second;
    if (t.rank() != 2 || t.dim(0) != E || t.dim(1) == 0) {
      throw error("tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " + expected);
    }
    return take(name, t.shape, expected);
  }

 private:
  const Safetensors& file_;
  const std::string& source_;
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

int64_t heads_from(const Safetensors& file, int64_t requested, const StateDict& sd) {
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

}  // namespace

AttentionState attention_from_state_dict(const Safetensors& file, int64_t num_heads, const std::string& source) {
  StateDict sd(file, source);
  for (const auto& [name, tensor] : file.tensors) {
    if (known(name)) continue;
    std::string hint;
    for (const char* k : kKnownNames) {
      std::string suffix = std::string(".") + k;
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        hint = "; save the nn.MultiheadAttention's own state_dict, without the '" +
               name.substr(0, name.size() - suffix.size() + 1) + "' prefix";
      }
    }
    throw sd.error("unexpected tensor '" + name + "' " + shape_string(tensor.shape) +
                   " in an nn.MultiheadAttention state_dict" + hint);
  }

  AttentionState state;
  auto& c = state.config;
  auto& w = state.weights;
  if (!sd.has("out_proj.weight")) throw sd.error("missing tensor 'out_proj.weight', expected shape (E, E)");
  const Tensor& out = file.tensors.at("out_proj.weight");
  if (out.rank() != 2 || out.dim(0) != out.dim(1) || out.dim(0) == 0) {
    throw sd.error("tensor 'out_proj.weight' has shape " + shape_string(out.shape) + ", expected (E, E)");
  }
  const int64_t E = out.dim(0);
  c.embed_dim = E;
  w.out_proj_weight = sd.take("out_proj.weight", {E, E}, dims({"E", "E"}, {E, E}));

  if (sd.has("in_proj_weight")) {
    for (const char* separate : {"q_proj_weight", "k_proj_weight", "v_proj_weight"}) {
      if (sd.has(separate)) {
        throw sd.error(std::string("tensor '") + separate + "' given beside 'in_proj_weight'; a state_dict has one or the other");
      }
    }
    Tensor in = sd.take("in_proj_weight", {3 * E, E}, dims({"3·E", "E"}, {3 * E, E}));
    w.q_proj_weight = rows(in, 0, E);
    w.k_proj_weight = rows(in, E, E);
    w.v_proj_weight = rows(in, 2 * E, E);
  } else {
    if (!sd.has("q_proj_weight") && !sd.has("k_proj_weight") && !sd.has("v_proj_weight")) {
      throw sd.error("missing tensor 'in_proj_weight', expected shape " + dims({"3·E", "E"}, {3 * E, E}) +
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
  c.num_heads = heads_from(file, num_heads, sd);
  return state;
}

AttentionState load_attention(const std::filesystem::path& path, int64_t num_heads) {
  return attention_from_state_dict(read_safetensors(path), num_heads, path.string());
}

}  // namespace vkattn::io
