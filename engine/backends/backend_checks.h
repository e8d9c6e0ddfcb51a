#pragma once
// Backend's checks and small helpers, shared by its files: backend.cpp (the pass, and what crosses
// to the host) and the step methods by family — backend_steps.cpp (attention's steps),
// decoding_steps.cpp (with a key/value cache) and block_steps.cpp (the blocks around attention).
#include <initializer_list>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "vkattn/backends/backend.h"
#include "vkattn/errors.h"

namespace vkattn::backend_checks {

// "query (2, 5, 60)"
inline std::string describe(const Value& v) { return v.name + " " + shape_string(v.shape); }

// ShapeError "step: message" unless `ok`. `message` returns the message and runs only when the
// check fails: a pass runs every step's checks twice (its preflight's sizing run, then the run
// itself), and the messages built each time, shapes formatted and all, were half of the host's
// time in a decode step.
template <class Message>
inline void require(bool ok, const std::string& step, const Message& message) {
  if (!ok) throw ShapeError(step + ": " + std::string(message()));
}

// A float tensor; one kept 16-bit (Backend::upload_matrix, a KVCache's dtype) only where
// `sixteen_bit` (linear's weight, embedding's table, a key/value cache): the other steps' shaders
// read float32 alone.
inline void require_float(const std::string& step, const Value& v, bool sixteen_bit = false) {
  require(v.dtype == DType::float32, step,
          [&] { return describe(v) + " is " + dtype_name(v.dtype) + " but the step computes in float32"; });
  require(sixteen_bit || v.narrow == Narrow::none, step, [&] {
    return describe(v) + " is kept " + narrow_name(v.narrow) +
           ", which only linear's weight, embedding's table and a key/value cache are read as";
  });
}

inline void require_rank(const std::string& step, const Value& v, int64_t rank, const char* layout,
                         bool sixteen_bit = false) {
  require_float(step, v, sixteen_bit);
  require(v.rank() == rank, step,
          [&] { return describe(v) + " has rank " + std::to_string(v.rank()) + " but must be " + layout; });
}

inline std::vector<TensorInfo> infos(std::initializer_list<const Value*> inputs) {
  std::vector<TensorInfo> out;
  for (const Value* v : inputs)
    if (v) out.push_back({v->name, v->shape, v->dtype});
  return out;
}

// Query heads per key/value head (grouped-query attention): `kv` (B, H_kv, …) must share q's
// batch and have a head count dividing q's H. `what` names kv's role ("key", "value", "key cache").
inline int64_t kv_group(const std::string& step, const Value& q, const Value& kv, const char* what) {
  require(q.dim(0) == kv.dim(0), step,
          [&] { return describe(q) + " and " + what + " " + describe(kv) + " must agree on B"; });
  const int64_t H = q.dim(1), H_kv = kv.dim(1);
  require(H_kv >= 1 && H % H_kv == 0, step, [&] {
    return describe(q) + " has " + std::to_string(H) + " heads, not a multiple of " + what + " " + describe(kv) +
           "'s " + std::to_string(H_kv) + " (each key/value head serves H / H_kv query heads)";
  });
  return H / H_kv;
}

// A sliding window (keys i - W < j <= i) narrows the causal mask: W >= 0, and 0 (none) unless causal.
inline void require_window(const std::string& step, bool causal, int64_t window) {
  require(window >= 0, step, [&] { return "window=" + std::to_string(window) + " must be >= 1 keys, or 0 for none"; });
  require(window == 0 || causal, step, [&] {
    return "window=" + std::to_string(window) + " is a sliding window over past keys and needs causal attention";
  });
}

// "(160, 8, 40, 1)": the strides, in floats, of (B, T, H, d) over memory laid out (B, H, T, d)
inline std::string heads_strides(int64_t H, int64_t T, int64_t d) {
  return "(" + std::to_string(H * T * d) + ", " + std::to_string(d) + ", " + std::to_string(T * d) + ", 1)";
}

// A (B·T, H·d) tensor read back from the (B, H, T, d) it lies in, put in its own order
inline Tensor merge_read_back(const Tensor& stored, int64_t B, int64_t H, int64_t T, int64_t d) {
  Tensor out({B, T, H * d});
  reference::merge_heads(stored.data.data(), out.data.data(), B, H, T, d);
  return out;
}

// The axis names of append_row's output: the key/value sequence before or after split_heads.
inline std::vector<std::string> row_dims(const Value& x) {
  return x.rank() == 4 ? std::vector<std::string>{"b", "h", "t", "c"} : std::vector<std::string>{"b", "t", "f"};
}

}  // namespace vkattn::backend_checks
