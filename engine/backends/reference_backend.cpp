#include "vkattn/backends/reference_backend.h"

#include <stdexcept>

#include "reference/reference.h"

namespace vkattn {
namespace {

struct HostStorage final : Storage {
  std::vector<float> data;
};

const float* in(const Storage& s) { return static_cast<const HostStorage&>(s).data.data(); }
const float* in(const Storage* s) { return s ? in(*s) : nullptr; }
float* out(Storage& s) { return static_cast<HostStorage&>(s).data.data(); }

}  // namespace

std::shared_ptr<Storage> ReferenceBackend::allocate(const std::string&, int64_t count) {
  auto storage = std::make_shared<HostStorage>();
  storage->data.resize(static_cast<size_t>(count));
  return storage;
}

// keeps_16bit() is false: `as` is always none here
std::shared_ptr<Storage> ReferenceBackend::store(const std::string&, const Tensor& tensor, Narrow) {
  auto storage = std::make_shared<HostStorage>();
  storage->data = tensor.data;
  return storage;
}

std::vector<float> ReferenceBackend::load(const Storage& storage, int64_t) {
  return static_cast<const HostStorage&>(storage).data;
}

namespace {

// A folded activation (never asked of this backend, which folds none: for any that calls the hook
// so), applied in place to the n products
void activate(ActivationStep activation, float* y, int64_t n) {
  switch (activation) {
    case ActivationStep::none: return;
    case ActivationStep::relu: return reference::relu(y, y, n);
    case ActivationStep::gelu: return reference::gelu(y, y, n);
    case ActivationStep::gelu_tanh: return reference::gelu_tanh(y, y, n);
    case ActivationStep::silu: return reference::silu(y, y, n);
    case ActivationStep::tanh: return reference::tanh(y, y, n);
  }
}

}  // namespace

void ReferenceBackend::run_linear(const std::string&, const Storage& x, const Storage& w, const Storage* b, Storage& y,
                                  int64_t N, int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout,
                                  StoreFold fold) {
  // A folded layout step (fold_layout_steps): the copies around the product do its work.
  std::vector<float> x_rows, y_rows;
  const float* rows = in(x);
  if (x_layout.heads > 0) {  // x (B, H, T, d) -> (B·T, H·d)
    x_rows.resize(static_cast<size_t>(N * K));
    reference::merge_heads(rows, x_rows.data(), N / x_layout.tokens, x_layout.heads, x_layout.tokens,
                           K / x_layout.heads);
    rows = x_rows.data();
  }
  if (y_layout.heads == 0) {
    reference::linear(rows, in(w), in(b), out(y), N, K, M);
    activate(fold.activation, out(y), N * M);
    if (fold.residual) reference::residual_add(out(y), in(fold.residual), out(y), N * M);
    return;
  }
  if (fold.residual) throw std::logic_error("linear: a residual folded into a store of heads");
  y_rows.resize(static_cast<size_t>(N * M));  // (B·T, H·d) -> y (B, H, T, d)
  reference::linear(rows, in(w), in(b), y_rows.data(), N, K, M);
  reference::split_heads(y_rows.data(), out(y), N / y_layout.tokens, y_layout.tokens, y_layout.heads,
                         M / y_layout.heads);
  activate(fold.activation, out(y), N * M);
}

void ReferenceBackend::run_split_heads(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T,
                                       int64_t H, int64_t d, int64_t chunks, int64_t chunk) {
  reference::split_heads(in(x), out(y), B, T, H, d, chunks, chunk);
}

void ReferenceBackend::run_append_row(const std::string&, const Storage& x, const Storage* row, Storage& y,
                                      int64_t N, int64_t T, int64_t C) {
  reference::append_row(in(x), in(row), out(y), N, T, C);
}

void ReferenceBackend::run_attention_scores(const std::string&, const Storage& q, const Storage& k,
                                            Storage& scores, int64_t BH, int64_t L, int64_t S, int64_t d,
                                            float scale, int64_t group) {
  reference::attention_scores(in(q), in(k), out(scores), BH, L, S, d, scale, group);
}

void ReferenceBackend::run_attention_mask(const std::string&, const Storage& scores, const Storage* attn_mask,
                                          int attn_mask_rank, const Storage* key_padding_mask, bool causal,
                                          int64_t window, Storage& o, int64_t B, int64_t H, int64_t L, int64_t S) {
  reference::attention_mask(in(scores), in(attn_mask), attn_mask_rank, in(key_padding_mask), causal, window, out(o),
                            B, H, L, S);
}

void ReferenceBackend::run_softmax(const std::string&, const Storage& x, Storage& y, int64_t R, int64_t S) {
  reference::softmax(in(x), out(y), R, S);
}

void ReferenceBackend::run_flash_attention(const std::string&, const Storage& q, const Storage& k, const Storage& v,
                                           const Storage* attn_mask, int attn_mask_rank,
                                           const Storage* key_padding_mask, bool causal, int64_t window, Storage& o,
                                           int64_t B, int64_t H, int64_t L, int64_t S, int64_t d, float scale,
                                           int64_t group) {
  reference::flash_attention(in(q), in(k), in(v), in(attn_mask), attn_mask_rank, in(key_padding_mask), causal, window,
                             out(o), B, H, L, S, d, scale, group);
}

void ReferenceBackend::run_attention_values(const std::string&, const Storage& p, const Storage& v, Storage& o,
                                            int64_t BH, int64_t L, int64_t S, int64_t d, int64_t group) {
  reference::attention_values(in(p), in(v), out(o), BH, L, S, d, group);
}

void ReferenceBackend::run_merge_heads(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t H,
                                       int64_t T, int64_t d) {
  reference::merge_heads(in(x), out(y), B, H, T, d);
}

void ReferenceBackend::run_average_heads(const std::string&, const Storage& p, Storage& avg, int64_t B,
                                         int64_t H, int64_t plane) {
  reference::average_heads(in(p), out(avg), B, H, plane);
}

void ReferenceBackend::run_kv_cache_append(const std::string&, Storage& cache, const Storage& rows, int64_t N,
                                           int64_t C, int64_t T, int64_t d, int64_t position, Narrow format) {
  reference::kv_cache_append(out(cache), in(rows), N, C, T, d, position, static_cast<int>(format));
}

void ReferenceBackend::run_flash_decoding(const std::string&, const Storage& q, const Storage& k, const Storage& v,
                                          const Storage* key_padding_mask, bool causal, int64_t window,
                                          Storage& partials, int64_t B, int64_t H, int64_t L, int64_t C, int64_t S,
                                          int64_t d, int64_t parts, uint32_t, float scale, int64_t group, Narrow,
                                          Storage* combined) {
  reference::flash_decoding(in(q), in(k), in(v), in(key_padding_mask), causal, window, out(partials), B, H, L, C, S, d,
                            parts, scale, group);
  if (combined) reference::attention_combine(in(partials), out(*combined), B * H * L, parts, d);
}

void ReferenceBackend::run_attention_combine(const std::string&, const Storage& partials, Storage& o, int64_t R,
                                             int64_t parts, int64_t d) {
  reference::attention_combine(in(partials), out(o), R, parts, d);
}

void ReferenceBackend::run_layer_norm(const std::string&, const Storage& x, const Storage& weight, const Storage& bias,
                                      Storage& y, int64_t N, int64_t E, float eps) {
  reference::layer_norm(in(x), in(weight), in(bias), out(y), N, E, eps);
}

void ReferenceBackend::run_gelu(const std::string&, const Storage& x, Storage& y, int64_t n) {
  reference::gelu(in(x), out(y), n);
}

void ReferenceBackend::run_gelu_tanh(const std::string&, const Storage& x, Storage& y, int64_t n) {
  reference::gelu_tanh(in(x), out(y), n);
}

void ReferenceBackend::run_relu(const std::string&, const Storage& x, Storage& y, int64_t n) {
  reference::relu(in(x), out(y), n);
}

void ReferenceBackend::run_rms_norm(const std::string&, const Storage& x, const Storage& weight, Storage& y, int64_t N,
                                    int64_t E, float eps) {
  reference::rms_norm(in(x), in(weight), out(y), N, E, eps);
}

void ReferenceBackend::run_silu(const std::string&, const Storage& x, Storage& y, int64_t n) {
  reference::silu(in(x), out(y), n);
}

void ReferenceBackend::run_tanh(const std::string&, const Storage& x, Storage& y, int64_t n) {
  reference::tanh(in(x), out(y), n);
}

void ReferenceBackend::run_multiply(const std::string&, const Storage& x, const Storage& other, Storage& y, int64_t n) {
  reference::multiply(in(x), in(other), out(y), n);
}

void ReferenceBackend::run_residual_add(const std::string&, const Storage& x, const Storage& residual, Storage& y,
                                        int64_t n) {
  reference::residual_add(in(x), in(residual), out(y), n);
}

void ReferenceBackend::run_embedding(const std::string&, const Storage& ids, const Storage& table, Storage& y,
                                     int64_t N, int64_t V, int64_t E, float scale) {
  reference::embedding(in(ids), in(table), out(y), N, V, E, scale);
}

void ReferenceBackend::run_positional_encoding(const std::string&, const Storage& x, const Storage& table, Storage& y,
                                               int64_t B, int64_t T, int64_t E) {
  reference::positional_encoding(in(x), in(table), out(y), B, T, E);
}

void ReferenceBackend::run_rotary_embedding(const std::string&, const Storage& x, const Storage& inv_freq,
                                            const Storage& /*cos_sin*/, Storage& y, int64_t N, int64_t T, int64_t d,
                                            int64_t offset, int64_t rotary_dims, bool pairs) {
  reference::rotary_embedding(in(x), in(inv_freq), out(y), N, T, d, offset, rotary_dims, pairs);
}

void ReferenceBackend::run_mean_pool(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T,
                                     int64_t E) {
  reference::mean_pool(in(x), out(y), B, T, E);
}

void ReferenceBackend::run_first_token(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T,
                                       int64_t E) {
  reference::first_token(in(x), out(y), B, T, E);
}

void ReferenceBackend::run_last_tokens(const std::string&, const Storage& x, Storage& y, int64_t B, int64_t T,
                                       int64_t n, int64_t E) {
  reference::last_tokens(in(x), out(y), B, T, n, E);
}

}  // namespace vkattn
