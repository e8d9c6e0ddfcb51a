#include "vkattn/modules/llama.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

const std::string kLlama = "Llama";

// A linear step with its weight (and bias) uploaded under `name`, then `activation` (the step of
// that name) or `residual` where one is given: folded into the product's store where the backend
// folds (Backend::linear_activation, Backend::linear)
Value uploaded_linear(Backend& backend, const std::string& name, const Value& x, const Tensor& weight,
                      const std::optional<Tensor>& bias, ActivationStep activation = ActivationStep::none,
                      const Backend::ResidualAfter* residual = nullptr) {
  Value w = backend.upload_matrix(name + ".weight", weight);
  std::optional<Value> b;
  if (bias) b = backend.upload_weight(name + ".bias", *bias);
  if (activation == ActivationStep::none) return backend.linear(name, x, w, b ? &*b : nullptr, residual);
  return backend.linear_activation(name, op_name(activation), activation, x, w, b ? &*b : nullptr);
}

// Where the window applies, for describe(): "" in every layer, else " in layers 2–5, 7" (or
// " in no layer")
std::string windowed_layers_described(const std::vector<bool>& windowed) {
  if (std::ranges::find(windowed, false) == windowed.end()) return "";
  std::string ranges;
  for (size_t i = 0; i < windowed.size(); ++i) {
    if (!windowed[i]) continue;
    size_t last = i;
    while (last + 1 < windowed.size() && windowed[last + 1]) ++last;
    ranges += (ranges.empty() ? "" : ", ") + std::to_string(i) + (last > i ? "–" + std::to_string(last) : "");
    i = last;
  }
  const auto count = std::ranges::count(windowed, true);
  return count == 0 ? " in no layer" : (count == 1 ? " in layer " : " in layers ") + ranges;
}

}  // namespace

LlamaWeights LlamaWeights::random(const LlamaConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t E = c.attention.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  LlamaWeights w;
  w.embed_tokens = uniform({V, E}, -1.0f, 1.0f, rng);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LlamaLayerWeights l;
    l.self_attn = GroupedQueryAttentionWeights::random(c.attention, seed + 100 * static_cast<uint32_t>(i + 1));
    l.gate_proj = linear_parameter({F, E}, E, rng);
    l.up_proj = linear_parameter({F, E}, E, rng);
    l.down_proj = linear_parameter({E, F}, F, rng);
    if (c.mlp_bias) {
      l.gate_proj_bias = uniform({F}, -0.1f, 0.1f, rng);
      l.up_proj_bias = uniform({F}, -0.1f, 0.1f, rng);
      l.down_proj_bias = uniform({E}, -0.1f, 0.1f, rng);
    }
    l.input_layernorm = uniform({E}, 0.75f, 1.25f, rng);
    l.post_attention_layernorm = uniform({E}, 0.75f, 1.25f, rng);
    w.layers.push_back(std::move(l));
  }
  w.norm = uniform({E}, 0.75f, 1.25f, rng);
  if (!c.tie_word_embeddings) w.lm_head = linear_parameter({V, E}, E, rng);
  return w;
}

