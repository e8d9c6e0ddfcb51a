// Backend's step methods: each checks its inputs (one ShapeError whatever the backend), makes
// the output, runs the backend's run_<op> hook and reports the step. The pass around them is in
// backend.cpp.
#include "vkattn/backends/backend.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "engine/backends/backend_checks.h"
#include "reference/reference.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

using backend_checks::describe;
using backend_checks::require;

void require_float(const std::string& step, const Value& v) {
  require(v.dtype == DType::float32, step,
          describe(v) + " is " + dtype_name(v.dtype) + " but the step computes in float32");
}

void require_rank(const std::string& step, const Value& v, int64_t rank, const char* layout) {
  require_float(step, v);
  require(v.rank() == rank, step,
          describe(v) + " has rank " + std::to_string(v.rank()) + " but must be " + layout);
}

std::vector<TensorInfo> infos(std::initializer_list<const Value*> inputs) {
  std::vector<TensorInfo> out;
  for (const Value* v : inputs)
    if (v) out.push_back({v->name, v->shape, v->dtype});
  return out;
}

// Query heads per key/value head (grouped-query attention): `kv` (B, H_kv, …) must share q's
// batch and have a head count dividing q's H. `what` names kv's role ("key", "value", "key cache").
int64_t kv_group(const std::string& step, const Value& q, const Value& kv, const char* what) {
  require(q.dim(0) == kv.dim(0), step, describe(q) + " and " + what + " " + describe(kv) + " must agree on B");
  const int64_t H = q.dim(1), H_kv = kv.dim(1);
  require(H_kv >= 1 && H % H_kv == 0, step,
          describe(q) + " has " + std::to_string(H) + " heads, not a multiple of " + what + " " + describe(kv) + "'s " +
              std::to_string(H_kv) + " (each key/value head serves H / H_kv query heads)");
  return H / H_kv;
}

// A sliding window (keys i - W < j <= i) narrows the causal mask: W >= 0, and 0 (none) unless causal.
void require_window(const std::string& step, bool causal, int64_t window) {
  require(window >= 0, step, "window=" + std::to_string(window) + " must be >= 1 keys, or 0 for none");
  require(window == 0 || causal, step,
          "window=" + std::to_string(window) + " is a sliding window over past keys and needs causal attention");
}

// "(160, 8, 40, 1)": the strides, in floats, of (B, T, H, d) over memory laid out (B, H, T, d)
std::string heads_strides(int64_t H, int64_t T, int64_t d) {
  return "(" + std::to_string(H * T * d) + ", " + std::to_string(d) + ", " + std::to_string(T * d) + ", 1)";
}

// A (B·T, H·d) tensor read back from the (B, H, T, d) it lies in, put in its own order
Tensor merge_read_back(const Tensor& stored, int64_t B, int64_t H, int64_t T, int64_t d) {
  Tensor out({B, T, H * d});
  reference::merge_heads(stored.data.data(), out.data.data(), B, H, T, d);
  return out;
}

// The axis names of append_row's output: the key/value sequence before or after split_heads.
std::vector<std::string> row_dims(const Value& x) {
  return x.rank() == 4 ? std::vector<std::string>{"b", "h", "t", "c"} : std::vector<std::string>{"b", "t", "f"};
}

}  // namespace

Backend::LinearSizes Backend::check_linear(const std::string& step, const Value& x, const Value& weight,
                                           const Value* bias) {
  require_float(step, x);
  require(x.rank() >= 1, step, "input " + describe(x) + " must have a feature dim");
  require_rank(step, weight, 2, "(out_features, in_features)");
  int64_t K = x.dim(-1), M = weight.dim(0);
  require(weight.dim(1) == K, step,
          "input " + describe(x) + " has " + std::to_string(K) + " features but weight " + describe(weight) +
              " expects " + std::to_string(weight.dim(1)) + " (x · Wᵀ needs x's last dim = W's columns)");
  if (bias) {
    require_rank(step, *bias, 1, "(out_features,)");
    require(bias->dim(0) == M, step,
            "bias " + describe(*bias) + " must have " + std::to_string(M) + " elements, one per output feature of weight " +
                describe(weight));
  }
  return {element_count(x.shape) / K, K, M};
}

