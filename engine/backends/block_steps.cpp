// Backend's step methods of the blocks around attention: norms, activations, residual adds,
// embeddings and positions (RoPE too), pooling, and steps computed on the host.
#include "vkattn/backends/backend.h"

#include <algorithm>
#include <cmath>

#include "engine/backends/backend_checks.h"
#include "reference/reference.h"
#include "vkattn/errors.h"

namespace vkattn {

using namespace backend_checks;

Value Backend::layer_norm(const std::string& step_name, const Value& x, const Value& weight, const Value& bias,
                          float eps) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 1, step, [&] { return "input " + describe(x) + " must have a feature dim to normalise over"; });
  int64_t E = x.dim(-1), N = element_count(x.shape) / E;
  for (const Value* p : {&weight, &bias}) {
    require_rank(step, *p, 1, "(E,)");
    require(p->dim(0) == E, step, [&] {
      return describe(*p) + " must have " + std::to_string(E) + " elements, one per feature of " + describe(x);
    });
  }
  require(eps > 0.0f && std::isfinite(eps), step,
          [&] { return "eps " + std::to_string(eps) + " must be a positive finite number"; });
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_layer_norm(step, *x.storage, *weight.storage, *bias.storage, *y.storage, N, E, eps); });
  if (tracing()) report(step, "layer_norm", infos({&x, &weight, &bias}), y, {"b", "t", "f"});
  return y;
}

Value Backend::rms_norm(const std::string& step_name, const Value& x, const Value& weight, float eps) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require(x.rank() >= 1, step, [&] { return "input " + describe(x) + " must have a feature dim to normalise over"; });
  int64_t E = x.dim(-1), N = element_count(x.shape) / E;
  require_rank(step, weight, 1, "(E,)");
  require(weight.dim(0) == E, step, [&] {
    return describe(weight) + " must have " + std::to_string(E) + " elements, one per feature of " + describe(x);
  });
  require(eps > 0.0f && std::isfinite(eps), step,
          [&] { return "eps " + std::to_string(eps) + " must be a positive finite number"; });
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_rms_norm(step, *x.storage, *weight.storage, *y.storage, N, E, eps); });
  if (tracing()) {  // a sequence's features, or each head's (Qwen3's q_norm and k_norm)
    report(step, "rms_norm", infos({&x, &weight}), y,
           x.rank() == 4 ? std::vector<std::string>{"b", "h", "t", "c"} : std::vector<std::string>{"b", "t", "f"});
  }
  return y;
}

Value Backend::gelu(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_gelu(step, *x.storage, *y.storage, element_count(x.shape)); });
  if (tracing()) report(step, "gelu", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::gelu_tanh(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_gelu_tanh(step, *x.storage, *y.storage, element_count(x.shape)); });
  if (tracing()) report(step, "gelu_tanh", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::relu(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_relu(step, *x.storage, *y.storage, element_count(x.shape)); });
  if (tracing()) report(step, "relu", infos({&x}), y, {"b", "t", "f"});
  return y;
}

const char* op_name(ActivationStep activation) {
  switch (activation) {
    case ActivationStep::none: return "none";
    case ActivationStep::relu: return "relu";
    case ActivationStep::gelu: return "gelu";
    case ActivationStep::gelu_tanh: return "gelu_tanh";
    case ActivationStep::silu: return "silu";
    case ActivationStep::tanh: return "tanh";
  }
  return "none";
}

Value Backend::activation(const std::string& step, ActivationStep activation, const Value& x) {
  switch (activation) {
    case ActivationStep::none: return x;
    case ActivationStep::relu: return relu(step, x);
    case ActivationStep::gelu: return gelu(step, x);
    case ActivationStep::gelu_tanh: return gelu_tanh(step, x);
    case ActivationStep::silu: return silu(step, x);
    case ActivationStep::tanh: return tanh(step, x);
  }
  return x;
}

void Backend::check_residual_add(const std::string& step, const Value& x, const Value& residual) {
  require_float(step, x);
  require_float(step, residual);
  require(x.shape == residual.shape, step,
          [&] { return describe(x) + " and " + describe(residual) + " must have the same shape"; });
}

Value Backend::residual_add(const std::string& step_name, const Value& x, const Value& residual) {
  return add_residual(scoped(step_name), x, residual);
}

Value Backend::add_residual(const std::string& step, const Value& x, const Value& residual) {
  check_residual_add(step, x, residual);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_residual_add(step, *x.storage, *residual.storage, *y.storage, element_count(x.shape)); });
  if (tracing()) report(step, "residual_add", infos({&x, &residual}), y, {"b", "t", "f"});
  return y;
}

Value Backend::silu(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_silu(step, *x.storage, *y.storage, element_count(x.shape)); });
  if (tracing()) report(step, "silu", infos({&x}), y, {"b", "t", "f"});
  return y;
}

Value Backend::tanh(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_tanh(step, *x.storage, *y.storage, element_count(x.shape)); });
  if (tracing())
    report(step, "tanh", infos({&x}), y,
           x.rank() == 2 ? std::vector<std::string>{"b", "f"} : std::vector<std::string>{"b", "t", "f"});
  return y;
}

