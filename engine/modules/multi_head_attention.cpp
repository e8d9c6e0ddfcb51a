#include "vkattn/modules/multi_head_attention.h"

#include <limits>
#include <random>

#include "engine/modules/attention_core.h"
#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

const std::string kForward = "MultiHeadAttention.forward";

void require(bool ok, const std::string& message) {
  if (!ok) throw ShapeError(kForward + ": " + message);
}

std::string describe(const char* name, const Tensor& t) { return std::string(name) + " " + shape_string(t.shape); }


// Appends a zero column on the last axis (…, S) -> (…, S+1): the mask entry of an appended
// key position (bias_k or the zero attention), which is never blocked.
Tensor pad_last(const Tensor& mask) {
  Shape shape = mask.shape;
  int64_t S = shape.back(), rows = element_count(shape) / S;
  shape.back() = S + 1;
  Tensor out(shape, mask.dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < S; ++j) out.data[r * (S + 1) + j] = mask.data[r * S + j];
  return out;
}

}  // namespace

Tensor canonical_mask(const Tensor& mask) {
  if (mask.dtype == DType::float32) return mask;
  Tensor out(mask.shape);
  for (size_t i = 0; i < mask.data.size(); ++i) {
    out.data[i] = mask.data[i] != 0.0f ? -std::numeric_limits<float>::infinity() : 0.0f;
  }
  return out;
}

AttentionPath resolve_attention(AttentionPath requested, bool need_weights) {
  if (requested != AttentionPath::automatic) return requested;
  return need_weights ? AttentionPath::unfused : AttentionPath::fused;
}

AttentionPath parse_attention_path(const std::string& name) {
  if (name == "auto") return AttentionPath::automatic;
  if (name == "unfused") return AttentionPath::unfused;
  if (name == "fused") return AttentionPath::fused;
  throw ConfigError("attention path '" + name + "' is not one of auto, unfused, fused");
}

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::automatic: return "auto";
    case AttentionPath::unfused: return "unfused";
    case AttentionPath::fused: return "fused";
  }
  return "?";
}

MultiHeadAttentionWeights MultiHeadAttentionWeights::random(const MultiHeadAttentionConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t E = c.embed_dim;
  MultiHeadAttentionWeights w;
  w.q_proj_weight = linear_parameter({E, E}, E, rng);
  w.k_proj_weight = linear_parameter({E, c.key_dim()}, c.key_dim(), rng);
  w.v_proj_weight = linear_parameter({E, c.value_dim()}, c.value_dim(), rng);
  w.out_proj_weight = linear_parameter({E, E}, E, rng);
  if (c.bias) {
    w.q_proj_bias = linear_parameter({E}, E, rng);
    w.k_proj_bias = linear_parameter({E}, c.key_dim(), rng);
    w.v_proj_bias = linear_parameter({E}, c.value_dim(), rng);
    w.out_proj_bias = linear_parameter({E}, E, rng);
  }
  if (c.add_bias_kv) {
    w.bias_k = linear_parameter({E}, E, rng);
    w.bias_v = linear_parameter({E}, E, rng);
  }
  return w;
}

MultiHeadAttention::MultiHeadAttention(MultiHeadAttentionConfig config)
    : MultiHeadAttention(config, {}) {}

MultiHeadAttention::MultiHeadAttention(MultiHeadAttentionConfig config, MultiHeadAttentionWeights weights)
    : config_(config) {
  const auto& c = config_;
  if (c.embed_dim <= 0 || c.num_heads <= 0 || c.kdim < 0 || c.vdim < 0) {
    throw ConfigError("MultiHeadAttention: embed_dim=" + std::to_string(c.embed_dim) + ", num_heads=" +
                      std::to_string(c.num_heads) + ", kdim=" + std::to_string(c.kdim) + ", vdim=" +
                      std::to_string(c.vdim) + ": embed_dim and num_heads must be >= 1, kdim and vdim >= 0");
  }
  if (c.embed_dim % c.num_heads != 0) {
    throw ConfigError("MultiHeadAttention: embed_dim=" + std::to_string(c.embed_dim) + " is not divisible by num_heads=" +
                      std::to_string(c.num_heads) + " (each head gets embed_dim / num_heads features)");
  }
  set_weights(weights.q_proj_weight.data.empty() ? MultiHeadAttentionWeights::random(c, 0) : std::move(weights));
}