Value Backend::linear(const std::string& step_name, const Value& x, const Value& weight, const Value* bias) {
  const std::string step = scoped(step_name);
  const LinearSizes sizes = check_linear(step, x, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;  // named, not bound: clang 14 captures no bindings
  Shape shape = x.shape;
  shape.back() = M;
  Value y = make_output(step, shape);
  timed(step, [&] {
    run_linear(step, *x.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M, {}, {});
  });
  report(step, "linear", infos({&x, &weight, bias}), y, {"b", "t", "f"});
  return y;
}

Value Backend::split_heads(const std::string& step_name, const Value& x, int64_t heads, int64_t chunks, int64_t chunk) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, chunks == 1 ? "(B, T, E)" : "(B, T, n·E)");
  require(chunks >= 1 && chunk >= 0 && chunk < chunks, step,
          "chunk " + std::to_string(chunk) + " of " + std::to_string(chunks) + " does not exist (0 <= chunk < chunks)");
  require(x.dim(2) % chunks == 0, step,
          "input " + describe(x) + " has " + std::to_string(x.dim(2)) + " features, which do not split into " +
              std::to_string(chunks) + " equal chunks");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2) / chunks;
  require(heads >= 1 && E % heads == 0, step,
          "input " + describe(x) + " has E=" + std::to_string(E) + " which " + std::to_string(heads) +
              " heads do not divide (E must be a multiple of H)");
  int64_t d = E / heads;
  Value y = make_output(step, {B, heads, T, d});
  timed(step, [&] { run_split_heads(step, *x.storage, *y.storage, B, T, heads, d, chunks, chunk); });
  report(step, "split_heads", infos({&x}), y, {"b", "h", "t", "c"});
  return y;
}

Value Backend::append_row(const std::string& step_name, const Value& x, const Value* row) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 2, step, "input " + describe(x) + " must be (…, T, C)");
  int64_t T = x.dim(-2), C = x.dim(-1);
  int64_t N = element_count(x.shape) / (T * C);
  if (row) {
    require_float(step, *row);
    require(element_count(row->shape) == C, step,
            "row " + describe(*row) + " must hold " + std::to_string(C) + " values, one per channel of " + describe(x));
  }
  Shape shape = x.shape;
  shape[shape.size() - 2] += 1;
  Value y = make_output(step, shape);
  timed(step, [&] {
    run_append_row(step, *x.storage, row ? row->storage.get() : nullptr, *y.storage, N, T, C);
  });
  report(step, "append_row", infos({&x, row}), y, row_dims(x));
  return y;
}

Value Backend::attention_scores(const std::string& step_name, const Value& q, const Value& k) {
  const std::string step = scoped(step_name);
  require_rank(step, q, 4, "(B, H, L, d)");
  require_rank(step, k, 4, "(B, H_kv, S, d)");
  require(q.dim(3) == k.dim(3), step, "query " + describe(q) + " and key " + describe(k) + " must agree on d");
  const int64_t group = kv_group(step, q, k, "key");
  int64_t B = q.dim(0), H = q.dim(1), L = q.dim(2), S = k.dim(2), d = q.dim(3);
  Value scores = make_output(step, {B, H, L, S});
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  timed(step, [&] {
    run_attention_scores(step, *q.storage, *k.storage, *scores.storage, B * H, L, S, d, scale, group);
  });
  report(step, "attention_scores", infos({&q, &k}), scores, {"b", "h", "i", "j"});
  return scores;
}

// The rank of attn_mask (0: none, 2: (L, S), 3: (B·H, L, S)), after checking both masks against
// scores of shape (B, H, L, S); `against` names those scores in the message.
static int check_masks(const std::string& step, const Value* attn_mask, const Value* key_padding_mask, int64_t B,
                       int64_t H, int64_t L, int64_t S, const std::string& against) {
  int rank = 0;
  if (attn_mask) {
    require_float(step, *attn_mask);
    bool ok2 = attn_mask->shape == Shape{L, S};
    bool ok3 = attn_mask->shape == Shape{B * H, L, S};
    require(ok2 || ok3, step,
            "attn_mask " + shape_string(attn_mask->shape) + " must be (L, S) = " + shape_string({L, S}) +
                " or (B·H, L, S) = " + shape_string({B * H, L, S}) + " for " + against);
    rank = ok2 ? 2 : 3;
  }
  if (key_padding_mask) {
    require_float(step, *key_padding_mask);
    require(key_padding_mask->shape == Shape{B, S}, step,
            "key_padding_mask " + shape_string(key_padding_mask->shape) + " must be (B, S) = " +
                shape_string({B, S}) + " for " + against);
  }
  return rank;
}

