// Backend's step methods of attention itself — projections, heads, scores, mask, softmax, values,
// the fused step and the folded layout steps: each checks its inputs (one ShapeError whatever the
// backend), makes the output, runs the backend's run_<op> hook and reports the step. Decoding's
// steps are in decoding_steps.cpp, the blocks' around attention in block_steps.cpp, the pass in
// backend.cpp.
#include "vkattn/backends/backend.h"

#include <algorithm>
#include <cmath>

#include "engine/backends/backend_checks.h"
#include "reference/reference.h"
#include "vkattn/errors.h"

namespace vkattn {

using namespace backend_checks;

Backend::LinearSizes Backend::check_linear(const std::string& step, const Value& x, const Value& weight,
                                           const Value* bias) {
  require_float(step, x);
  require(x.rank() >= 1, step, [&] { return "input " + describe(x) + " must have a feature dim"; });
  require_rank(step, weight, 2, "(out_features, in_features)", /*sixteen_bit=*/true);
  int64_t K = x.dim(-1), M = weight.dim(0);
  require(weight.dim(1) == K, step, [&] {
    return "input " + describe(x) + " has " + std::to_string(K) + " features but weight " + describe(weight) +
           " expects " + std::to_string(weight.dim(1)) + " (x · Wᵀ needs x's last dim = W's columns)";
  });
  if (bias) {
    require_rank(step, *bias, 1, "(out_features,)");
    require(bias->dim(0) == M, step, [&] {
      return "bias " + describe(*bias) + " must have " + std::to_string(M) +
             " elements, one per output feature of weight " + describe(weight);
    });
  }
  return {element_count(x.shape) / K, K, M};
}

Value Backend::linear(const std::string& step_name, const Value& x, const Value& weight, const Value* bias,
                      const ResidualAfter* residual) {
  if (residual && (!folds_into_store() || wants_values())) {
    return add_residual(residual->step, *residual->x, linear(step_name, x, weight, bias));
  }
  const std::string step = scoped(step_name);
  const LinearSizes sizes = check_linear(step, x, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;  // named, not bound: clang 14 captures no bindings
  Shape shape = x.shape;
  shape.back() = M;
  Value y = linear_output(step, shape, residual);
  const StoreFold fold{ActivationStep::none, residual ? residual->x->storage.get() : nullptr};
  timed(step, [&] {
    run_linear(step, *x.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M, {}, {},
               fold);
  });
  if (!residual) {
    if (tracing()) report(step, "linear", infos({&x, &weight, bias}), y, {"b", "t", "f"});
    return y;
  }
  // the product itself is never stored: its step says its shape (no tracer here wants values)
  if (tracing())
    report(step, "linear", infos({&x, &weight, bias}), Value{step, shape, DType::float32, y.storage}, {"b", "t", "f"});
  report_folded_residual(*residual, step, shape, y);
  return y;
}

Value Backend::linear_output(const std::string& step, const Shape& shape, const ResidualAfter* residual) {
  if (!residual) return make_output(step, shape);
  check_residual_add(residual->step, *residual->x, Value{step, shape, DType::float32, {}});
  Value y = make_output(step, shape);
  y.name = residual->step;
  return y;
}

void Backend::report_folded_residual(const ResidualAfter& residual, const std::string& linear, const Shape& shape,
                                     const Value& sum) {
  fold_time();
  if (!tracing()) return;
  const std::string name = linear.substr(linear.rfind('.') + 1);  // "out_proj" of "layers.0.self_attn.out_proj"
  report(residual.step, "residual_add", {infos({residual.x})[0], {linear, shape, DType::float32, {}, {}}}, sum,
         {"b", "t", "f"},
         {"folded into " + name + "'s store, which added the residual to each product as it wrote it", {}, {}});
}

Value Backend::linear_activation(const std::string& linear_name, const std::string& activation_name,
                                 ActivationStep activation, const Value& x, const Value& weight, const Value* bias) {
  if (activation == ActivationStep::none || !folds_into_store() || wants_values()) {
    return this->activation(activation_name, activation, linear(linear_name, x, weight, bias));
  }
  const std::string step = scoped(linear_name), act = scoped(activation_name);
  const LinearSizes sizes = check_linear(step, x, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;  // named, not bound: clang 14 captures no bindings
  Shape shape = x.shape;
  shape.back() = M;
  Value y = make_output(step, shape);  // the activation's output, which linear allocates and writes
  y.name = act;
  timed(step, [&] {
    run_linear(step, *x.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M, {}, {},
               {activation, nullptr});
  });
  auto dims = [&] {
    return shape.size() == 2 ? std::vector<std::string>{"b", "f"} : std::vector<std::string>{"b", "t", "f"};
  };
  // the product itself is never stored: its step says its shape (no tracer here wants values)
  if (tracing())
    report(step, "linear", infos({&x, &weight, bias}), Value{step, shape, DType::float32, y.storage}, dims());
  fold_time();
  if (tracing()) {
    report(act, op_name(activation), {{step, shape, DType::float32, {}, {}}}, y, dims(),
           {"folded into " + linear_name + "'s store, which applied it to each product as it wrote it", {}, {}});
  }
  return y;
}

Value Backend::split_heads(const std::string& step_name, const Value& x, int64_t heads, int64_t chunks, int64_t chunk) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, chunks == 1 ? "(B, T, E)" : "(B, T, n·E)");
  require(chunks >= 1 && chunk >= 0 && chunk < chunks, step, [&] {
    return "chunk " + std::to_string(chunk) + " of " + std::to_string(chunks) + " does not exist (0 <= chunk < chunks)";
  });
  require(x.dim(2) % chunks == 0, step, [&] {
    return "input " + describe(x) + " has " + std::to_string(x.dim(2)) + " features, which do not split into " +
           std::to_string(chunks) + " equal chunks";
  });
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2) / chunks;
  require(heads >= 1 && E % heads == 0, step, [&] {
    return "input " + describe(x) + " has E=" + std::to_string(E) + " which " + std::to_string(heads) +
           " heads do not divide (E must be a multiple of H)";
  });
  int64_t d = E / heads;
  Value y = make_output(step, {B, heads, T, d});
  timed(step, [&] { run_split_heads(step, *x.storage, *y.storage, B, T, heads, d, chunks, chunk); });
  if (tracing()) report(step, "split_heads", infos({&x}), y, {"b", "h", "t", "c"});
  return y;
}