Value Backend::multiply(const std::string& step_name, const Value& x, const Value& other) {
  const std::string step = scoped(step_name);
  require_float(step, x);
  require_float(step, other);
  require(x.shape == other.shape, step,
          [&] { return describe(x) + " and " + describe(other) + " must have the same shape"; });
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_multiply(step, *x.storage, *other.storage, *y.storage, element_count(x.shape)); });
  if (tracing()) report(step, "multiply", infos({&x, &other}), y, {"b", "t", "f"});
  return y;
}

Value Backend::embedding(const std::string& step_name, const Value& ids, const Value& table, float scale) {
  const std::string step = scoped(step_name);
  require(ids.dtype == DType::int64, step,
          [&] { return "token ids " + describe(ids) + " are " + dtype_name(ids.dtype) + " but must be int64"; });
  require(ids.rank() == 2, step, [&] {
    return "token ids " + describe(ids) + " have rank " + std::to_string(ids.rank()) + " but must be (B, T)";
  });
  require_rank(step, table, 2, "(vocab_size, E)", /*sixteen_bit=*/true);
  int64_t B = ids.dim(0), T = ids.dim(1), V = table.dim(0), E = table.dim(1);
  require(std::isfinite(scale), step, [&] { return "scale " + std::to_string(scale) + " must be a finite number"; });
  Value y = make_output(step, {B, T, E});
  timed(step, [&] { run_embedding(step, *ids.storage, *table.storage, *y.storage, B * T, V, E, scale); });
  if (tracing()) report(step, "embedding", infos({&ids, &table}), y, {"b", "t", "f"});
  return y;
}

Value Backend::positional_encoding(const std::string& step_name, const Value& x, const Value& table) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  require_rank(step, table, 2, "(max_positions, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  require(table.dim(1) == E, step, [&] {
    return "table " + describe(table) + " has " + std::to_string(table.dim(1)) + " features but input " + describe(x) +
           " has " + std::to_string(E);
  });
  require(table.dim(0) >= T, step, [&] {
    return "table " + describe(table) + " has " + std::to_string(table.dim(0)) + " positions, fewer than the " +
           std::to_string(T) + " of input " + describe(x);
  });
  Value y = make_output(step, x.shape);
  timed(step, [&] { run_positional_encoding(step, *x.storage, *table.storage, *y.storage, B, T, E); });
  if (tracing()) report(step, "positional_encoding", infos({&x, &table}), y, {"b", "t", "f"});
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
  require(r > 0 && r <= d && r % 2 == 0, step, [&] {
    return "rotary_dims " + std::to_string(r) + " must be even and within the head dim d = " + std::to_string(d) +
           " of " + describe(x) + (r % 2 ? ": RoPE rotates features in pairs" : "");
  });
  require(offset >= 0, step, [&] { return "position offset " + std::to_string(offset) + " must be >= 0"; });
  require(std::isfinite(theta) && theta > 1.0f, step,
          [&] { return "theta " + std::to_string(theta) + " must be a number > 1"; });
  require(scaling.type == RopeScaling::Type::none ||
              (std::isfinite(scaling.factor) && scaling.factor >= 1.0f &&
               (scaling.type != RopeScaling::Type::llama3 ||
                (scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor &&
                 scaling.original_max_positions > 0))),
          step, [&] {
            return "rope scaling: factor " + std::to_string(scaling.factor) + " must be >= 1, and llama3's " +
                   "0 < low_freq_factor < high_freq_factor, original_max_positions > 0";
          });
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
  if (tracing()) report(step, "rotary_embedding", infos({&x, &inv_freq}), y, {"b", "h", "t", "c"});
  return y;
}

Value Backend::mean_pool(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  Value y = make_output(step, {B, E});
  timed(step, [&] { run_mean_pool(step, *x.storage, *y.storage, B, T, E); });
  if (tracing()) report(step, "mean_pool", infos({&x}), y, {"b", "f"});
  return y;
}

Value Backend::first_token(const std::string& step_name, const Value& x) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  Value y = make_output(step, {B, E});
  timed(step, [&] { run_first_token(step, *x.storage, *y.storage, B, T, E); });
  if (tracing()) report(step, "first_token", infos({&x}), y, {"b", "f"});
  return y;
}

Value Backend::last_tokens(const std::string& step_name, const Value& x, int64_t n) {
  const std::string step = scoped(step_name);
  require_rank(step, x, 3, "(B, T, E)");
  int64_t B = x.dim(0), T = x.dim(1), E = x.dim(2);
  require(n >= 1 && n <= T, step, [&] {
    return "keeps the last n = " + std::to_string(n) + " positions of " + describe(x) +
           ": n must be 1 … T = " + std::to_string(T);
  });
  Value y = make_output(step, {B, n, E});
  timed(step, [&] { run_last_tokens(step, *x.storage, *y.storage, B, T, n, E); });
  if (tracing()) report(step, "last_tokens", infos({&x}), y, {"b", "t", "f"});
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
  require(element_count(result.shape) == result.size() && result.size() > 0, step, [&] {
    return "the host step made " + std::to_string(result.size()) + " values for shape " + shape_string(result.shape);
  });
  Value y{step, result.shape, result.dtype, store(step, result, Narrow::none)};
  if (tracing()) {
    std::vector<TensorInfo> in;
    for (const Value* v : inputs) in.push_back({v->name, v->shape, v->dtype});
    report(step, op.c_str(), std::move(in), y, std::move(dims));
  }
  return y;
}

}  // namespace vkattn
