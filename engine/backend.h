#pragma once
// Backend: the steps of attention, each one method, implemented by ReferenceBackend (plain C++
// loops) and VulkanBackend (one compute shader dispatch each). The recipe (MultiHeadAttention)
// is written once against this interface.
//
// Each public step method checks its inputs' shapes and dtypes (the same ShapeError, whatever
// the backend), makes the output, runs the backend's run_<op>, and reports the step to every
// attached Tracer. `step` is the step's name (q_proj, split_heads_k, …) and the method is its
// op (linear, split_heads, …): errors, traces and debug labels carry both.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "engine/tracer.h"

namespace vkattn {

// Where a Value's numbers live; each backend derives its own.
class Storage {
 public:
  virtual ~Storage() = default;
};

// A tensor that lives on a backend. Cheap to copy: copies share the storage.
struct Value {
  std::string name;  // the input's name, or the step that produced it
  Shape shape;
  DType dtype = DType::float32;
  std::shared_ptr<Storage> storage;

  int64_t dim(int64_t i) const { return shape.at(static_cast<size_t>(i < 0 ? static_cast<int64_t>(shape.size()) + i : i)); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;         // "cpu" or "gpu"
  virtual std::string device_name() const = 0;  // "reference (C++)", "llvmpipe (LLVM 15…)"

  // Host -> backend. Does not wait for anything.
  Value upload(const std::string& name, const Tensor& tensor);
  // Backend -> host. On the GPU this submits everything recorded so far and waits for it.
  Tensor download(const Value& value);

  // y = x · Wᵀ + b               x (…, K), weight (M, K), bias (M) or null -> (…, M)
  Value linear(const std::string& step, const Value& x, const Value& weight, const Value* bias);
  // (B, T, E) -> (B, H, T, E/H)
  Value split_heads(const std::string& step, const Value& x, int64_t heads);
  // (…, T, C) + row (C) -> (…, T+1, C); null row appends zeros
  Value append_row(const std::string& step, const Value& x, const Value* row);
  // Q (B, H, L, d) · K (B, H, S, d)ᵀ / √d -> (B, H, L, S)
  Value attention_scores(const std::string& step, const Value& q, const Value& k);
  // scores (B, H, L, S) + attn_mask (L, S) | (B·H, L, S) + key_padding_mask (B, S), causal
  // -inf above the diagonal. Masks are additive float (a bool mask becomes 0 / -inf first).
  Value attention_mask(const std::string& step, const Value& scores, const Value* attn_mask,
                       const Value* key_padding_mask, bool causal);
  // row-wise over the last dim; a fully masked row gives zeros
  Value softmax(const std::string& step, const Value& x);
  // P (B, H, L, S) · V (B, H, S, d) -> (B, H, L, d)
  Value attention_values(const std::string& step, const Value& p, const Value& v);
  // (B, H, T, d) -> (B, T, H·d)
  Value merge_heads(const std::string& step, const Value& x);
  // (B, H, L, S) -> (B, L, S), mean over H
  Value average_heads(const std::string& step, const Value& p);

  // Tracing. Tracers are not owned and must outlive their attachment.
  void add_tracer(Tracer& tracer);
  void remove_tracer(Tracer& tracer);
  // Starts a new pass: step indices restart at 0 and tracers hear `pass`'s name.
  void begin_pass(const std::string& pass);

 protected:
  // Storage for `count` float32 elements (contents undefined until a step writes them).
  virtual std::shared_ptr<Storage> allocate(int64_t count) = 0;
  virtual std::shared_ptr<Storage> store(const Tensor& tensor) = 0;
  virtual std::vector<float> load(const Storage& storage, int64_t count) = 0;
  // Whether a step's host wall time is its real duration (true on the CPU; on the GPU the host
  // only records the dispatch).
  virtual bool host_time_is_step_time() const = 0;

  // The run_<op> hooks: shapes are checked, output allocated; arguments mirror reference.h.
  virtual void run_linear(const std::string& step, const Storage& x, const Storage& w, const Storage* b,
                          Storage& y, int64_t N, int64_t K, int64_t M) = 0;
  virtual void run_split_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                               int64_t H, int64_t d) = 0;
  virtual void run_append_row(const std::string& step, const Storage& x, const Storage* row, Storage& y,
                              int64_t N, int64_t T, int64_t C) = 0;
  virtual void run_attention_scores(const std::string& step, const Storage& q, const Storage& k,
                                    Storage& scores, int64_t BH, int64_t L, int64_t S, int64_t d,
                                    float scale) = 0;
  virtual void run_attention_mask(const std::string& step, const Storage& scores, const Storage* attn_mask,
                                  int attn_mask_rank, const Storage* key_padding_mask, bool causal,
                                  Storage& out, int64_t B, int64_t H, int64_t L, int64_t S) = 0;
  virtual void run_softmax(const std::string& step, const Storage& x, Storage& y, int64_t R, int64_t S) = 0;
  virtual void run_attention_values(const std::string& step, const Storage& p, const Storage& v,
                                    Storage& out, int64_t BH, int64_t L, int64_t S, int64_t d) = 0;
  virtual void run_merge_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t H,
                               int64_t T, int64_t d) = 0;
  virtual void run_average_heads(const std::string& step, const Storage& p, Storage& avg, int64_t B,
                                 int64_t H, int64_t plane) = 0;

 private:
  Value make_output(const std::string& step, Shape shape);
  void report(const std::string& step, const char* op, std::vector<TensorInfo> inputs, const Value& output,
              double host_us);

  std::vector<Tracer*> tracers_;
  int next_index_ = 0;
};

}  // namespace vkattn