Value Backend::append_row(const std::string& step_name, const Value& x, const Value* row) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 2, step, [&] { return "input " + describe(x) + " must be (…, T, C)"; });
  int64_t T = x.dim(-2), C = x.dim(-1);
  int64_t N = element_count(x.shape) / (T * C);
  if (row) {
    require_float(step, *row);
    require(element_count(row->shape) == C, step, [&] {
      return "row " + describe(*row) + " must hold " + std::to_string(C) + " values, one per channel of " + describe(x);
    });
  }
  Shape shape = x.shape;
  shape[shape.size() - 2] += 1;
  Value y = make_output(step, shape);
  timed(step, [&] {
    run_append_row(step, *x.storage, row ? row->storage.get() : nullptr, *y.storage, N, T, C);
  });
  if (tracing()) report(step, "append_row", infos({&x, row}), y, row_dims(x));
  return y;
}

Value Backend::attention_scores(const std::string& step_name, const Value& q, const Value& k) {
  const std::string step = scoped(step_name);
  require_rank(step, q, 4, "(B, H, L, d)");
  require_rank(step, k, 4, "(B, H_kv, S, d)");
  require(q.dim(3) == k.dim(3), step,
          [&] { return "query " + describe(q) + " and key " + describe(k) + " must agree on d"; });
  const int64_t group = kv_group(step, q, k, "key");
  int64_t B = q.dim(0), H = q.dim(1), L = q.dim(2), S = k.dim(2), d = q.dim(3);
  Value scores = make_output(step, {B, H, L, S});
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  timed(step, [&] {
    run_attention_scores(step, *q.storage, *k.storage, *scores.storage, B * H, L, S, d, scale, group);
  });
  if (tracing()) report(step, "attention_scores", infos({&q, &k}), scores, {"b", "h", "i", "j"});
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
    require(ok2 || ok3, step, [&] {
      return "attn_mask " + shape_string(attn_mask->shape) + " must be (L, S) = " + shape_string({L, S}) +
             " or (B·H, L, S) = " + shape_string({B * H, L, S}) + " for " + against;
    });
    rank = ok2 ? 2 : 3;
  }
  if (key_padding_mask) {
    require_float(step, *key_padding_mask);
    require(key_padding_mask->shape == Shape{B, S}, step, [&] {
      return "key_padding_mask " + shape_string(key_padding_mask->shape) + " must be (B, S) = " + shape_string({B, S}) +
             " for " + against;
    });
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
  if (tracing())
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
  require(q.dim(3) == k.dim(3) && v.shape == k.shape, step, [&] {
    return "query " + describe(q) + ", key " + describe(k) + " and value " + describe(v) +
           " must agree on d, and key and value on every dim";
  });
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
  if (tracing())
    report(step, "flash_attention", infos({&q, &k, &v, attn_mask, key_padding_mask}), out, {"b", "h", "i", "c"});
  return out;
}

