// GPT-2 as the hub stores it, read as a CausalLM: the same recipe under other names.
//   wte, wpe                 token_embedding, position_embedding
//   h.N.ln_1, h.N.ln_2       layers.N.norm1, norm2 (pre-norm: norm_first)
//   h.N.attn.c_attn          (E, 3·E) Conv1D: q | k | v side by side -> self_attn.{q,k,v}_proj
//   h.N.attn.c_proj          (E, E) -> self_attn.out_proj
//   h.N.mlp.c_fc, c_proj     (E, F), (F, E) -> linear1, linear2; gelu_new between: gelu_tanh
//   ln_f                     norm
//   lm_head                  tied to wte: wte's rows, no bias
// Conv1D stores its weight (in, out) and computes x · W + b; torch's Linear stores (out, in).
#include "engine/io/checkpoints.h"
#include "vkattn/errors.h"

namespace vkattn::io::checkpoints {
namespace {

using nlohmann::json;

// Columns [begin, begin + count) of a (rows, cols) matrix, transposed: (count, rows), as 16-bit
// as they were (Tensor::narrow).
Tensor columns_transposed(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor out({count, rows});
  out.narrow = t.narrow;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < count; ++c) {
      out.data[static_cast<size_t>(c * rows + r)] = t.data[static_cast<size_t>(r * cols + begin + c)];
    }
  }
  return out;
}

Tensor elements(const Tensor& t, int64_t begin, int64_t count) {
  return Tensor({count}, std::vector<float>(t.data.begin() + begin, t.data.begin() + begin + count));
}

}  // namespace

CausalLMState gpt2(const json& config_json, std::map<std::string, Tensor> file, const std::string& dir) {
  const ConfigReader config(config_json, dir);
  config.require("scale_attn_weights", true, true);
  config.require("scale_attn_by_inverse_layer_idx", false, false);
  config.require("add_cross_attention", false, false);
  const int64_t E = config.size("n_embd"), H = config.size("n_head"), V = config.size("vocab_size");
  const int64_t P = config.size("n_positions"), F = config.size("n_inner", 4 * E), layers = config.size("n_layer");
  if (E % H != 0) {
    throw config.error("n_embd " + std::to_string(E) + " is not a multiple of n_head " + std::to_string(H));
  }

  // GPT2LMHeadModel's save_pretrained writes "transformer.h.0…"; the hub's gpt2 folder, GPT2Model's "h.0…"
  CheckpointTensors tensors(std::move(file), dir, "transformer.");
  auto norm = [&](const std::string& name) {
    return LayerNormWeights{tensors.take(name + ".weight", {E}, "(E,)"), tensors.take(name + ".bias", {E}, "(E,)")};
  };

  CausalLMState state;
  auto& c = state.config;
  c.vocab_size = V;
  c.max_positions = P;
  c.num_layers = layers;
  c.lm_head_bias = false;
  c.layer = {.d_model = E, .nhead = H, .dim_feedforward = F,
             .activation = config.activation("activation_function", "gelu_new"),
             .layer_norm_eps = config.number("layer_norm_epsilon", 1e-5f), .norm_first = true};
  auto& w = state.weights;
  w.token_embedding = tensors.take("wte.weight", {V, E}, "(vocab_size, n_embd)");
  w.position_embedding = tensors.take("wpe.weight", {P, E}, "(n_positions, n_embd)");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    TransformerEncoderLayerWeights layer;
    layer.norm1 = norm(h + "ln_1");
    layer.norm2 = norm(h + "ln_2");
    const Tensor& qkv = tensors.take(h + "attn.c_attn.weight", {E, 3 * E}, "(E, 3·E)");
    const Tensor& qkv_bias = tensors.take(h + "attn.c_attn.bias", {3 * E}, "(3·E,)");
    auto& a = layer.self_attn;
    a.q_proj_weight = columns_transposed(qkv, 0, E);
    a.k_proj_weight = columns_transposed(qkv, E, E);
    a.v_proj_weight = columns_transposed(qkv, 2 * E, E);
    a.q_proj_bias = elements(qkv_bias, 0, E);
    a.k_proj_bias = elements(qkv_bias, E, E);
    a.v_proj_bias = elements(qkv_bias, 2 * E, E);
    a.out_proj_weight = columns_transposed(tensors.take(h + "attn.c_proj.weight", {E, E}, "(E, E)"), 0, E);
    a.out_proj_bias = tensors.take(h + "attn.c_proj.bias", {E}, "(E,)");
    layer.linear1_weight = columns_transposed(tensors.take(h + "mlp.c_fc.weight", {E, F}, "(E, F)"), 0, F);
    layer.linear1_bias = tensors.take(h + "mlp.c_fc.bias", {F}, "(F,)");
    layer.linear2_weight = columns_transposed(tensors.take(h + "mlp.c_proj.weight", {F, E}, "(F, E)"), 0, E);
    layer.linear2_bias = tensors.take(h + "mlp.c_proj.bias", {E}, "(E,)");
    // the causal mask as a buffer, in older files: vkattn masks by is_causal
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) tensors.ignore(h + buffer);
    w.layers.push_back(std::move(layer));
  }
  w.norm = norm("ln_f");
  // tied: save_pretrained leaves lm_head out; a file that has it (untied) is read as it is
  if (auto head = tensors.take_if_there("lm_head.weight", {V, E}, "(vocab_size, n_embd)")) {
    w.lm_head_weight = std::move(*head);
  } else {
    c.tie_word_embeddings = true;
  }
  tensors.check_all_taken("a GPT-2 of " + std::to_string(layers) + " layers (wte, wpe, h.0 … h." +
                          std::to_string(layers - 1) + ", ln_f)");
  return state;
}

}  // namespace vkattn::io::checkpoints