Llama::Llama(LlamaConfig config, LlamaWeights weights) : config_(std::move(config)), weights_(std::move(weights)) {
  const auto& c = config_;
  for (auto [name, size] : {std::pair{"vocab_size", c.vocab_size}, {"max_positions", c.max_positions},
                            {"intermediate_size", c.intermediate_size}, {"num_layers", c.num_layers}}) {
    if (size < 1) throw ConfigError("Llama: " + std::string(name) + "=" + std::to_string(size) + " must be >= 1");
  }
  if (!c.attention.causal) throw ConfigError("Llama: its attention must be causal (a decoder's)");
  if (!(c.rms_norm_eps > 0.0f) || !std::isfinite(c.rms_norm_eps)) {
    throw ConfigError("Llama: rms_norm_eps=" + std::to_string(c.rms_norm_eps) + " must be a positive number");
  }
  if (!(c.embedding_scale > 0.0f) || !std::isfinite(c.embedding_scale)) {
    throw ConfigError("Llama: embedding_scale=" + std::to_string(c.embedding_scale) + " must be a positive number");
  }
  if (c.hidden_act != ActivationStep::silu && c.hidden_act != ActivationStep::gelu_tanh &&
      c.hidden_act != ActivationStep::gelu) {
    throw ConfigError(std::string("Llama: hidden_act ") + op_name(c.hidden_act) +
                      " is not a gate's activation (silu, gelu_tanh or gelu)");
  }
  const auto& windowed = c.windowed_layers;
  if (!windowed.empty() && std::ssize(windowed) != c.num_layers) {
    throw ConfigError("Llama: windowed_layers has " + std::to_string(windowed.size()) + " entries for num_layers=" +
                      std::to_string(c.num_layers));
  }
  if (c.attention.sliding_window == 0 && std::ranges::find(windowed, true) != windowed.end()) {
    throw ConfigError("Llama: windowed_layers names windowed layers, but attention.sliding_window is 0 (none)");
  }
  const int64_t E = c.attention.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const auto& w = weights_;
  checks::weight(kLlama, "embed_tokens.weight", w.embed_tokens, {V, E}, "(V, E)");
  checks::weight(kLlama, "norm.weight", w.norm, {E}, "(E,)");
  if (!c.tie_word_embeddings) {
    checks::weight(kLlama, "lm_head.weight", w.lm_head, {V, E}, "(V, E)");
  } else if (w.lm_head.size() != 0) {
    throw ShapeError("Llama: lm_head.weight is given but tie_word_embeddings is on (the head is embed_tokens)");
  }
  if (static_cast<int64_t>(w.layers.size()) != c.num_layers) {
    throw ShapeError("Llama: " + std::to_string(w.layers.size()) + " layers of weights for num_layers=" +
                     std::to_string(c.num_layers));
  }
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    const std::string n = "layers." + std::to_string(i) + ".";
    checks::weight(kLlama, n + "mlp.gate_proj.weight", l.gate_proj, {F, E}, "(F, E)");
    checks::weight(kLlama, n + "mlp.up_proj.weight", l.up_proj, {F, E}, "(F, E)");
    checks::weight(kLlama, n + "mlp.down_proj.weight", l.down_proj, {E, F}, "(E, F)");
    checks::optional_weight(kLlama, n + "mlp.gate_proj.bias", l.gate_proj_bias, c.mlp_bias, "mlp_bias", {F}, "(F,)");
    checks::optional_weight(kLlama, n + "mlp.up_proj.bias", l.up_proj_bias, c.mlp_bias, "mlp_bias", {F}, "(F,)");
    checks::optional_weight(kLlama, n + "mlp.down_proj.bias", l.down_proj_bias, c.mlp_bias, "mlp_bias", {E}, "(E,)");
    checks::weight(kLlama, n + "input_layernorm.weight", l.input_layernorm, {E}, "(E,)");
    checks::weight(kLlama, n + "post_attention_layernorm.weight", l.post_attention_layernorm, {E}, "(E,)");
    GroupedQueryAttentionConfig attention = c.attention;
    if (!windowed.empty() && !windowed[i]) attention.sliding_window = 0;  // this layer sees every key
    attention_.emplace_back(attention, l.self_attn);  // checks the attention's config and weights
  }
}

Value Llama::block(Backend& backend, size_t layer, const Value& x, const SubBlock& attend) const {
  const auto& l = weights_.layers[layer];
  const float eps = config_.rms_norm_eps;
  Value norm1 = backend.upload_weight("input_layernorm.weight", l.input_layernorm);
  const Backend::ResidualAfter add1 = backend.residual_after("residual_add1", x);
  Value h = [&] {
    Value in = backend.rms_norm("input_layernorm", x, norm1, eps);  // (B, T, E)
    StepScope scope(backend, "self_attn");
    return attend(in, add1);  // x + attention (B, T, E)
  }();
  Value norm2 = backend.upload_weight("post_attention_layernorm.weight", l.post_attention_layernorm);
  const Backend::ResidualAfter add2 = backend.residual_after("residual_add2", h);
  return [&] {
    Value in = backend.rms_norm("post_attention_layernorm", h, norm2, eps);
    StepScope scope(backend, "mlp");
    Value gate = uploaded_linear(backend, "gate_proj", in, l.gate_proj, l.gate_proj_bias,
                                 config_.hidden_act);  // silu(gate_proj); Gemma: gelu_tanh (B, T, F)
    Value up = uploaded_linear(backend, "up_proj", in, l.up_proj, l.up_proj_bias);  // (B, T, F)
    Value product = backend.multiply("multiply", gate, up);
    return uploaded_linear(backend, "down_proj", product, l.down_proj, l.down_proj_bias, ActivationStep::none,
                           &add2);  // h + down_proj (B, T, E)
  }();
}

