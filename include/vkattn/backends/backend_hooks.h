#pragma once
// What a backend's author implements: where a Value's numbers live, and one run_<op> hook a step.
// Backend (backend.h) inherits these out of its callers' sight: its public step methods check
// shapes, make the output, call the hook and report the step; ReferenceBackend, VulkanBackend and
// the sizing backend of a preflight each derive from Backend and override every hook.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/tensor.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {

// Where a Value's numbers live; each backend derives its own.
class Storage {
 public:
  virtual ~Storage() = default;
};

// An element-wise step that linear may apply to its products as it stores them
// (Backend::linear_activation); the numbers are the shaders' ACTIVATION (activations.glsl).
enum class ActivationStep : uint32_t { none = 0, relu = 1, gelu = 2, gelu_tanh = 3, silu = 4, tanh = 5 };
// Its step's op: "relu", "gelu", "gelu_tanh", "silu", "tanh" ("none" for none)
const char* op_name(ActivationStep activation);

// What linear's store does to each product besides storing it, the steps after it folded in
// (Backend::linear_activation, Backend::linear's ResidualAfter): y = activation(product), then
// + residual at the same element. Nothing (the default) but in a fold.
struct StoreFold {
  ActivationStep activation = ActivationStep::none;
  const Storage* residual = nullptr;  // (N, M) as y lies, plain: never with y's heads layout
};

class BackendHooks {
 public:
  virtual ~BackendHooks() = default;

 protected:
  // Storage for `count` float32 elements (contents undefined until a step writes them).
  // `name` is the step's or the uploaded tensor's (scoped), for messages and for sizing.
  virtual std::shared_ptr<Storage> allocate(const std::string& name, int64_t count) = 0;
  // `as`: none (float32), or tensor.narrow where upload_matrix keeps a weight 16-bit: then the
  // storage holds stored_words(count, as) words, two elements to a word, the first in its low half.
  virtual std::shared_ptr<Storage> store(const std::string& name, const Tensor& tensor, Narrow as) = 0;
  virtual std::vector<float> load(const Storage& storage, int64_t count) = 0;
  // Step timing by the device itself: on_begin_pass(timed) says whether tracers listen, and
  // device_step_times() returns one time per step run since, or nothing when the device cannot
  // time them (then the host's times are reported: the real ones on the CPU, the recording
  // ones on a GPU).
  virtual void on_begin_pass(bool timed) { (void)timed; }
  virtual std::optional<std::vector<StepTime>> device_step_times() { return std::nullopt; }
  // The pass failed (end_pass with an error): drop what it recorded and did not run, and give
  // back the memory it took, so that the next pass starts as this one did. Never throws.
  virtual void on_failed_pass() noexcept {}

