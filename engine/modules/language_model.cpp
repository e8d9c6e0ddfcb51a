#include "vkattn/modules/language_model.h"

#include "vkattn/errors.h"

namespace vkattn {

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