void MultiHeadAttention::set_weights(MultiHeadAttentionWeights w) {
  const auto& c = config_;
  int64_t E = c.embed_dim;
  const std::string who = "MultiHeadAttention";
  checks::weight(who, "q_proj_weight", w.q_proj_weight, {E, E}, "(E, E)");
  checks::weight(who, "k_proj_weight", w.k_proj_weight, {E, c.key_dim()}, "(E, kdim)");
  checks::weight(who, "v_proj_weight", w.v_proj_weight, {E, c.value_dim()}, "(E, vdim)");
  checks::weight(who, "out_proj.weight", w.out_proj_weight, {E, E}, "(E, E)");
  for (auto [name, t] : {std::pair{"q_proj_bias", &w.q_proj_bias}, {"k_proj_bias", &w.k_proj_bias},
                         {"v_proj_bias", &w.v_proj_bias}, {"out_proj.bias", &w.out_proj_bias}}) {
    checks::optional_weight(who, name, *t, c.bias, "bias", {E}, "(E,)");
  }
  checks::optional_weight(who, "bias_k", w.bias_k, c.add_bias_kv, "add_bias_kv", {E}, "(E,)");
  checks::optional_weight(who, "bias_v", w.bias_v, c.add_bias_kv, "add_bias_kv", {E}, "(E,)");
  weights_ = std::move(w);
  weights_changed();
  in_proj_weight_.reset();
  in_proj_bias_.reset();
  if (c.key_dim() == E && c.value_dim() == E) {
    in_proj_weight_ = stack_rows({&weights_.q_proj_weight, &weights_.k_proj_weight, &weights_.v_proj_weight});
    if (c.bias) in_proj_bias_ = stack_rows({&*weights_.q_proj_bias, &*weights_.k_proj_bias, &*weights_.v_proj_bias});
  }
}

AttentionResult MultiHeadAttention::forward(Backend& backend, const Tensor& query, const ForwardOptions& options) const {
  return forward(backend, query, query, query, options);
}

AttentionResult MultiHeadAttention::forward(Backend& backend, const Tensor& query, const Tensor& key,
                                            const Tensor& value, const ForwardOptions& options) const {
  // The pass spans the input checks too: it has two outputs, which run_pass does not read back
  return in_pass(backend, "multi_head_attention", [&] {
    KeepWeights keep(backend, kept_on(backend), weights_owner());
    return run_steps(backend, query, key, value, options);
  });
}

AttentionValues MultiHeadAttention::forward(Backend& backend, const Value& query, const Value& key,
                                            const Value& value, const ForwardOptions& options) const {
  return in_pass(backend, "multi_head_attention", [&] {
    KeepWeights keep(backend, kept_on(backend), weights_owner());
    const std::string wanted = " on the backend must be batch-first (B, T, features), float32";
    for (auto [name, v] : {std::pair{"query", &query}, {"key", &key}, {"value", &value}}) {
      require(v->rank() == 3 && v->dtype == DType::float32, name + (" " + shape_string(v->shape)) + wanted);
    }
    ForwardOptions resolved = options;
    resolved.attention = path(backend, query.dim(0), query.dim(1), key.dim(1), options);
    backend.preflight("multi_head_attention", [&](Backend& b) {
      // one sized input per distinct tensor, as the pass has them (self-attention's one value
      // three times is what pack_in_proj looks for)
      Value q = b.input(query);
      Value k = key.storage == query.storage ? q : b.input(key);
      Value v = value.storage == key.storage ? k : value.storage == query.storage ? q : b.input(value);
      attend(b, std::move(q), std::move(k), std::move(v), resolved);
    });
    return attend(backend, query, key, value, resolved);
  });
}

