#include "vkattn/modules/grouped_query_attention.h"

#include <cmath>
#include <random>

#include "engine/modules/attention_core.h"
#include "engine/modules/block.h"
#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

const std::string kGqa = "GroupedQueryAttention";

std::string number(const char* name, int64_t value) { return std::string(name) + "=" + std::to_string(value); }

// x's shape: (B, T, E) batch-first or (T, E) unbatched (ShapeError "<who>: …").
void check_x(const std::string& who, const Shape& x, int64_t E) {
  if ((x.size() != 2 && x.size() != 3) || x.back() != E) {
    throw ShapeError(who + ": x " + shape_string(x) + " must be (B, T, E) or (T, E) with E = hidden_size = " +
                     std::to_string(E));
  }
}

// forward()'s options for x (B, T, E) or (T, E), checked (ShapeError "<who>: …"): the key padding
// mask additive as (B, T), or none.
std::optional<Tensor> forward_padding(const std::string& who, const Shape& x, const GroupedQueryOptions& options) {
  if (options.position < 0) throw ShapeError(who + ": position=" + std::to_string(options.position) + " must be >= 0");
  if (!options.key_padding_mask) return std::nullopt;
  const bool batched = x.size() == 3;
  const int64_t B = batched ? x[0] : 1, T = x[x.size() - 2];
  return checks::padding_mask(who, "key_padding_mask", *options.key_padding_mask, batched ? Shape{B, T} : Shape{T},
                              batched ? "(B, T)" : "(T,)", {B, T});
}

// The config itself, or a ConfigError naming what is wrong with it (before any weight is made).
const GroupedQueryAttentionConfig& checked(const GroupedQueryAttentionConfig& c) {
  auto fail = [](const std::string& message) { throw ConfigError(kGqa + ": " + message); };
  if (c.hidden_size < 1 || c.num_heads < 1 || c.num_kv_heads < 0 || c.head_dim < 0) {
    fail(number("hidden_size", c.hidden_size) + ", " + number("num_heads", c.num_heads) + ", " +
         number("num_kv_heads", c.num_kv_heads) + ", " + number("head_dim", c.head_dim) +
         ": hidden_size and num_heads must be >= 1, num_kv_heads and head_dim >= 0 (0: the default)");
  }
  if (c.head_dim == 0 && c.hidden_size % c.num_heads != 0) {
    fail(number("hidden_size", c.hidden_size) + " is not divisible by " + number("num_heads", c.num_heads) +
         "; give head_dim to size the heads apart from hidden_size");
  }
  if (c.num_heads % c.kv_heads() != 0) {
    fail(number("num_heads", c.num_heads) + " is not a multiple of " + number("num_kv_heads", c.kv_heads()) +
         " (each key/value head serves num_heads / num_kv_heads query heads)");
  }
  const int64_t r = c.rotary_dims ? c.rotary_dims : c.dim();
  if (r < 2 || r % 2 != 0 || r > c.dim()) {
    fail(number("rotary_dims", r) + " must be even, >= 2 and at most " + number("head_dim", c.dim()) +
         " (RoPE rotates features in pairs)");
  }
  if (!(c.rope_theta > 1.0f) || !std::isfinite(c.rope_theta)) {
    fail("rope_theta=" + std::to_string(c.rope_theta) + " must be a finite number above 1");
  }
  if (c.sliding_window < 0 || (c.sliding_window > 0 && !c.causal)) {
    fail(number("sliding_window", c.sliding_window) + " must be >= 0 (0: none), and a window needs causal attention");
  }
  if (c.qk_norm && !(c.qk_norm_eps > 0.0f && std::isfinite(c.qk_norm_eps))) {
    fail("qk_norm_eps=" + std::to_string(c.qk_norm_eps) + " must be a finite number above 0");
  }
  return c;
}

}  // namespace