Value Backend::attention_mask(const std::string& step_name, const Value& scores, const Value* attn_mask,
                              const Value* key_padding_mask, bool causal, int64_t window) {
  const std::string step = scoped(step_name);
  require_rank(step, scores, 4, "(B, H, L, S)");
  require_window(step, causal, window);
  int64_t B = scores.dim(0), H = scores.dim(1), L = scores.dim(2), S = scores.dim(3);
  int rank = check_masks(step, attn_mask, key_padding_mask, B, H, L, S, "scores " + shape_string(scores.shape));
  Value out = make_output(step, scores.shape);
  timed(step, [&] {
    run_attention_mask(step, *scores.storage, attn_mask ? attn_mask->storage.get() : nullptr, rank,
                       key_padding_mask ? key_padding_mask->storage.get() : nullptr, causal, window, *out.storage, B, H,
                       L, S);
  });
  report(step, "attention_mask", infos({&scores, attn_mask, key_padding_mask}), out, {"b", "h", "i", "j"});
  return out;
}

Value Backend::flash_attention(const std::string& step_name, const Value& q, const Value& k, const Value& v,
                               const Value* attn_mask, const Value* key_padding_mask, bool causal,
                               int64_t window) {
  const std::string step = scoped(step_name);
  require_rank(step, q, 4, "(B, H, L, d)");
  require_rank(step, k, 4, "(B, H_kv, S, d)");
  require_rank(step, v, 4, "(B, H_kv, S, d)");
  require(q.dim(3) == k.dim(3) && v.shape == k.shape, step,
          "query " + describe(q) + ", key " + describe(k) + " and value " + describe(v) +
              " must agree on d, and key and value on every dim");
  const int64_t group = kv_group(step, q, k, "key");
  require_window(step, causal, window);
  int64_t B = q.dim(0), H = q.dim(1), L = q.dim(2), S = k.dim(2), d = q.dim(3);
  int rank = check_masks(step, attn_mask, key_padding_mask, B, H, L, S,
                         "the scores (B, H, L, S) = " + shape_string({B, H, L, S}));
  Value out = make_output(step, {B, H, L, d});
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  timed(step, [&] {
    run_flash_attention(step, *q.storage, *k.storage, *v.storage, attn_mask ? attn_mask->storage.get() : nullptr, rank,
                        key_padding_mask ? key_padding_mask->storage.get() : nullptr, causal, window, *out.storage, B, H,
                        L, S, d, scale, group);
  });
  report(step, "flash_attention", infos({&q, &k, &v, attn_mask, key_padding_mask}), out, {"b", "h", "i", "c"});
  return out;
}

Value Backend::kv_cache_append(const std::string& step_name, const Value& cache, const Value& rows, int64_t position) {
  const std::string step = scoped(step_name);
  require_rank(step, cache, 4, "(B, H, capacity, d)");
  require_rank(step, rows, 4, "(B, H, T, d)");
  require(rows.dim(0) == cache.dim(0) && rows.dim(1) == cache.dim(1) && rows.dim(3) == cache.dim(3), step,
          "rows " + describe(rows) + " and cache " + describe(cache) + " must agree on B, H and d");
  const int64_t B = cache.dim(0), H = cache.dim(1), C = cache.dim(2), d = cache.dim(3), T = rows.dim(2);
  require(position >= 0 && position + T <= C, step,
          "the cache holds at most " + std::to_string(C) + " positions (its capacity) but " + std::to_string(T) +
              " new rows at position " + std::to_string(position) + " would end at " + std::to_string(position + T));
  Value out{step, cache.shape, DType::float32, cache.storage};  // written in place
  timed(step, [&] { run_kv_cache_append(step, *out.storage, *rows.storage, B * H, C, T, d, position); });
  report(step, "kv_cache_append", infos({&rows}), out, {"b", "h", "s", "c"});
  return out;
}

int64_t Backend::decoding_parts(int64_t rows, int64_t length, int64_t /*d*/, int64_t /*queries*/,
                                int64_t /*key_rows*/) {
  constexpr int64_t kMinKeys = 32;  // fewer keys a part would cost more in attention_combine than they save
  const int64_t wanted = std::max<int64_t>(1, decoding_lanes() / std::max<int64_t>(rows, 1));
  return std::max<int64_t>(1, std::min(wanted, (length + kMinKeys - 1) / kMinKeys));
}