AttentionResult MultiHeadAttention::run_steps(Backend& backend, const Tensor& query_in, const Tensor& key_in,
                                              const Tensor& value_in, const ForwardOptions& options) const {
  const auto& c = config_;
  const int64_t E = c.embed_dim, H = c.num_heads;

  (void)attention_path(kForward, options.attention, options.need_weights);
  // ---- inputs: check against PyTorch's rules, then bring to batch-first (B, T, C) -------------
  for (auto [name, t] : {std::pair{"query", &query_in}, {"key", &key_in}, {"value", &value_in}}) {
    checks::float_input(kForward, name, *t);
  }
  const bool batched = query_in.rank() == 3;
  require(query_in.rank() == 2 || batched,
          describe("query", query_in) + " must be (L, E) unbatched or " +
              (c.batch_first ? "(B, L, E)" : "(L, B, E)") + " batched");
  require(key_in.rank() == query_in.rank() && value_in.rank() == query_in.rank(),
          describe("query", query_in) + ", " + describe("key", key_in) + " and " + describe("value", value_in) +
              " must all be batched (rank 3) or all unbatched (rank 2)");
  auto batch_first = [&](const Tensor& t) {
    if (!batched) return Tensor({1, t.dim(0), t.dim(1)}, t.data);
    return c.batch_first ? t : swap_first_axes(t);
  };
  Tensor query = batch_first(query_in), key = batch_first(key_in), value = batch_first(value_in);
  const int64_t B = query.dim(0), L = query.dim(1), S = key.dim(1);
  require(query.dim(2) == E, describe("query", query_in) + " has " + std::to_string(query.dim(2)) +
                                 " features but embed_dim=" + std::to_string(E));
  require(key.dim(2) == c.key_dim(), describe("key", key_in) + " has " + std::to_string(key.dim(2)) +
                                         " features but kdim=" + std::to_string(c.key_dim()));
  require(value.dim(2) == c.value_dim(), describe("value", value_in) + " has " + std::to_string(value.dim(2)) +
                                             " features but vdim=" + std::to_string(c.value_dim()));
  require(key.dim(0) == B && value.dim(0) == B, describe("query", query_in) + ", " + describe("key", key_in) + " and " +
                                                    describe("value", value_in) + " must share the batch size");
  require(value.dim(1) == S, describe("key", key_in) + " and " + describe("value", value_in) +
                                 " must have the same number of positions S");

  // ---- masks: check shapes, make additive float, pad for appended key positions --------------
  std::optional<Tensor> attn_mask, key_padding_mask;
  if (options.attn_mask) {
    const Tensor& m = *options.attn_mask;
    require(m.dtype != DType::int64, "attn_mask is int64 but must be bool or float32");
    Shape per_batch = {(batched ? B : 1) * H, L, S};
    require(m.shape == Shape{L, S} || m.shape == per_batch,
            "attn_mask " + shape_string(m.shape) + " must be (L, S) = " + shape_string({L, S}) + " or " +
                (batched ? "(B·H, L, S) = " : "(H, L, S) = ") + shape_string(per_batch));
    attn_mask = canonical_mask(m);
  }
  if (options.key_padding_mask) {
    key_padding_mask = checks::padding_mask(kForward, "key_padding_mask", *options.key_padding_mask,
                                            batched ? Shape{B, S} : Shape{S}, batched ? "(B, S)" : "(S,)", {B, S});
  }
  // ---- the recipe, on the backend ------------------------------------------------------------------
  ForwardOptions masks = options;
  masks.attn_mask = attn_mask;
  masks.key_padding_mask = key_padding_mask;
  masks.attention = path(backend, query_in, key_in, options);
  auto recipe = [&](Backend& b) {
    // Self-attention passes one tensor three times, cross-attention often one memory twice: each
    // distinct tensor is uploaded once (torch's own test for self-attention is the same identity).
    Value q_in = b.upload("query", query);                                            // (B, L, E)
    Value k_in = &key_in == &query_in ? q_in : b.upload("key", key);                 // (B, S, kdim)
    Value v_in = &value_in == &key_in     ? k_in
                 : &value_in == &query_in ? q_in
                                          : b.upload("value", value);  // (B, S, vdim)
    return attend(b, std::move(q_in), std::move(k_in), std::move(v_in), masks);
  };
  backend.preflight("multi_head_attention", [&](Backend& b) { recipe(b); });
  AttentionValues values = recipe(backend);
  const Value& out = values.output;
  const std::optional<Value>& weights = values.weights;

  // ---- outputs: back to the caller's layout -----------------------------------------------------
  AttentionResult result;
  result.output = backend.download(out);
  if (!batched) result.output.shape = {L, E};
  else if (!c.batch_first) result.output = swap_first_axes(result.output);
  if (weights) {
    result.weights = backend.download(*weights);
    if (!batched) result.weights->shape.erase(result.weights->shape.begin());
  }
  return result;
}

