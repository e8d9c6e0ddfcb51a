#include "vkattn/modules/language_model.h"

#include "engine/modules/pass.h"
#include "vkattn/errors.h"

namespace vkattn {

Tensor LanguageModel::forward(Backend& backend, const Tensor& ids, const std::optional<Tensor>& key_padding_mask,
                              AttentionPath attention, int64_t logits_to_keep) const {
  const ForwardPass pass = forward_pass("forward", ids, key_padding_mask, attention, logits_to_keep);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return run_pass(backend, pass.name, pass.steps);
}

Value LanguageModel::forward_on_device(Backend& backend, const Tensor& ids,
                                       const std::optional<Tensor>& key_padding_mask, AttentionPath attention,
                                       int64_t logits_to_keep) const {
  const ForwardPass pass = forward_pass("forward_on_device", ids, key_padding_mask, attention, logits_to_keep);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return run_pass_on_device(backend, pass.name, pass.steps);
}

void LanguageModel::check_logits_to_keep(const std::string& who, int64_t n) {
  if (n < 0) {
    throw ConfigError(who + ": logits_to_keep=" + std::to_string(n) +
                      " must be >= 0 (n: the last n positions' logits; 0: every position's)");
  }
}

Value LanguageModel::kept_positions(Backend& backend, const Value& x, int64_t logits_to_keep) {
  const int64_t T = x.dim(1);
  if (logits_to_keep == 0 || logits_to_keep >= T) return x;      // (B, T, E); Hugging Face's x[:, -n:] too
  return backend.last_tokens("last_tokens", x, logits_to_keep);  // (B, n, E)
}

}  // namespace vkattn
