#pragma once
// SizingBackend: a Backend that computes nothing and allocates nothing. It records the name and
// size of every tensor a recipe uploads or makes, so that Backend::preflight() can check a pass
// against a device's limits before the real backend allocates anything. Shapes are checked as on
// any backend, so a bad input fails here with the same message.
//
// It also counts the device memory the pass would take from a pool like VulkanBackend's: a
// tensor of `reuse_from_bytes` or more takes the buffer of a tensor the pass has finished with
// when one of exactly its size is free; a smaller one always gets a new buffer (the real backend
// reuses some of those too, when no recorded command still reads them: this is a bound from
// above).
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "vkattn/backends/backend.h"

namespace vkattn {

class SizingBackend final : public Backend {
 public:
  struct SizedTensor {
    std::string name;  // the step's, or the uploaded tensor's
    int64_t count;     // 32-bit words: float32 elements, or pairs of 16-bit ones
  };

  // reuse_from_bytes: the smallest tensor that may take a finished tensor's buffer; by default
  // none does, and pass_bytes() is the sum of every tensor. gemm_scratch_floats: a GEMM step's
  // own buffers, as MemoryLimits says (none where unset). keeps_16bit: the real backend's;
  // folds_into_store: whether the real pass will (Backend::linear_activation and linear's
  // residual: no product tensor).
  explicit SizingBackend(uint64_t reuse_from_bytes = std::numeric_limits<uint64_t>::max(),
                         decltype(MemoryLimits::gemm_scratch_floats) gemm_scratch_floats = {}, bool keeps_16bit = false,
                         bool folds_into_store = false);
  bool keeps_16bit() const override { return keeps_16bit_; }
  bool folds_into_store() const override { return folds_into_store_; }

  std::string name() const override { return "sizing"; }
  std::string device_name() const override { return "none (sizes only)"; }
  const std::vector<SizedTensor>& tensors() const { return tensors_; }
  // The bytes of every buffer the pass allocates, reused ones once.
  uint64_t pass_bytes() const { return pool_->allocated; }

 protected:
  std::shared_ptr<Storage> allocate(const std::string& name, int64_t count) override;
  std::shared_ptr<Storage> store(const std::string& name, const Tensor& tensor, Narrow as) override;
  Value input(const Value& resident) override {
    return Value{resident.name, resident.shape, resident.dtype, allocate(resident.name, element_count(resident.shape))};
  }
  std::vector<float> load(const Storage& storage, int64_t count) override;

  void run_linear(const std::string& step, const Storage&, const Storage& w, const Storage*, Storage&, int64_t N,
                  int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout, StoreFold) override {
    scratch(step, "linear", 1, 1, N, M, K, x_layout.heads, format_of(w));
  }
  void run_split_heads(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t) override {}
  void run_append_row(const std::string&, const Storage&, const Storage*, Storage&, int64_t, int64_t,
                      int64_t) override {}
  void run_attention_scores(const std::string& step, const Storage&, const Storage&, Storage&, int64_t BH, int64_t L,
                            int64_t S, int64_t d, float, int64_t group) override {
    scratch(step, "attention_scores", BH, group, L, S, d, 0, Narrow::none);
  }
  void run_attention_mask(const std::string&, const Storage&, const Storage*, int, const Storage*, bool, int64_t,
                          Storage&, int64_t, int64_t, int64_t, int64_t) override {}
  void run_softmax(const std::string&, const Storage&, Storage&, int64_t, int64_t) override {}
  void run_flash_attention(const std::string&, const Storage&, const Storage&, const Storage&, const Storage*, int,
                           const Storage*, bool, int64_t, Storage&, int64_t, int64_t, int64_t, int64_t, int64_t,
                           float, int64_t) override {}
  void run_attention_values(const std::string&, const Storage&, const Storage&, Storage&, int64_t, int64_t, int64_t,
                            int64_t, int64_t) override {}
  void run_merge_heads(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t, int64_t) override {}
  void run_average_heads(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t) override {}
  void run_kv_cache_append(const std::string&, Storage&, const Storage&, int64_t, int64_t, int64_t, int64_t, int64_t,
                           Narrow) override {}
  void run_flash_decoding(const std::string&, const Storage&, const Storage&, const Storage&, const Storage*, bool,
                          int64_t, Storage&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t,
                          float, int64_t, Narrow, Storage*) override {}
  void run_attention_combine(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t) override {}
  void run_layer_norm(const std::string&, const Storage&, const Storage&, const Storage&, Storage&, int64_t, int64_t,
                      float) override {}
  void run_gelu(const std::string&, const Storage&, Storage&, int64_t) override {}
  void run_gelu_tanh(const std::string&, const Storage&, Storage&, int64_t) override {}
  void run_relu(const std::string&, const Storage&, Storage&, int64_t) override {}
  void run_residual_add(const std::string&, const Storage&, const Storage&, Storage&, int64_t) override {}
  void run_rms_norm(const std::string&, const Storage&, const Storage&, Storage&, int64_t, int64_t, float) override {}
  void run_silu(const std::string&, const Storage&, Storage&, int64_t) override {}
  void run_tanh(const std::string&, const Storage&, Storage&, int64_t) override {}
  void run_multiply(const std::string&, const Storage&, const Storage&, Storage&, int64_t) override {}
  void run_embedding(const std::string&, const Storage&, const Storage&, Storage&, int64_t, int64_t, int64_t,
                     float) override {}
  void run_positional_encoding(const std::string&, const Storage&, const Storage&, Storage&, int64_t, int64_t,
                               int64_t) override {}
  void run_mean_pool(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t) override {}
  void run_first_token(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t) override {}
  void run_last_tokens(const std::string&, const Storage&, Storage&, int64_t, int64_t, int64_t, int64_t) override {}
  void run_rotary_embedding(const std::string&, const Storage&, const Storage&, const Storage&, Storage&, int64_t,
                            int64_t, int64_t, int64_t, int64_t, bool) override {}

 private:
  // Buffers by exact size, as vulkan::BufferPool keeps them; shared with every storage, which
  // gives its buffer back when its last value is gone.
  struct Pool {
    uint64_t reuse_from_bytes;
    std::map<uint64_t, int> free;  // bytes -> free buffers of that size
    uint64_t allocated = 0;
    void acquire(uint64_t bytes);
    void release(uint64_t bytes);
  };
  // A GEMM step's own buffer, taken and given back, as the real backend's (gemm_scratch_floats_)
  void scratch(const std::string& step, const std::string& product, int64_t batch, int64_t group, int64_t M, int64_t N,
               int64_t K, int64_t a_heads, Narrow b_format);
  static Narrow format_of(const Storage& storage);  // as store() stored it
  std::vector<SizedTensor> tensors_;
  std::shared_ptr<Pool> pool_;
  decltype(MemoryLimits::gemm_scratch_floats) gemm_scratch_floats_;
  bool keeps_16bit_;
  bool folds_into_store_;
};

}  // namespace vkattn