AttentionPath MultiHeadAttention::path(Backend& backend, const Tensor& query, const Tensor& key,
                                       const ForwardOptions& options) const {
  const bool batched = query.rank() == 3;
  const bool b_first = !batched || config_.batch_first;
  const int64_t B = batched ? query.dim(b_first ? 0 : 1) : 1;
  const int64_t L = query.dim(batched && b_first ? 1 : 0), S = key.dim(batched && b_first ? 1 : 0);
  return path(backend, B, L, S, options);
}

AttentionPath MultiHeadAttention::path(Backend& backend, int64_t B, int64_t L, int64_t S,
                                       const ForwardOptions& options) const {
  if (options.attention != AttentionPath::automatic || options.need_weights) {
    return resolve_attention(options.attention, options.need_weights);
  }
  // either path: the one the backend finds faster here (fused, unless it measured otherwise)
  const auto& c = config_;
  const int64_t appended = (c.add_bias_kv ? 1 : 0) + (c.add_zero_attn ? 1 : 0);
  const Backend::AttentionProblem problem{B, c.num_heads, L, S + appended, c.embed_dim / c.num_heads, options.is_causal};
  return backend.prefers_fused(problem) ? AttentionPath::fused : AttentionPath::unfused;
}

AttentionValues MultiHeadAttention::attend(Backend& backend, Value q_in, Value k_in, Value v_in,
                                           const ForwardOptions& options,
                                           const Backend::ResidualAfter* residual) const {
  const auto& c = config_;
  const int64_t H = c.num_heads;
  const AttentionPath path = attention_path(kForward, options.attention, options.need_weights);
  // masks: additive float, one zero column per appended key position (never blocked)
  std::optional<Tensor> attn_mask, key_padding_mask;
  if (options.attn_mask) attn_mask = canonical_mask(*options.attn_mask);
  if (options.key_padding_mask) key_padding_mask = canonical_mask(*options.key_padding_mask);
  int64_t appended = (c.add_bias_kv ? 1 : 0) + (c.add_zero_attn ? 1 : 0);
  for (int64_t i = 0; i < appended; ++i) {
    if (attn_mask) attn_mask = pad_last(*attn_mask);
    if (key_padding_mask) key_padding_mask = pad_last(*key_padding_mask);
  }

  const MultiHeadAttentionWeights& w = weights_;
  auto upload_optional = [&](const char* name, const std::optional<Tensor>& t) {
    return t ? std::optional<Value>(backend.upload(name, *t)) : std::nullopt;
  };
  auto ptr = [](const std::optional<Value>& v) { return v ? &*v : nullptr; };

  const OutProj out_proj = upload_out_proj(backend);  // first, as the pass's buffers are sized for
  auto mask_a = upload_optional("attn_mask", attn_mask);
  auto mask_k = upload_optional("key_padding_mask", key_padding_mask);

  Value q, k, v;  // (B, H, L, d), (B, H, S', d), (B, H, S', d)
  const bool one_input = q_in.storage == k_in.storage && k_in.storage == v_in.storage &&
                         q_in.shape == k_in.shape && k_in.shape == v_in.shape;
  if (options.pack_in_proj && one_input && in_proj_weight_ && !c.add_bias_kv) {
    Value w_in = backend.upload_matrix("in_proj_weight", *in_proj_weight_);
    std::optional<Value> b_in;
    if (in_proj_bias_) b_in = backend.upload_weight("in_proj_bias", *in_proj_bias_);
    Value qkv = backend.linear("in_proj", q_in, w_in, ptr(b_in));  // (B, L, 3E): q, k, v side by side
    q_in = k_in = v_in = Value();  // done with: the caller's last reference frees their buffers for reuse
    q = backend.split_heads("split_heads_q", qkv, H, 3, 0);
    k = backend.split_heads("split_heads_k", qkv, H, 3, 1);
    v = backend.split_heads("split_heads_v", qkv, H, 3, 2);
  } else {
    const Projections p = upload_projections(backend);
    q = p.q_heads(backend, q_in, H);  // (B, H, L, d)
    if (c.add_bias_kv) {  // a row appended to k and v before the split: they are copied
      Value bias_k = backend.upload_weight("bias_k", *w.bias_k);
      Value bias_v = backend.upload_weight("bias_v", *w.bias_v);
      k = backend.append_row("add_bias_k", p.k(backend, k_in), &bias_k);  // (B, S+1, E)
      k = backend.split_heads("split_heads_k", k, H);                     // (B, H, S', d)
      v = backend.append_row("add_bias_v", p.v(backend, v_in), &bias_v);  // (B, S+1, E)
      v = backend.split_heads("split_heads_v", v, H);                     // (B, H, S', d)
    } else {
      k = p.k_heads(backend, k_in, H);  // (B, H, S, d)
      v = p.v_heads(backend, v_in, H);  // (B, H, S, d)
    }
    q_in = k_in = v_in = Value();  // as above
  }
  if (c.add_zero_attn) {
    k = backend.append_row("add_zero_attn_k", k, nullptr);  // (B, H, S'+1, d)
    v = backend.append_row("add_zero_attn_v", v, nullptr);  // (B, H, S'+1, d)
  }
  // heads (B, H, L, d); P (B, H, L, S') when the weights are wanted
  AttentionCore core = attention_core(backend, q, k, v, ptr(mask_a), ptr(mask_k), options.is_causal, 0, path,
                                      options.need_weights);
  q = k = v = Value();  // done with, as above: merge_heads and out_proj take their buffers
  AttentionValues result{merge_and_project(backend, core.heads, out_proj, residual), std::nullopt};  // (B, L, E)
  if (options.need_weights) {
    result.weights = options.average_attn_weights ? backend.average_heads("average_heads", *core.weights) : *core.weights;
  }
  return result;
}