Value Backend::flash_decoding(const std::string& step_name, const Value& q, const Value& k, const Value& v,
                              int64_t length, const Value* key_padding_mask, bool causal, int64_t window,
                              int64_t parts) {
  const std::string step = scoped(step_name);
  require_rank(step, q, 4, "(B, H, L, d)");
  require_rank(step, k, 4, "(B, H_kv, capacity, d)");
  require_rank(step, v, 4, "(B, H_kv, capacity, d)");
  require(q.dim(3) == k.dim(3) && v.shape == k.shape, step,
          "query " + describe(q) + ", key cache " + describe(k) + " and value cache " + describe(v) +
              " must agree on d, and the caches on every dim");
  const int64_t group = kv_group(step, q, k, "key cache");
  require_window(step, causal, window);
  const int64_t B = q.dim(0), H = q.dim(1), L = q.dim(2), d = q.dim(3), C = k.dim(2), S = length;
  require(S >= 1 && S <= C, step,
          "length " + std::to_string(S) + " must be between 1 and the caches' capacity " + std::to_string(C));
  require(!causal || L <= S, step,
          "query " + describe(q) + " holds " + std::to_string(L) + " new positions, more than the " +
              std::to_string(S) + " in the cache");
  if (key_padding_mask) {
    require_float(step, *key_padding_mask);
    require(key_padding_mask->shape == Shape{B, S}, step,
            "key_padding_mask " + describe(*key_padding_mask) + " must be (B, S) = " + shape_string({B, S}));
  }
  if (parts == 0) parts = decoding_parts(B * H * L, S, d, L, B * H / group);
  require(parts >= 1 && parts <= S, step,
          "parts=" + std::to_string(parts) + " must be between 1 and the " + std::to_string(S) + " keys");
  Value out = make_output(step, {B, H, L, parts, d + 2});
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  timed(step, [&] {
    run_flash_decoding(step, *q.storage, *k.storage, *v.storage,
                       key_padding_mask ? key_padding_mask->storage.get() : nullptr, causal, window, *out.storage, B, H,
                       L, C, S, d, parts, scale, group);
  });
  report(step, "flash_decoding", infos({&q, &k, &v, key_padding_mask}), out, {"b", "h", "i", "part", "c"});
  return out;
}

Value Backend::attention_combine(const std::string& step_name, const Value& partials) {
  const std::string step = scoped(step_name);
  require_rank(step, partials, 5, "(B, H, L, parts, d + 2)");
  require(partials.dim(4) >= 3, step, "partials " + describe(partials) + " must hold d + 2 >= 3 values per part");
  const int64_t B = partials.dim(0), H = partials.dim(1), L = partials.dim(2), P = partials.dim(3),
                d = partials.dim(4) - 2;
  Value out = make_output(step, {B, H, L, d});
  timed(step, [&] { run_attention_combine(step, *partials.storage, *out.storage, B * H * L, P, d); });
  report(step, "attention_combine", infos({&partials}), out, {"b", "h", "i", "c"});
  return out;
}

Value Backend::softmax(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 1, step, "input " + describe(x) + " must have a last dim to normalise over");
  int64_t S = x.dim(-1), R = element_count(x.shape) / S;
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_softmax(step, *x.storage, *y.storage, R, S); });
  report(step, "softmax", infos({&x}), y, {"b", "h", "i", "j"});
  return y;
}

Value Backend::attention_values(const std::string& step_name, const Value& p, const Value& v) {
  const std::string step = scoped(step_name);
  require_rank(step, p, 4, "(B, H, L, S)");
  require_rank(step, v, 4, "(B, H_kv, S, d)");
  require(p.dim(3) == v.dim(2), step, "weights " + describe(p) + " and value " + describe(v) + " must agree on S");
  const int64_t group = kv_group(step, p, v, "value");
  int64_t B = p.dim(0), H = p.dim(1), L = p.dim(2), S = p.dim(3), d = v.dim(3);
  Value out = make_output(step, {B, H, L, d});
  timed(step, [&] { run_attention_values(step, *p.storage, *v.storage, *out.storage, B * H, L, S, d, group); });
  report(step, "attention_values", infos({&p, &v}), out, {"b", "h", "i", "c"});
  return out;
}