GroupedQueryAttentionWeights GroupedQueryAttentionWeights::random(const GroupedQueryAttentionConfig& config,
                                                                   uint32_t seed) {
  const GroupedQueryAttentionConfig& c = checked(config);
  std::mt19937 rng(seed);
  const int64_t E = c.hidden_size, Hd = c.num_heads * c.dim(), KVd = c.kv_heads() * c.dim();
  GroupedQueryAttentionWeights w;
  w.q_proj_weight = linear_parameter({Hd, E}, E, rng);
  w.k_proj_weight = linear_parameter({KVd, E}, E, rng);
  w.v_proj_weight = linear_parameter({KVd, E}, E, rng);
  w.o_proj_weight = linear_parameter({E, Hd}, Hd, rng);
  if (c.attention_bias) {
    w.q_proj_bias = linear_parameter({Hd}, E, rng);
    w.k_proj_bias = linear_parameter({KVd}, E, rng);
    w.v_proj_bias = linear_parameter({KVd}, E, rng);
  }
  if (c.o_proj_bias) w.o_proj_bias = linear_parameter({E}, Hd, rng);
  if (c.qk_norm) {
    w.q_norm_weight = Tensor({c.dim()}, std::vector<float>(static_cast<size_t>(c.dim()), 1.0f));
    w.k_norm_weight = w.q_norm_weight;
  }
  return w;
}

GroupedQueryAttention::GroupedQueryAttention(GroupedQueryAttentionConfig config)
    : GroupedQueryAttention(config, GroupedQueryAttentionWeights::random(config, 0)) {}

GroupedQueryAttention::GroupedQueryAttention(GroupedQueryAttentionConfig config, GroupedQueryAttentionWeights weights)
    : config_(checked(config)), weights_(std::move(weights)) {
  const auto& c = config_;
  const int64_t E = c.hidden_size, Hd = c.num_heads * c.dim(), KVd = c.kv_heads() * c.dim();
  const auto& w = weights_;
  checks::weight(kGqa, "q_proj.weight", w.q_proj_weight, {Hd, E}, "(H·d, E)");
  checks::weight(kGqa, "k_proj.weight", w.k_proj_weight, {KVd, E}, "(H_kv·d, E)");
  checks::weight(kGqa, "v_proj.weight", w.v_proj_weight, {KVd, E}, "(H_kv·d, E)");
  checks::weight(kGqa, "o_proj.weight", w.o_proj_weight, {E, Hd}, "(E, H·d)");
  checks::optional_weight(kGqa, "q_proj.bias", w.q_proj_bias, c.attention_bias, "attention_bias", {Hd}, "(H·d,)");
  checks::optional_weight(kGqa, "k_proj.bias", w.k_proj_bias, c.attention_bias, "attention_bias", {KVd}, "(H_kv·d,)");
  checks::optional_weight(kGqa, "v_proj.bias", w.v_proj_bias, c.attention_bias, "attention_bias", {KVd}, "(H_kv·d,)");
  checks::optional_weight(kGqa, "o_proj.bias", w.o_proj_bias, c.o_proj_bias, "o_proj_bias", {E}, "(E,)");
  checks::optional_weight(kGqa, "q_norm.weight", w.q_norm_weight, c.qk_norm, "qk_norm", {c.dim()}, "(d,)");
  checks::optional_weight(kGqa, "k_norm.weight", w.k_norm_weight, c.qk_norm, "qk_norm", {c.dim()}, "(d,)");
}

Tensor GroupedQueryAttention::batch_first(const std::string& who, const Tensor& x, bool& batched) const {
  const int64_t E = config_.hidden_size;
  checks::float_input(who, "x", x);
  check_x(who, x.shape, E);
  batched = x.rank() == 3;
  return batched ? x : Tensor({1, x.dim(0), E}, x.data);
}