MultiHeadAttention::Projections MultiHeadAttention::upload_projections(Backend& backend) const {
  const MultiHeadAttentionWeights& w = weights_;
  auto upload_optional_weight = [&](const char* name, const std::optional<Tensor>& t) {
    return t ? std::optional<Value>(backend.upload_weight(name, *t)) : std::nullopt;
  };
  Projections p{backend.upload_matrix("q_proj_weight", w.q_proj_weight),
                backend.upload_matrix("k_proj_weight", w.k_proj_weight),
                backend.upload_matrix("v_proj_weight", w.v_proj_weight), std::nullopt, std::nullopt, std::nullopt};
  p.q_bias = upload_optional_weight("q_proj_bias", w.q_proj_bias);
  p.k_bias = upload_optional_weight("k_proj_bias", w.k_proj_bias);
  p.v_bias = upload_optional_weight("v_proj_bias", w.v_proj_bias);
  return p;
}

MultiHeadAttention::OutProj MultiHeadAttention::upload_out_proj(Backend& backend) const {
  OutProj out{backend.upload_matrix("out_proj.weight", weights_.out_proj_weight), std::nullopt};
  if (weights_.out_proj_bias) out.bias = backend.upload_weight("out_proj.bias", *weights_.out_proj_bias);
  return out;
}