Value Backend::merge_heads(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 4, "(B, H, T, d)");
  int64_t B = x.dim(0), H = x.dim(1), T = x.dim(2), d = x.dim(3);
  Value y = make_output(step, {B, T, H * d});
  timed(step, [&] { run_merge_heads(step, *x.storage, *y.storage, B, H, T, d); });
  report(step, "merge_heads", infos({&x}), y, {"b", "i", "f"});
  return y;
}

Value Backend::linear_split_heads(const std::string& linear_name, const std::string& split_name, const Value& x,
                                  const Value& weight, const Value* bias, int64_t heads) {
  if (!folds_layout_steps() || x.rank() != 3) return split_heads(split_name, linear(linear_name, x, weight, bias), heads);
  const std::string step = scoped(linear_name), split = scoped(split_name);
  const LinearSizes sizes = check_linear(step, x, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;  // named, not bound: clang 14 captures no bindings
  const int64_t B = x.dim(0), T = x.dim(1);
  require(heads >= 1 && M % heads == 0, split,
          "input " + step + " " + shape_string({B, T, M}) + " has E=" + std::to_string(M) + " which " +
              std::to_string(heads) + " heads do not divide (E must be a multiple of H)");
  const int64_t d = M / heads;
  Value y = make_output(step, {B, heads, T, d});  // the product, stored split: q_proj allocates it
  y.name = split;
  timed(step, [&] {
    run_linear(step, *x.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M, {},
               {heads, T});
  });
  const Value product{step, {B, T, M}, DType::float32, y.storage};  // q_proj's tensor, as it lies in y
  report(step, "linear", infos({&x, &weight, bias}), product, {"b", "t", "f"},
         {"", y.shape, [=](Tensor stored) { return merge_read_back(stored, B, heads, T, d); }});
  fold_time();
  report(split, "split_heads", {{step, product.shape, product.dtype, {}, y.shape}}, y, {"b", "h", "t", "c"},
         {"folded into " + linear_name + "'s store, which wrote (B, T, H, d) at strides " + heads_strides(heads, T, d),
          {}, {}});
  return y;
}

Value Backend::merge_heads_linear(const std::string& merge_name, const std::string& linear_name, const Value& heads,
                                  const Value& weight, const Value* bias) {
  if (!folds_layout_steps()) return linear(linear_name, merge_heads(merge_name, heads), weight, bias);
  const std::string merge = scoped(merge_name), step = scoped(linear_name);
  require_rank(merge, heads, 4, "(B, H, T, d)");
  const int64_t B = heads.dim(0), H = heads.dim(1), T = heads.dim(2), d = heads.dim(3);
  const Value merged{merge, {B, T, H * d}, DType::float32, heads.storage};  // the heads, read in place
  const Folding in_place{"folded into " + linear_name + "'s load, which read (B, T, H, d) at strides " +
                             heads_strides(H, T, d),
                         heads.shape, [=](Tensor stored) { return merge_read_back(stored, B, H, T, d); }};
  fold_time();
  report(merge, "merge_heads", infos({&heads}), merged, {"b", "i", "f"}, in_place);
  const LinearSizes sizes = check_linear(step, merged, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;
  Value y = make_output(step, {B, T, M});
  timed(step, [&] {
    run_linear(step, *heads.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M,
               {H, T}, {});
  });
  TensorInfo input{merged.name, merged.shape, merged.dtype, {}, heads.shape};
  std::vector<TensorInfo> inputs = infos({&weight, bias});
  inputs.insert(inputs.begin(), input);
  report(step, "linear", std::move(inputs), y, {"b", "t", "f"});
  return y;
}

Value Backend::average_heads(const std::string& step_name, const Value& p) {
  const std::string step = scoped(step_name);
  require_rank(step, p, 4, "(B, H, L, S)");
  int64_t B = p.dim(0), H = p.dim(1), L = p.dim(2), S = p.dim(3);
  Value avg = make_output(step, {B, L, S});
  timed(step, [&] { run_average_heads(step, *p.storage, *avg.storage, B, H, L * S); });
  report(step, "average_heads", infos({&p}), avg, {"b", "i", "j"});
  return avg;
}

Value Backend::layer_norm(const std::string& step_name, const Value& x, const Value& weight, const Value& bias,
                          float eps) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 1, step, "input " + describe(x) + " must have a feature dim to normalise over");
  int64_t E = x.dim(-1), N = element_count(x.shape) / E;
  for (const Value* p : {&weight, &bias}) {
    require_rank(step, *p, 1, "(E,)");
    require(p->dim(0) == E, step, describe(*p) + " must have " + std::to_string(E) + " elements, one per feature of " + describe(x));
  }
  require(eps > 0.0f && std::isfinite(eps), step, "eps " + std::to_string(eps) + " must be a positive finite number");
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_layer_norm(step, *x.storage, *weight.storage, *bias.storage, *y.storage, N, E, eps); });
  report(step, "layer_norm", infos({&x, &weight, &bias}), y, {"b", "t", "f"});
  return y;
}