Value Llama::embed(Backend& backend, const Value& ids) const {
  Value table = backend.upload_matrix("embed_tokens.weight", weights_.embed_tokens);
  return backend.embedding("embed_tokens", ids, table, config_.embedding_scale);  // (B, T, E)
}

Value Llama::head(Backend& backend, const Value& x, int64_t logits_to_keep) const {
  Value norm = backend.upload_weight("norm.weight", weights_.norm);
  Value kept = kept_positions(backend, x, logits_to_keep);               // (B, n, E)
  Value h = backend.rms_norm("norm", kept, norm, config_.rms_norm_eps);  // (B, n, E)
  if (!config_.tie_word_embeddings) return uploaded_linear(backend, "lm_head", h, weights_.lm_head, std::nullopt);
  Value table = backend.upload_matrix("embed_tokens.weight", weights_.embed_tokens);  // embed's, kept once
  return backend.linear("lm_head", h, table, nullptr);                                // (B, n, V)
}

uint64_t Llama::parameter_count() const {
  auto count = [](const Tensor& t) { return static_cast<uint64_t>(t.size()); };
  const auto& w = weights_;
  uint64_t n = count(w.embed_tokens) + count(w.norm) + count(w.lm_head);
  for (const auto& l : w.layers) {
    const auto& a = l.self_attn;
    for (const Tensor* t : {&a.q_proj_weight, &a.k_proj_weight, &a.v_proj_weight, &a.o_proj_weight, &l.gate_proj,
                            &l.up_proj, &l.down_proj, &l.input_layernorm, &l.post_attention_layernorm}) {
      n += count(*t);
    }
    for (const auto* t : {&a.q_proj_bias, &a.k_proj_bias, &a.v_proj_bias, &a.o_proj_bias, &a.q_norm_weight,
                          &a.k_norm_weight, &l.gate_proj_bias, &l.up_proj_bias, &l.down_proj_bias}) {
      if (*t) n += count(**t);
    }
  }
  return n;
}

std::string Llama::describe() const {
  const auto& c = config_;
  const auto& a = c.attention;
  std::ostringstream out;
  out << "vocab " << c.vocab_size << ", " << c.max_positions << " positions, " << c.num_layers << " layers of\n"
      << "  rms_norm, attention: " << a.num_heads << " query heads sharing " << a.kv_heads() << " key/value heads of "
      << a.dim() << ", RoPE θ=" << a.rope_theta << ",\n";
  std::vector<std::string> more;  // what a plain Llama's attention lacks, on a line of its own
  if (a.rotary_dims && a.rotary_dims != a.dim()) {
    more.push_back("RoPE on " + std::to_string(a.rotary_dims) + " of each head's " + std::to_string(a.dim()) +
                   " features");
  }
  if (a.rope_scaling.type != RopeScaling::Type::none) {
    std::ostringstream factor;
    factor << a.rope_scaling.factor;
    more.push_back((a.rope_scaling.type == RopeScaling::Type::llama3 ? "llama3" : "linear") +
                   std::string(" scaling of RoPE ×") + factor.str());
  }
  if (a.sliding_window) {
    more.push_back("window " + std::to_string(a.sliding_window) + windowed_layers_described(c.windowed_layers));
  }
  if (!more.empty()) {
    out << "    " << more[0];
    for (size_t i = 1; i < more.size(); ++i) out << ", " << more[i];
    out << ",\n";
  }
  if (a.qk_norm) out << "    each head's q and k RMS-normalised before RoPE (q_norm, k_norm),\n";
  const char* mlp = c.hidden_act == ActivationStep::silu        ? "SwiGLU"
                    : c.hidden_act == ActivationStep::gelu_tanh ? "GeGLU (tanh)"
                                                                : "GeGLU";
  out << "  rms_norm, " << mlp << " " << a.hidden_size << " -> " << c.intermediate_size << " -> " << a.hidden_size
      << (c.tie_word_embeddings ? "; lm_head tied to embed_tokens" : "");
  if (c.embedding_scale != 1.0f) {
    const bool root = c.embedding_scale == static_cast<float>(std::sqrt(static_cast<double>(a.hidden_size)));
    out << ";\n  embeddings times " << c.embedding_scale << (root ? " (√E)" : "");
  }
  return out.str();
}