  // The run_<op> hooks: shapes are checked, output allocated; arguments mirror reference.h
  // (group: query heads per key/value head; window: 0 or the causal window W).
  // rotary_embedding: `cos_sin` (T, r/2, 2) holds cos φ and sin φ of each position and pair,
  // computed on the host from inv_freq as the reference computes them (GPUs' cos and sin are
  // approximate: Vulkan bounds their error only to 2^-11, within [-π, π])
  virtual void run_rotary_embedding(const std::string& step, const Storage& x, const Storage& inv_freq,
                                    const Storage& cos_sin, Storage& y, int64_t N, int64_t T, int64_t d,
                                    int64_t offset, int64_t rotary_dims, bool pairs) = 0;
  // How linear's input or output lies when a layout step is folded into it: with heads H > 0,
  // the (N, C) matrix, N = B·T, C = H·d, is kept as (B, H, T, d), T = tokens.
  struct HeadsLayout {
    int64_t heads = 0;
    int64_t tokens = 0;
  };
  // fold: what the store does to each product besides storing it (nothing but in a fold)
  virtual void run_linear(const std::string& step, const Storage& x, const Storage& w, const Storage* b, Storage& y,
                          int64_t N, int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout,
                          StoreFold fold) = 0;
  virtual void run_split_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                               int64_t H, int64_t d, int64_t chunks, int64_t chunk) = 0;
  virtual void run_append_row(const std::string& step, const Storage& x, const Storage* row, Storage& y,
                              int64_t N, int64_t T, int64_t C) = 0;
  virtual void run_attention_scores(const std::string& step, const Storage& q, const Storage& k,
                                    Storage& scores, int64_t BH, int64_t L, int64_t S, int64_t d,
                                    float scale, int64_t group) = 0;
  virtual void run_attention_mask(const std::string& step, const Storage& scores, const Storage* attn_mask,
                                  int attn_mask_rank, const Storage* key_padding_mask, bool causal, int64_t window,
                                  Storage& out, int64_t B, int64_t H, int64_t L, int64_t S) = 0;
  virtual void run_softmax(const std::string& step, const Storage& x, Storage& y, int64_t R, int64_t S) = 0;
  virtual void run_flash_attention(const std::string& step, const Storage& q, const Storage& k, const Storage& v,
                                   const Storage* attn_mask, int attn_mask_rank, const Storage* key_padding_mask,
                                   bool causal, int64_t window, Storage& out, int64_t B, int64_t H, int64_t L,
                                   int64_t S, int64_t d, float scale, int64_t group) = 0;
  virtual void run_attention_values(const std::string& step, const Storage& p, const Storage& v,
                                    Storage& out, int64_t BH, int64_t L, int64_t S, int64_t d, int64_t group) = 0;
  virtual void run_merge_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t H,
                               int64_t T, int64_t d) = 0;
  virtual void run_average_heads(const std::string& step, const Storage& p, Storage& avg, int64_t B,
                                 int64_t H, int64_t plane) = 0;
  // `format`: the cache's numbers (KVCache's dtype); rows are float32, rounded to it as written
  virtual void run_kv_cache_append(const std::string& step, Storage& cache, const Storage& rows, int64_t N, int64_t C,
                                   int64_t T, int64_t d, int64_t position, Narrow format) = 0;
  // `part_lanes`: the lanes that walk each part together (0: an invocation a part;
  // Backend::decoding_part_lanes). `kv_format`: the caches k and v's numbers (both the same).
  // `combined`: where not null, the parts merged into it too (attention_combine's output,
  // Backend::flash_decoding_combine)
  virtual void run_flash_decoding(const std::string& step, const Storage& q, const Storage& k, const Storage& v,
                                  const Storage* key_padding_mask, bool causal, int64_t window, Storage& partials,
                                  int64_t B, int64_t H, int64_t L, int64_t C, int64_t S, int64_t d, int64_t parts,
                                  uint32_t part_lanes, float scale, int64_t group, Narrow kv_format,
                                  Storage* combined) = 0;
  virtual void run_attention_combine(const std::string& step, const Storage& partials, Storage& out, int64_t R,
                                     int64_t parts, int64_t d) = 0;
  virtual void run_layer_norm(const std::string& step, const Storage& x, const Storage& weight, const Storage& bias,
                              Storage& y, int64_t N, int64_t E, float eps) = 0;
  virtual void run_rms_norm(const std::string& step, const Storage& x, const Storage& weight, Storage& y, int64_t N,
                            int64_t E, float eps) = 0;
  virtual void run_silu(const std::string& step, const Storage& x, Storage& y, int64_t n) = 0;
  virtual void run_tanh(const std::string& step, const Storage& x, Storage& y, int64_t n) = 0;
  virtual void run_multiply(const std::string& step, const Storage& x, const Storage& other, Storage& y, int64_t n) = 0;
  virtual void run_gelu(const std::string& step, const Storage& x, Storage& y, int64_t n) = 0;
  virtual void run_gelu_tanh(const std::string& step, const Storage& x, Storage& y, int64_t n) = 0;
  virtual void run_relu(const std::string& step, const Storage& x, Storage& y, int64_t n) = 0;
  virtual void run_residual_add(const std::string& step, const Storage& x, const Storage& residual, Storage& y,
                                int64_t n) = 0;
  virtual void run_embedding(const std::string& step, const Storage& ids, const Storage& table, Storage& y, int64_t N,
                             int64_t V, int64_t E, float scale) = 0;
  virtual void run_positional_encoding(const std::string& step, const Storage& x, const Storage& table, Storage& y,
                                       int64_t B, int64_t T, int64_t E) = 0;
  virtual void run_mean_pool(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                             int64_t E) = 0;
  virtual void run_first_token(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                               int64_t E) = 0;
  virtual void run_last_tokens(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t n,
                               int64_t E) = 0;
};

}  // namespace vkattn