Value Backend::softmax(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 1, step, [&] { return "input " + describe(x) + " must have a last dim to normalise over"; });
  int64_t S = x.dim(-1), R = element_count(x.shape) / S;
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_softmax(step, *x.storage, *y.storage, R, S); });
  if (tracing()) report(step, "softmax", infos({&x}), y, {"b", "h", "i", "j"});
  return y;
}

Value Backend::attention_values(const std::string& step_name, const Value& p, const Value& v) {
  const std::string step = scoped(step_name);
  require_rank(step, p, 4, "(B, H, L, S)");
  require_rank(step, v, 4, "(B, H_kv, S, d)");
  require(p.dim(3) == v.dim(2), step,
          [&] { return "weights " + describe(p) + " and value " + describe(v) + " must agree on S"; });
  const int64_t group = kv_group(step, p, v, "value");
  int64_t B = p.dim(0), H = p.dim(1), L = p.dim(2), S = p.dim(3), d = v.dim(3);
  Value out = make_output(step, {B, H, L, d});
  timed(step, [&] { run_attention_values(step, *p.storage, *v.storage, *out.storage, B * H, L, S, d, group); });
  if (tracing()) report(step, "attention_values", infos({&p, &v}), out, {"b", "h", "i", "c"});
  return out;
}

Value Backend::merge_heads(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 4, "(B, H, T, d)");
  int64_t B = x.dim(0), H = x.dim(1), T = x.dim(2), d = x.dim(3);
  Value y = make_output(step, {B, T, H * d});
  timed(step, [&] { run_merge_heads(step, *x.storage, *y.storage, B, H, T, d); });
  if (tracing()) report(step, "merge_heads", infos({&x}), y, {"b", "i", "f"});
  return y;
}