GroupedQueryAttention::Heads GroupedQueryAttention::project(Backend& b, Value x, int64_t position) const {
  const auto& c = config_;
  const auto& w = weights_;
  auto upload_optional_weight = [&](const char* name, const std::optional<Tensor>& t) {
    return t ? std::optional<Value>(b.upload_weight(name, *t)) : std::nullopt;
  };
  auto ptr = [](const std::optional<Value>& v) { return v ? &*v : nullptr; };
  Value wq = b.upload_matrix("q_proj.weight", w.q_proj_weight);
  Value wk = b.upload_matrix("k_proj.weight", w.k_proj_weight);
  Value wv = b.upload_matrix("v_proj.weight", w.v_proj_weight);
  auto bq = upload_optional_weight("q_proj.bias", w.q_proj_bias);
  auto bk = upload_optional_weight("k_proj.bias", w.k_proj_bias);
  auto bv = upload_optional_weight("v_proj.bias", w.v_proj_bias);
  Value q = b.linear_split_heads("q_proj", "split_heads_q", x, wq, ptr(bq), c.num_heads);   // (B, H, T, d)
  Value k = b.linear_split_heads("k_proj", "split_heads_k", x, wk, ptr(bk), c.kv_heads());  // (B, H_kv, T, d)
  Value v = b.linear_split_heads("v_proj", "split_heads_v", x, wv, ptr(bv), c.kv_heads());  // (B, H_kv, T, d)
  x = Value();  // let go of: its buffer may take a later step's output
  if (c.qk_norm) {  // each head's d features, as Qwen3's q_norm(q.view(B, T, H, d)) before the transpose
    q = b.rms_norm("q_norm", q, b.upload_weight("q_norm.weight", *w.q_norm_weight), c.qk_norm_eps);  // (B, H, T, d)
    k = b.rms_norm("k_norm", k, b.upload_weight("k_norm.weight", *w.k_norm_weight), c.qk_norm_eps);  // (B, H_kv, T, d)
  }
  q = b.rotary_embedding("rotary_embedding_q", q, position, c.rope_theta, c.rotary_dims, c.rope, c.rope_scaling);
  k = b.rotary_embedding("rotary_embedding_k", k, position, c.rope_theta, c.rotary_dims, c.rope, c.rope_scaling);
  return {q, k, v};
}

Value GroupedQueryAttention::merge_and_project(Backend& b, const Value& heads,
                                               const Backend::ResidualAfter* residual) const {
  Value wo = b.upload_matrix("o_proj.weight", weights_.o_proj_weight);
  std::optional<Value> bo;
  if (weights_.o_proj_bias) bo = b.upload_weight("o_proj.bias", *weights_.o_proj_bias);
  return b.merge_heads_linear("merge_heads", "o_proj", heads, wo, bo ? &*bo : nullptr, residual);  // (B, T, E)
}

AttentionValues GroupedQueryAttention::attend(Backend& b, Value x, const Value* key_padding_mask,
                                              const GroupedQueryOptions& options,
                                              const Backend::ResidualAfter* residual) const {
  const auto& c = config_;
  const bool need_weights = options.need_weights;
  const AttentionPath path = attention_path(kGqa, options.attention, need_weights);
  Heads h = project(b, std::move(x), options.position);
  // heads (B, H, T, d); P (B, H, T, T) when the weights are wanted
  AttentionCore core = attention_core(b, h.q, h.k, h.v, nullptr, key_padding_mask, c.causal, c.sliding_window, path,
                                      need_weights);
  h = Heads{};
  AttentionValues result{merge_and_project(b, core.heads, residual), std::nullopt};  // (B, T, E)
  if (need_weights) {
    result.weights = options.average_attn_weights ? b.average_heads("average_heads", *core.weights) : *core.weights;
  }
  return result;
}

AttentionResult GroupedQueryAttention::forward(Backend& backend, const Tensor& x_in,
                                               const GroupedQueryOptions& options) const {
  const std::string who = kGqa + ".forward";
  bool batched = false;
  const Tensor x = batch_first(who, x_in, batched);
  const int64_t T = x.dim(1);
  const std::optional<Tensor> mask = forward_padding(who, x_in.shape, options);
  AttentionResult result;
  std::optional<Value> weights;
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  result.output = run_pass(backend, "grouped_query_attention", [&](Backend& b) {
    std::optional<Value> padding;
    if (mask) padding = b.upload("key_padding_mask", *mask);
    AttentionValues out = attend(b, b.upload("x", x), padding ? &*padding : nullptr, options);
    if (&b == &backend) weights = out.weights;
    return out.output;
  });
  if (!batched) result.output.shape = {T, config_.hidden_size};
  if (weights) {
    result.weights = backend.download(*weights);
    if (!batched) result.weights->shape.erase(result.weights->shape.begin());
  }
  return result;
}