Value Backend::rms_norm(const std::string& step_name, const Value& x, const Value& weight, float eps) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 1, step, "input " + describe(x) + " must have a feature dim to normalise over");
  int64_t E = x.dim(-1), N = element_count(x.shape) / E;
  require_rank(step, weight, 1, "(E,)");
  require(weight.dim(0) == E, step, describe(weight) + " must have " + std::to_string(E) + " elements, one per feature of " + describe(x));
  require(eps > 0.0f && std::isfinite(eps), step, "eps " + std::to_string(eps) + " must be a positive finite number");
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_rms_norm(step, *x.storage, *weight.storage, *y.storage, N, E, eps); });
  report(step, "rms_norm", infos({&x, &weight}), y, {"b", "t", "f"});
  return y;
}

Value Backend::gelu(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_gelu(step, *x.storage, *y.storage, element_count(x.shape)); });
  report(step, "gelu", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::gelu_tanh(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_gelu_tanh(step, *x.storage, *y.storage, element_count(x.shape)); });
  report(step, "gelu_tanh", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::relu(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_relu(step, *x.storage, *y.storage, element_count(x.shape)); });
  report(step, "relu", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::residual_add(const std::string& step_name, const Value& x, const Value& residual) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require_float(step, residual);
  require(x.shape == residual.shape, step, describe(x) + " and " + describe(residual) + " must have the same shape");
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_residual_add(step, *x.storage, *residual.storage, *y.storage, element_count(x.shape)); });
  report(step, "residual_add", infos({&x, &residual}), y, {"b", "t", "f"});
  return y;
}

Value Backend::silu(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_silu(step, *x.storage, *y.storage, element_count(x.shape)); });
  report(step, "silu", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::tanh(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_tanh(step, *x.storage, *y.storage, element_count(x.shape)); });
  report(step, "tanh", infos({&x}), y, x.rank() == 2 ? std::vector<std::string>{"b", "f"} : std::vector<std::string>{"b", "t", "f"});
  return y;
}

Value Backend::multiply(const std::string& step_name, const Value& x, const Value& other) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require_float(step, other);
  require(x.shape == other.shape, step, describe(x) + " and " + describe(other) + " must have the same shape");
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_multiply(step, *x.storage, *other.storage, *y.storage, element_count(x.shape)); });
  report(step, "multiply", infos({&x, &other}), y, {"b", "t", "f"});
  return y;
}

Value Backend::embedding(const std::string& step_name, const Value& ids, const Value& table) {
  const std::string step = scoped(step_name);
  require(ids.dtype == DType::int64, step, "token ids " + describe(ids) + " are " + dtype_name(ids.dtype) + " but must be int64");
  require(ids.rank() == 2, step, "token ids " + describe(ids) + " have rank " + std::to_string(ids.rank()) + " but must be (B, T)");
  require_rank(step, table, 2, "(vocab_size, E)");
  int64_t B = ids.dim(0), T = ids.dim(1), V = table.dim(0), E = table.dim(1);
  Value y = make_output(step, {B, T, E});
  timed(step, [&] { run_embedding(step, *ids.storage, *table.storage, *y.storage, B * T, V, E); });
  report(step, "embedding", infos({&ids, &table}), y, {"b", "t", "f"});
  return y;
}

Value Backend::positional_encoding(const std::string& step_name, const Value& x, const Value& table) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  require_rank(step, table, 2, "(max_positions, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  require(table.dim(1) == E, step, "table " + describe(table) + " has " + std::to_string(table.dim(1)) +
                                       " features but input " + describe(x) + " has " + std::to_string(E));
  require(table.dim(0) >= T, step, "table " + describe(table) + " has " + std::to_string(table.dim(0)) +
                                       " positions, fewer than the " + std::to_string(T) + " of input " + describe(x));
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_positional_encoding(step, *x.storage, *table.storage, *y.storage, B, T, E); });
  report(step, "positional_encoding", infos({&x, &table}), y, {"b", "t", "f"});
  return y;
}

