// Llama, Mistral, Qwen2, Qwen3, Phi-3 and Gemma as the hub stores them, read as a Llama
// (<vkattn/modules/llama.h>):
// the names are vkattn's own under "model." (model.layers.N.self_attn.q_proj, …), torch's Linear
// layout, lm_head absent when tied to embed_tokens.
//   LlamaForCausalLM    attention_bias on q/k/v/o_proj when set; mlp_bias
//   MistralForCausalLM  the same, with sliding_window when it is set
//   Qwen2ForCausalLM    q/k/v_proj always biased, o_proj never; a window only with use_sliding_window,
//                       and only in the layers from max_window_layers on (or as layer_types says)
//   Qwen3ForCausalLM    Llama's biases; q_norm and k_norm (RMSNorm over head_dim, eps rms_norm_eps)
//                       on each head's q and k before RoPE; a window as Qwen2's
//   Phi3ForCausalLM     Llama's without biases, q/k/v_proj's rows in one qkv_proj, gate_proj's and
//                       up_proj's in one gate_up_proj; RoPE on partial_rotary_factor of each head;
//                       sliding_window in every layer where it is set, as Mistral's
//   GemmaForCausalLM    RMSNorms that scale by 1 + weight (read as weights 1 + w, added in float32
//                       as GemmaRMSNorm adds them), embeddings times √hidden_size, a GeGLU
//                       (hidden_activation, else hidden_act: gelu_pytorch_tanh), lm_head tied
#include <cmath>

#include "engine/io/checkpoints.h"
#include "vkattn/errors.h"