Value MultiHeadAttention::merge_and_project(Backend& backend, const Value& heads, const OutProj& out_proj,
                                            const Backend::ResidualAfter* residual) const {
  return backend.merge_heads_linear("merge_heads", "out_proj", heads, out_proj.weight,
                                    out_proj.bias ? &*out_proj.bias : nullptr, residual);  // (B, L, E)
}

Value MultiHeadAttention::attend_cached(Backend& backend, Value x, const KVCache::Layer& cache, int64_t position,
                                        const Value* key_padding_mask, int64_t parts,
                                        const Backend::ResidualAfter* residual) const {
  check_decodable();
  const int64_t H = config_.num_heads, T = x.dim(1);
  const OutProj out_proj = upload_out_proj(backend);
  const Projections p = upload_projections(backend);
  Value q = p.q_heads(backend, x, H);  // (B, H, T, d)
  Value k = p.k_heads(backend, x, H);  // (B, H, T, d)
  Value v = p.v_heads(backend, x, H);  // (B, H, T, d)
  x = Value();
  Value keys = backend.kv_cache_append("kv_cache_append_k", cache.keys, k, position);      // (B, H, C, d)
  Value values = backend.kv_cache_append("kv_cache_append_v", cache.values, v, position);  // (B, H, C, d)
  k = v = Value();
  Value heads = backend.flash_decoding_combine("flash_decoding", "attention_combine", q, keys, values, position + T,
                                               key_padding_mask, /*causal=*/true, /*window=*/0, parts);  // (B, H, T, d)
  q = Value();
  return merge_and_project(backend, heads, out_proj, residual);  // (B, T, E)
}

void MultiHeadAttention::check_decodable() const {
  const auto& c = config_;
  if (c.add_bias_kv || c.add_zero_attn || c.key_dim() != c.embed_dim || c.value_dim() != c.embed_dim) {
    throw ConfigError("MultiHeadAttention: decoding with a KVCache needs kdim = vdim = embed_dim "
                      "and neither add_bias_kv nor add_zero_attn");
  }
}

KVCache::Layer MultiHeadAttention::project_memory(Backend& backend, const Value& memory) const {
  check_decodable();
  const int64_t H = config_.num_heads;
  const Projections p = upload_projections(backend);
  Value keys = p.k_heads(backend, memory, H);    // (B, H, S, d)
  Value values = p.v_heads(backend, memory, H);  // (B, H, S, d)
  return {keys, values};
}

Value MultiHeadAttention::attend_memory(Backend& backend, Value x, const KVCache::Layer& memory,
                                        const Value* key_padding_mask, int64_t parts,
                                        const Backend::ResidualAfter* residual) const {
  check_decodable();
  const int64_t H = config_.num_heads, S = memory.keys.dim(2);
  const OutProj out_proj = upload_out_proj(backend);
  Value weight = backend.upload_matrix("q_proj_weight", weights_.q_proj_weight);
  std::optional<Value> bias;
  if (weights_.q_proj_bias) bias = backend.upload_weight("q_proj_bias", *weights_.q_proj_bias);
  Value q = backend.linear_split_heads("q_proj", "split_heads_q", x, weight, bias ? &*bias : nullptr, H);
  x = Value();                                                                  // q: (B, H, T, d)
  Value heads =
      backend.flash_decoding_combine("flash_decoding", "attention_combine", q, memory.keys, memory.values, S,
                                     key_padding_mask, /*causal=*/false, /*window=*/0, parts);  // (B, H, T, d)
  q = Value();
  return merge_and_project(backend, heads, out_proj, residual);  // (B, T, E)
}

}  // namespace vkattn