RotaryConvention parse_rotary_convention(const std::string& name) {
  if (name == "half") return RotaryConvention::half;
  if (name == "pairs") return RotaryConvention::pairs;
  throw ConfigError("rotary convention '" + name + "' is neither half (features i, i + d/2: GPT-NeoX) nor pairs " +
                    "(2i, 2i + 1: GPT-J)");
}

Value Backend::rotary_embedding(const std::string& step_name, const Value& x, int64_t offset, float theta,
                                int64_t rotary_dims, RotaryConvention convention, const RopeScaling& scaling) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 4, "(B, H, T, d)");
  const int64_t B = x.dim(0), H = x.dim(1), T = x.dim(2), d = x.dim(3);
  const int64_t r = rotary_dims == 0 ? d : rotary_dims;
  require(r > 0 && r <= d && r % 2 == 0, step,
          "rotary_dims " + std::to_string(r) + " must be even and within the head dim d = " + std::to_string(d) +
              " of " + describe(x) + (r % 2 ? ": RoPE rotates features in pairs" : ""));
  require(offset >= 0, step, "position offset " + std::to_string(offset) + " must be >= 0");
  require(std::isfinite(theta) && theta > 1.0f, step, "theta " + std::to_string(theta) + " must be a number > 1");
  require(scaling.type == RopeScaling::Type::none ||
              (std::isfinite(scaling.factor) && scaling.factor >= 1.0f &&
               (scaling.type != RopeScaling::Type::llama3 ||
                (scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor &&
                 scaling.original_max_positions > 0))),
          step, "rope scaling: factor " + std::to_string(scaling.factor) + " must be >= 1, and llama3's " +
                    "0 < low_freq_factor < high_freq_factor, original_max_positions > 0");
  Tensor frequencies({r / 2});
  for (int64_t i = 0; i < r / 2; ++i) {
    float f = reference::rotary_inverse_frequency(i, r, theta);
    if (scaling.type == RopeScaling::Type::linear) f /= scaling.factor;
    if (scaling.type == RopeScaling::Type::llama3) {
      f = reference::rotary_llama3_frequency(f, scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor,
                                             static_cast<float>(scaling.original_max_positions));
    }
    frequencies.data[static_cast<size_t>(i)] = f;
  }
  const Value inv_freq = upload(step_name + ".inv_freq", frequencies);
  Tensor table({T, r / 2, 2});
  reference::rotary_cos_sin(frequencies.data.data(), table.data.data(), T, offset, r);
  const Value cos_sin = upload(step_name + ".cos_sin", table);
  Value y = make_output(step, x.shape);
  timed(step, [&] {
    run_rotary_embedding(step, *x.storage, *inv_freq.storage, *cos_sin.storage, *y.storage, B * H, T, d, offset, r,
                         convention == RotaryConvention::pairs);
  });
  report(step, "rotary_embedding", infos({&x, &inv_freq}), y, {"b", "h", "t", "c"});
  return y;
}

Value Backend::mean_pool(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  Value y = make_output(step, {B, E});
  timed(step, [&] { run_mean_pool(step, *x.storage, *y.storage, B, T, E); });
  report(step, "mean_pool", infos({&x}), y, {"b", "f"});
  return y;
}

Value Backend::first_token(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  Value y = make_output(step, {B, E});
  timed(step, [&] { run_first_token(step, *x.storage, *y.storage, B, T, E); });
  report(step, "first_token", infos({&x}), y, {"b", "f"});
  return y;
}

Value Backend::host_step(const std::string& step_name, const std::string& op, const std::vector<const Value*>& inputs,
                         std::vector<std::string> dims, const HostStep& compute) {
  const std::string step = scoped(step_name);
  Tensor result;
  timed(step, [&] {
    std::vector<Tensor> host;
    for (const Value* v : inputs) host.push_back(download(*v));
    result = compute(host);
  });
  require(element_count(result.shape) == result.size() && result.size() > 0, step,
          "the host step made " + std::to_string(result.size()) + " values for shape " + shape_string(result.shape));
  Value y{step, result.shape, result.dtype, store(step, result)};
  std::vector<TensorInfo> in;
  for (const Value* v : inputs) in.push_back({v->name, v->shape, v->dtype});
  report(step, op.c_str(), std::move(in), y, std::move(dims));
  return y;
}

}  // namespace vkattn