namespace vkattn::io::checkpoints {
namespace {

// config.json's rope_scaling: none (absent, null, "default"), "linear" (factor) or "llama3"
// (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings); another type
// (dynamic, yarn, longrope) a ConfigError naming it.
RopeScaling rope_scaling(const ConfigReader& config, const nlohmann::json& config_json) {
  if (!config.has("rope_scaling")) return {};
  const nlohmann::json& s = config_json["rope_scaling"];
  if (!s.is_object()) throw config.error("rope_scaling " + s.dump() + " is not an object");
  const std::string type = s.contains("rope_type") ? s["rope_type"].get<std::string>() : s.value("type", "default");
  auto number = [&](const char* key) {
    if (!s.contains(key) || !s[key].is_number()) {
      throw config.error("rope_scaling's " + std::string(key) + " is " + (s.contains(key) ? s[key].dump() : "missing") +
                         ", not a number");
    }
    return s[key].get<float>();
  };
  RopeScaling scaling;
  if (type == "default") return scaling;
  if (type == "linear") {
    scaling.type = RopeScaling::Type::linear;
    scaling.factor = number("factor");
  } else if (type == "llama3") {
    scaling.type = RopeScaling::Type::llama3;
    scaling.factor = number("factor");
    scaling.low_freq_factor = number("low_freq_factor");
    scaling.high_freq_factor = number("high_freq_factor");
    scaling.original_max_positions = static_cast<int64_t>(number("original_max_position_embeddings"));
  } else {
    throw config.error("rope_scaling of type '" + type + "' is not supported by vkattn (linear, llama3)");
  }
  if (!(scaling.factor >= 1.0f) || !(scaling.low_freq_factor > 0.0f) ||
      !(scaling.high_freq_factor > scaling.low_freq_factor) || scaling.original_max_positions < 1) {
    throw config.error("rope_scaling " + s.dump() + ": factor must be >= 1, and 0 < low_freq_factor < " +
                       "high_freq_factor, original_max_position_embeddings >= 1");
  }
  return scaling;
}

// config.json's activation of gate_proj: silu, gelu_pytorch_tanh or gelu
ActivationStep gate_activation(const ConfigReader& config, const std::string& act) {
  if (act == "silu") return ActivationStep::silu;
  if (act == "gelu_pytorch_tanh") return ActivationStep::gelu_tanh;
  if (act == "gelu") return ActivationStep::gelu;
  throw config.error("hidden_act '" + act + "' is not one vkattn runs (silu, gelu_pytorch_tanh, gelu)");
}

// Which of Qwen2's and Qwen3's `layers` attend within their window: config.json's layer_types
// ("sliding_attention" or "full_attention" each) where it is given, else those from
// max_window_layers on (28 where absent), as Hugging Face's Qwen2Config derives layer_types.
std::vector<bool> qwen_windowed_layers(const ConfigReader& config, const nlohmann::json& config_json, int64_t layers) {
  std::vector<bool> windowed(static_cast<size_t>(layers));
  if (config.has("layer_types")) {
    const nlohmann::json& types = config_json["layer_types"];
    if (!types.is_array() || std::ssize(types) != layers) {
      throw config.error("layer_types " + types.dump() + " is not a list of num_hidden_layers " +
                         std::to_string(layers) + " entries");
    }
    for (size_t i = 0; i < windowed.size(); ++i) {
      const nlohmann::json& type = types[i];
      if (type != "sliding_attention" && type != "full_attention") {
        throw config.error("layer_types[" + std::to_string(i) + "] is " + type.dump() +
                           ", not \"sliding_attention\" or \"full_attention\"");
      }
      windowed[i] = type == "sliding_attention";
    }
    return windowed;
  }
  const int64_t full = config.count("max_window_layers", 28);  // Qwen2Config's and Qwen3Config's default
  for (int64_t i = full; i < layers; ++i) windowed[static_cast<size_t>(i)] = true;
  return windowed;
}

}  // namespace

LlamaState llama(const nlohmann::json& config_json, std::map<std::string, Tensor> file, const std::string& dir,
                 const std::string& architecture) {
  const ConfigReader config(config_json, dir);
  const RopeScaling scaling = rope_scaling(config, config_json);
  const bool qwen2 = architecture == "Qwen2ForCausalLM", qwen3 = architecture == "Qwen3ForCausalLM";
  const bool gemma = architecture == "GemmaForCausalLM" || architecture == "gemma";
  const bool phi3 = architecture == "Phi3ForCausalLM" || architecture == "phi3";
  // Gemma's own key first (Hugging Face's GemmaMLP reads hidden_activation where it is set)
  const std::string act = gemma && config.has("hidden_activation")
                              ? config.text("hidden_activation", "")
                              : config.text("hidden_act", gemma ? "gelu_pytorch_tanh" : "silu");
  const int64_t E = config.size("hidden_size"), H = config.size("num_attention_heads");
  const int64_t H_kv = config.size("num_key_value_heads", H), layers = config.size("num_hidden_layers");
  const int64_t V = config.size("vocab_size"), F = config.size("intermediate_size");
  if (E % H != 0 && !config.has("head_dim")) {
    throw config.error("hidden_size " + std::to_string(E) + " is not a multiple of num_attention_heads " +
                       std::to_string(H) + " and there is no head_dim");
  }
  const int64_t d = config.size("head_dim", E / H);
  if (H % H_kv != 0) {
    throw config.error("num_attention_heads " + std::to_string(H) + " is not a multiple of num_key_value_heads " +
                       std::to_string(H_kv));
  }
  LlamaState state;
  auto& c = state.config;
  c.vocab_size = V;
  c.max_positions = config.size("max_position_embeddings");
  c.intermediate_size = F;
  c.num_layers = layers;
  c.rms_norm_eps = config.number("rms_norm_eps", 1e-6f);
  c.mlp_bias = !phi3 && config.flag("mlp_bias", false);
  c.hidden_act = gate_activation(config, act);
  if (gemma) c.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(E)));  // GemmaModel's normalizer
  auto& a = c.attention;
  a.hidden_size = E;
  a.num_heads = H;
  a.num_kv_heads = H_kv;
  a.head_dim = d;
  a.attention_bias = qwen2 || (!phi3 && config.flag("attention_bias", false));  // Phi-3's never
  a.o_proj_bias = !qwen2 && !phi3 && config.flag("attention_bias", false);
  a.rope_theta = config.number("rope_theta", 10000.0f);
  a.rope = RotaryConvention::half;  // the hub's checkpoints: rotate_half's order
  a.rope_scaling = scaling;
  if (phi3 && config.has("partial_rotary_factor")) {  // Phi-4-mini's 0.75: the first features of each head
    const float factor = config.number("partial_rotary_factor", 1.0f);
    a.rotary_dims = static_cast<int64_t>(static_cast<float>(d) * factor);  // Hugging Face's int(d · factor)
    if (!(factor > 0.0f && factor <= 1.0f) || a.rotary_dims < 2 || a.rotary_dims % 2 != 0) {  // 0 would be all
      throw config.error("partial_rotary_factor " + std::to_string(factor) + " must be in (0, 1] and give an even " +
                         "number of features of head_dim " + std::to_string(d) + " to turn");
    }
  }
  a.causal = true;
  a.qk_norm = qwen3;
  a.qk_norm_eps = c.rms_norm_eps;
  const bool window = qwen2 || qwen3 ? config.flag("use_sliding_window", false) : config.has("sliding_window");
  if (window) a.sliding_window = config.size("sliding_window");
  if (window && (qwen2 || qwen3)) c.windowed_layers = qwen_windowed_layers(config, config_json, layers);

  CheckpointTensors tensors(std::move(file), dir, "model.");
  auto& w = state.weights;
  w.embed_tokens = tensors.take("embed_tokens.weight", {V, E}, "(vocab_size, hidden_size)");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string n = "layers." + std::to_string(i) + ".";
    LlamaLayerWeights l;
    auto& s = l.self_attn;
    if (phi3) {  // q, k and v's rows in one matrix (Phi3Attention's qkv_proj), in that order
      const Tensor& qkv = tensors.take(n + "self_attn.qkv_proj.weight", {(H + 2 * H_kv) * d, E}, "((H + 2·H_kv)·d, E)");
      s.q_proj_weight = slice_rows(qkv, 0, H * d);
      s.k_proj_weight = slice_rows(qkv, H * d, H_kv * d);
      s.v_proj_weight = slice_rows(qkv, (H + H_kv) * d, H_kv * d);
    } else {
      s.q_proj_weight = tensors.take(n + "self_attn.q_proj.weight", {H * d, E}, "(H·d, E)");
      s.k_proj_weight = tensors.take(n + "self_attn.k_proj.weight", {H_kv * d, E}, "(H_kv·d, E)");
      s.v_proj_weight = tensors.take(n + "self_attn.v_proj.weight", {H_kv * d, E}, "(H_kv·d, E)");
    }
    s.o_proj_weight = tensors.take(n + "self_attn.o_proj.weight", {E, H * d}, "(E, H·d)");
    if (a.attention_bias) {
      s.q_proj_bias = tensors.take(n + "self_attn.q_proj.bias", {H * d}, "(H·d,)");
      s.k_proj_bias = tensors.take(n + "self_attn.k_proj.bias", {H_kv * d}, "(H_kv·d,)");
      s.v_proj_bias = tensors.take(n + "self_attn.v_proj.bias", {H_kv * d}, "(H_kv·d,)");
    }
    if (a.o_proj_bias) s.o_proj_bias = tensors.take(n + "self_attn.o_proj.bias", {E}, "(E,)");
    if (a.qk_norm) {
      s.q_norm_weight = tensors.take(n + "self_attn.q_norm.weight", {d}, "(head_dim,)");
      s.k_norm_weight = tensors.take(n + "self_attn.k_norm.weight", {d}, "(head_dim,)");
    }
    tensors.ignore(n + "self_attn.rotary_emb.inv_freq");  // a buffer in older files: vkattn computes it
    if (phi3) {  // gate's rows then up's in one matrix (Phi3MLP's gate_up_proj, chunked in two)
      const Tensor& gate_up = tensors.take(n + "mlp.gate_up_proj.weight", {2 * F, E},
                                           "(2·intermediate_size, hidden_size)");
      l.gate_proj = slice_rows(gate_up, 0, F);
      l.up_proj = slice_rows(gate_up, F, F);
    } else {
      l.gate_proj = tensors.take(n + "mlp.gate_proj.weight", {F, E}, "(intermediate_size, hidden_size)");
      l.up_proj = tensors.take(n + "mlp.up_proj.weight", {F, E}, "(intermediate_size, hidden_size)");
    }
    l.down_proj = tensors.take(n + "mlp.down_proj.weight", {E, F}, "(hidden_size, intermediate_size)");
    if (c.mlp_bias) {
      l.gate_proj_bias = tensors.take(n + "mlp.gate_proj.bias", {F}, "(intermediate_size,)");
      l.up_proj_bias = tensors.take(n + "mlp.up_proj.bias", {F}, "(intermediate_size,)");
      l.down_proj_bias = tensors.take(n + "mlp.down_proj.bias", {E}, "(hidden_size,)");
    }
    l.input_layernorm = tensors.take(n + "input_layernorm.weight", {E}, "(hidden_size,)");
    l.post_attention_layernorm = tensors.take(n + "post_attention_layernorm.weight", {E}, "(hidden_size,)");
    w.layers.push_back(std::move(l));
  }
  w.norm = tensors.take("norm.weight", {E}, "(hidden_size,)");
  // tie_word_embeddings: save_pretrained leaves lm_head out (a copy of embed_tokens, if there, is
  // not read); untied, it must be there
  c.tie_word_embeddings = config.flag("tie_word_embeddings", gemma);
  if (c.tie_word_embeddings) {
    tensors.ignore("lm_head.weight");
  } else {
    w.lm_head = tensors.take("lm_head.weight", {V, E}, "(vocab_size, hidden_size)");
  }
  if (gemma) {  // GemmaRMSNorm: x̂ · (1 + weight), the sum in float32 (no longer a 16-bit number)
    auto plus_one = [](Tensor& weight) {
      for (float& v : weight.data) v += 1.0f;
      weight.narrow = Narrow::none;
    };
    plus_one(w.norm);
    for (auto& l : w.layers) {
      plus_one(l.input_layernorm);
      plus_one(l.post_attention_layernorm);
    }
  }
  tensors.check_all_taken("a " + architecture + " of " + std::to_string(layers) +
                          " layers (embed_tokens, layers.0 … layers." + std::to_string(layers - 1) + ", norm, lm_head)");
  return state;
}

}  // namespace vkattn::io::checkpoints