Value Backend::linear_split_heads(const std::string& linear_name, const std::string& split_name, const Value& x,
                                  const Value& weight, const Value* bias, int64_t heads) {
  if (!folds_layout_steps() || x.rank() != 3) return split_heads(split_name, linear(linear_name, x, weight, bias), heads);
  const std::string step = scoped(linear_name), split = scoped(split_name);
  const LinearSizes sizes = check_linear(step, x, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;  // named, not bound: clang 14 captures no bindings
  const int64_t B = x.dim(0), T = x.dim(1);
  require(heads >= 1 && M % heads == 0, split, [&] {
    return "input " + step + " " + shape_string({B, T, M}) + " has E=" + std::to_string(M) + " which " +
           std::to_string(heads) + " heads do not divide (E must be a multiple of H)";
  });
  const int64_t d = M / heads;
  Value y = make_output(step, {B, heads, T, d});  // the product, stored split: q_proj allocates it
  y.name = split;
  timed(step, [&] {
    run_linear(step, *x.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M, {},
               {heads, T}, {});
  });
  const Value product{step, {B, T, M}, DType::float32, y.storage};  // q_proj's tensor, as it lies in y
  if (tracing())
    report(step, "linear", infos({&x, &weight, bias}), product, {"b", "t", "f"},
           {"", y.shape, [=](Tensor stored) { return merge_read_back(stored, B, heads, T, d); }});
  fold_time();
  if (tracing()) {
    const std::string note = "folded into " + linear_name + "'s store, which wrote (B, T, H, d) at strides " +
                             heads_strides(heads, T, d);
    report(split, "split_heads", {{step, product.shape, product.dtype, {}, y.shape}}, y, {"b", "h", "t", "c"},
           {note, {}, {}});
  }
  return y;
}

Value Backend::merge_heads_linear(const std::string& merge_name, const std::string& linear_name, const Value& heads,
                                  const Value& weight, const Value* bias, const ResidualAfter* residual) {
  if (!folds_layout_steps()) return linear(linear_name, merge_heads(merge_name, heads), weight, bias, residual);
  if (residual && (!folds_into_store() || wants_values())) {
    return add_residual(residual->step, *residual->x, merge_heads_linear(merge_name, linear_name, heads, weight, bias));
  }
  const std::string merge = scoped(merge_name), step = scoped(linear_name);
  require_rank(merge, heads, 4, "(B, H, T, d)");
  const int64_t B = heads.dim(0), H = heads.dim(1), T = heads.dim(2), d = heads.dim(3);
  const Value merged{merge, {B, T, H * d}, DType::float32, heads.storage};  // the heads, read in place
  fold_time();
  if (tracing()) {
    report(merge, "merge_heads", infos({&heads}), merged, {"b", "i", "f"},
           {"folded into " + linear_name + "'s load, which read (B, T, H, d) at strides " + heads_strides(H, T, d),
            heads.shape, [=](Tensor stored) { return merge_read_back(stored, B, H, T, d); }});
  }
  const LinearSizes sizes = check_linear(step, merged, weight, bias);
  const int64_t N = sizes.N, K = sizes.K, M = sizes.M;
  const Shape shape{B, T, M};
  Value y = linear_output(step, shape, residual);
  const StoreFold fold{ActivationStep::none, residual ? residual->x->storage.get() : nullptr};
  timed(step, [&] {
    run_linear(step, *heads.storage, *weight.storage, bias ? bias->storage.get() : nullptr, *y.storage, N, K, M, {H, T},
               {}, fold);
  });
  if (tracing()) {
    std::vector<TensorInfo> inputs = infos({&weight, bias});
    inputs.insert(inputs.begin(), TensorInfo{merged.name, merged.shape, merged.dtype, {}, heads.shape});
    report(step, "linear", std::move(inputs), residual ? Value{step, shape, DType::float32, y.storage} : y,
           {"b", "t", "f"});
  }
  if (residual) report_folded_residual(*residual, step, shape, y);
  return y;
}

Value Backend::average_heads(const std::string& step_name, const Value& p) {
  const std::string step = scoped(step_name);
  require_rank(step, p, 4, "(B, H, L, S)");
  int64_t B = p.dim(0), H = p.dim(1), L = p.dim(2), S = p.dim(3);
  Value avg = make_output(step, {B, L, S});
  timed(step, [&] { run_average_heads(step, *p.storage, *avg.storage, B, H, L * S); });
  if (tracing()) report(step, "average_heads", infos({&p}), avg, {"b", "i", "j"});
  return avg;
}

}  // namespace vkattn