AttentionValues GroupedQueryAttention::forward(Backend& backend, const Value& x_in,
                                               const GroupedQueryOptions& options) const {
  const std::string who = kGqa + ".forward";
  if (x_in.dtype != DType::float32 || x_in.narrow != Narrow::none) {
    throw ShapeError(who + ": x " + shape_string(x_in.shape) + " on the backend must be float32");
  }
  check_x(who, x_in.shape, config_.hidden_size);
  const std::optional<Tensor> mask = forward_padding(who, x_in.shape, options);
  const bool batched = x_in.rank() == 3;
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return in_pass(backend, "grouped_query_attention", [&] {
    const Value x = batched ? x_in : view(x_in, {1, x_in.dim(0), x_in.dim(1)});  // (B, T, E)
    auto recipe = [&](Backend& b, Value in) {
      std::optional<Value> padding;
      if (mask) padding = b.upload("key_padding_mask", *mask);
      return attend(b, std::move(in), padding ? &*padding : nullptr, options);
    };
    backend.preflight("grouped_query_attention", [&](Backend& b) { recipe(b, b.input(x)); });
    AttentionValues out = recipe(backend, x);
    if (!batched) {  // (1, …) -> (…)
      auto unbatch = [](const Value& v) { return view(v, Shape(v.shape.begin() + 1, v.shape.end())); };
      out.output = unbatch(out.output);
      if (out.weights) out.weights = unbatch(*out.weights);
    }
    return out;
  });
}

KVCache GroupedQueryAttention::make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype) const {
  return KVCache(backend, 1, batch, config_.kv_heads(), capacity, config_.dim(), dtype);
}

Value GroupedQueryAttention::attend_cached(Backend& b, Value x, const KVCache::Layer& cache, int64_t position,
                                           const Value* key_padding_mask, int64_t parts,
                                           const Backend::ResidualAfter* residual) const {
  const int64_t T = x.dim(1);
  Heads h = project(b, std::move(x), position);
  Value keys = b.kv_cache_append("kv_cache_append_k", cache.keys, h.k, position);      // (B, H_kv, C, d)
  Value values = b.kv_cache_append("kv_cache_append_v", cache.values, h.v, position);  // (B, H_kv, C, d)
  Value heads = b.flash_decoding_combine("flash_decoding", "attention_combine", h.q, keys, values, position + T,
                                         key_padding_mask, true, config_.sliding_window, parts);  // (B, H, T, d)
  h = Heads{};
  return merge_and_project(b, heads, residual);  // (B, T, E)
}

Tensor GroupedQueryAttention::decode(Backend& backend, const Tensor& x_in, KVCache& cache,
                                     const DecodeOptions& options) const {
  const std::string who = kGqa + ".decode";
  if (!config_.causal) throw ConfigError(who + ": decoding with a cache needs causal attention (causal=false)");
  bool batched = false;
  const Tensor x = batch_first(who, x_in, batched);
  const int64_t B = x.dim(0), T = x.dim(1), position = cache.length();
  if (cache.layers() != 1 || cache.batch() != B || cache.heads() != config_.kv_heads() ||
      cache.head_dim() != config_.dim()) {
    throw ShapeError(who + ": the cache holds " + std::to_string(cache.layers()) + " layers of " +
                     std::to_string(cache.batch()) + " sequences, " + std::to_string(cache.heads()) + " heads of " +
                     std::to_string(cache.head_dim()) + "; this attention needs 1 layer of " + std::to_string(B) +
                     " sequences, " + std::to_string(config_.kv_heads()) + " heads of " + std::to_string(config_.dim()) +
                     " (make_cache)");
  }
  cache.check_room(T);
  const std::optional<Tensor> mask = options.padding_mask(who, B, position + T);
  KeepWeights keep(backend, cache.kept_weights(backend), weights_owner());  // the first step uploads them
  Tensor out = run_pass(backend, "grouped_query_attention_decode", [&](Backend& b) {
    std::optional<Value> padding;
    if (mask) padding = b.upload("key_padding_mask", *mask);
    const KVCache::Layer& layer = cache.layer(backend, 0);  // preflight's b sizes it only
    return attend_cached(b, b.upload("x", x), layer, position, padding ? &*padding : nullptr, options.parts);
  });
  cache.advance(T);
  if (!batched) out.shape = {T, config_.hidden_size};
  return out;
}

}  // namespace vkattn
