#pragma once
// ReferenceBackend: every step by the plain loops of reference/, on the host. The ground truth.
#include "vkattn/backends/backend.h"

namespace vkattn {

class ReferenceBackend final : public Backend {
 public:
  // fold_layout_steps: split_heads and merge_heads folded into their projections as a GPU folds
  // them (Backend::linear_split_heads), the same numbers; off by default: the ground truth runs
  // every step as written. (A trace compared with a folding GPU's lists the same steps either way.)
  explicit ReferenceBackend(bool fold_layout_steps = false) : fold_layout_steps_(fold_layout_steps) {}
  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return "reference (C++ loops)"; }
  bool folds_layout_steps() const override { return fold_layout_steps_; }
  void fold_layout_steps(bool fold) override { fold_layout_steps_ = fold; }

 protected:
  std::shared_ptr<Storage> allocate(const std::string& name, int64_t count) override;
  std::shared_ptr<Storage> store(const std::string& name, const Tensor& tensor, Narrow as) override;
  std::vector<float> load(const Storage& storage, int64_t count) override;

  void run_linear(const std::string&, const Storage& x, const Storage& w, const Storage* b, Storage& y, int64_t N,
                  int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout, StoreFold fold) override;
  void run_split_heads(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t H,
                       int64_t d, int64_t chunks, int64_t chunk) override;
  void run_append_row(const std::string&, const Storage& x, const Storage* row, Storage& y, int64_t N,
                      int64_t T, int64_t C) override;
  void run_attention_scores(const std::string&, const Storage& q, const Storage& k, Storage& scores,
                            int64_t BH, int64_t L, int64_t S, int64_t d, float scale, int64_t group) override;
  void run_attention_mask(const std::string&, const Storage& scores, const Storage* attn_mask,
                          int attn_mask_rank, const Storage* key_padding_mask, bool causal, int64_t window,
                          Storage& out, int64_t B, int64_t H, int64_t L, int64_t S) override;
  void run_flash_attention(const std::string&, const Storage& q, const Storage& k, const Storage& v, const Storage* attn_mask,
                           int attn_mask_rank, const Storage* key_padding_mask, bool causal, int64_t window,
                           Storage& out, int64_t B, int64_t H, int64_t L, int64_t S, int64_t d, float scale,
                           int64_t group) override;
  void run_softmax(const std::string&, const Storage& x, Storage& y, int64_t R, int64_t S) override;
  void run_attention_values(const std::string&, const Storage& p, const Storage& v, Storage& out,
                            int64_t BH, int64_t L, int64_t S, int64_t d, int64_t group) override;
  void run_merge_heads(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t H, int64_t T,
                       int64_t d) override;
  void run_average_heads(const std::string&, const Storage& p, Storage& avg, int64_t B, int64_t H,
                         int64_t plane) override;
  void run_kv_cache_append(const std::string&, Storage& cache, const Storage& rows, int64_t N, int64_t C, int64_t T,
                           int64_t d, int64_t position, Narrow format) override;
  // The caches hold float32 numbers already rounded to their format (kv_cache_append): read as they are
  void run_flash_decoding(const std::string&, const Storage& q, const Storage& k, const Storage& v,
                          const Storage* key_padding_mask, bool causal, int64_t window, Storage& partials, int64_t B,
                          int64_t H, int64_t L, int64_t C, int64_t S, int64_t d, int64_t parts, uint32_t, float scale,
                          int64_t group, Narrow, Storage* combined) override;
  void run_attention_combine(const std::string&, const Storage& partials, Storage& out, int64_t R, int64_t parts,
                             int64_t d) override;
  void run_layer_norm(const std::string&, const Storage& x, const Storage& weight, const Storage& bias, Storage& y,
                      int64_t N, int64_t E, float eps) override;
  void run_gelu(const std::string&, const Storage& x, Storage& y, int64_t n) override;
  void run_gelu_tanh(const std::string&, const Storage& x, Storage& y, int64_t n) override;
  void run_relu(const std::string&, const Storage& x, Storage& y, int64_t n) override;
  void run_residual_add(const std::string&, const Storage& x, const Storage& residual, Storage& y, int64_t n) override;
  void run_rms_norm(const std::string&, const Storage& x, const Storage& weight, Storage& y, int64_t N, int64_t E,
                    float eps) override;
  void run_silu(const std::string&, const Storage& x, Storage& y, int64_t n) override;
  void run_tanh(const std::string&, const Storage& x, Storage& y, int64_t n) override;
  void run_multiply(const std::string&, const Storage& x, const Storage& other, Storage& y, int64_t n) override;
  void run_embedding(const std::string&, const Storage& ids, const Storage& table, Storage& y, int64_t N, int64_t V,
                     int64_t E, float scale) override;
  void run_positional_encoding(const std::string&, const Storage& x, const Storage& table, Storage& y, int64_t B,
                               int64_t T, int64_t E) override;
  void run_mean_pool(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t E) override;
  void run_first_token(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t E) override;
  void run_last_tokens(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t n,
                       int64_t E) override;
  // the reference computes its own angles from inv_freq (cos_sin unread)
  void run_rotary_embedding(const std::string&, const Storage& x, const Storage& inv_freq, const Storage& cos_sin,
                            Storage& y, int64_t N, int64_t T, int64_t d, int64_t offset, int64_t rotary_dims,
                            bool pairs) override;

 private:
  bool fold_layout_steps_;
};

}  // namespace vkattn