LanguageModel::ForwardPass Llama::forward_pass(const std::string& who, const Tensor& ids,
                                               const std::optional<Tensor>& key_padding_mask, AttentionPath path,
                                               int64_t logits_to_keep) const {
  const std::string named = "Llama." + who;
  checks::token_ids(named, ids, config_.vocab_size, 0, config_.max_positions, "max_position_embeddings");
  check_logits_to_keep(named, logits_to_keep);
  std::optional<Tensor> mask;
  if (key_padding_mask) {
    mask = checks::padding_mask(named, "key_padding_mask", *key_padding_mask, ids.shape, "(B, T)", ids.shape);
  }
  return {"llama", [this, ids, mask, path, logits_to_keep](Backend& b) {
            std::optional<Value> padding;
            if (mask) padding = b.upload("key_padding_mask", *mask);
            Value x = embed(b, b.upload("ids", ids));  // (B, T, E)
            const GroupedQueryOptions options{.attention = path};  // the weights are not wanted
            for (size_t i = 0; i < attention_.size(); ++i) {
              StepScope scope(b, "layers." + std::to_string(i));
              x = block(b, i, x, [&](const Value& in, const Backend::ResidualAfter& residual) {
                return attention_[i].attend(b, in, padding ? &*padding : nullptr, options, &residual).output;
              });
            }
            return head(b, x, logits_to_keep);
          }};
}

KVCache Llama::make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype) const {
  if (capacity > config_.max_positions) {
    throw ConfigError("Llama: a cache of capacity " + std::to_string(capacity) + " is longer than the " +
                      std::to_string(config_.max_positions) + " positions of max_position_embeddings");
  }
  const auto& a = config_.attention;
  return KVCache(backend, config_.num_layers, batch, a.kv_heads(), capacity, a.dim(), dtype);
}

Tensor Llama::decode(Backend& backend, const Tensor& ids, KVCache& cache, const DecodeOptions& options) const {
  const std::string who = "Llama.decode";
  const int64_t position = cache.length();
  if (ids.rank() == 2) cache.check_room(ids.dim(1));
  checks::token_ids(who, ids, config_.vocab_size, position, config_.max_positions, "max_position_embeddings");
  const int64_t B = ids.dim(0), T = ids.dim(1);
  const auto& a = config_.attention;
  if (cache.layers() != config_.num_layers || cache.batch() != B || cache.heads() != a.kv_heads()) {
    throw ShapeError(who + ": the cache is for " + std::to_string(cache.layers()) + " layers of " +
                     std::to_string(cache.batch()) + " sequences and " + std::to_string(cache.heads()) +
                     " heads; the model has " + std::to_string(config_.num_layers) + " layers of " +
                     std::to_string(a.kv_heads()) + " key/value heads and the ids " + std::to_string(B) + " sequences");
  }
  const std::optional<Tensor> mask = options.padding_mask(who, B, position + T);
  check_logits_to_keep(who, options.logits_to_keep);
  KeepWeights keep(backend, cache.kept_weights(backend), weights_owner());
  Tensor logits = run_pass(backend, "llama_decode", [&](Backend& b) {
    std::optional<Value> padding;
    if (mask) padding = b.upload("key_padding_mask", *mask);
    Value x = embed(b, b.upload("ids", ids));  // (B, T, E)
    for (size_t i = 0; i < attention_.size(); ++i) {
      StepScope scope(b, "layers." + std::to_string(i));
      const KVCache::Layer& layer = cache.layer(backend, static_cast<int64_t>(i));
      x = block(b, i, x, [&](const Value& in, const Backend::ResidualAfter& residual) {
        return attention_[i].attend_cached(b, in, layer, position, padding ? &*padding : nullptr, options.parts,
                                           &residual);
      });
    }
    return head(b, x, options.logits_to_keep);
  });
  cache.advance(T);
  return logits;
}

}  // namespace vkattn
