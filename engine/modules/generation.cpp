#include "vkattn/modules/generation.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "vkattn/errors.h"

namespace vkattn {

int64_t next_token(std::span<const float> logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  const auto best = std::max_element(logits.begin(), logits.end());
  if (temperature == 0.0) return best - logits.begin();
  std::vector<float> sorted(logits.begin(), logits.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const float floor = top_k > 0 && top_k < static_cast<int64_t>(sorted.size()) ? sorted[static_cast<size_t>(top_k - 1)]
                                                                               : -INFINITY;
  std::vector<double> weights(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    weights[i] = logits[i] >= floor ? std::exp((logits[i] - *best) / temperature) : 0.0;
    total += weights[i];
  }
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  for (size_t i = 0; i < weights.size(); ++i) {
    if (u < weights[i]) return static_cast<int64_t>(i);
    u -= weights[i];
  }
  return best - logits.begin();  // rounding left u past the end: the likeliest
}

Generation::Generation(Backend& backend, const LanguageModel& model, std::vector<int64_t> prompt,
                       GenerationOptions options)
    : backend_(backend), model_(model), tokens_(std::move(prompt)), options_(options), rng_(options.seed) {
  const auto& o = options_;
  if (o.max_new_tokens < 0 || o.top_k < 0 || !(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    throw ConfigError("generate: max_new_tokens=" + std::to_string(o.max_new_tokens) + ", temperature=" +
                      std::to_string(o.temperature) + " and top_k=" + std::to_string(o.top_k) +
                      " must be >= 0 (and the temperature finite)");
  }
  if (tokens_.empty()) throw ShapeError("generate: the prompt is empty: give at least one token");
  const int64_t length = static_cast<int64_t>(tokens_.size()) + o.max_new_tokens;
  if (length > model_.max_positions()) {
    throw ShapeError("generate: " + std::to_string(tokens_.size()) + " prompt tokens and " +
                     std::to_string(o.max_new_tokens) + " new ones need " + std::to_string(length) +
                     " positions; the model has " + std::to_string(model_.max_positions()));
  }
  if (o.use_cache) cache_.emplace(model_.make_cache(backend_, 1, length, o.cache_dtype));
}

void Generation::pass() {
  // with the cache, the tokens it has not seen; without, every one
  const size_t from = cache_ ? passed_ : 0;
  std::vector<float> values(tokens_.begin() + static_cast<std::ptrdiff_t>(from), tokens_.end());
  const auto T = static_cast<int64_t>(values.size());
  const Tensor ids({1, T}, std::move(values), DType::int64);
  // the last position's logits alone (1, 1, V): the next token's; a prompt's others are not read
  const Tensor logits = cache_ ? model_.decode(backend_, ids, *cache_, {.logits_to_keep = 1})
                               : model_.forward(backend_, ids, {}, AttentionPath::automatic, 1);
  logits_ = logits.data;
  passed_ = tokens_.size();
}

void Generation::prompt_pass() { pass(); }

std::optional<int64_t> Generation::next() {
  if (stopped_ || static_cast<int64_t>(generated_.size()) >= options_.max_new_tokens) return std::nullopt;
  const int64_t token = next_token(logits_, options_.temperature, options_.top_k, rng_);
  if (token == options_.eos_token_id) {
    stopped_ = true;
    return std::nullopt;
  }
  tokens_.push_back(token);
  generated_.push_back(token);
  return token;
}

std::vector<int64_t> Generation::run() {
  prompt_pass();
  while (next()) {
    if (static_cast<int64_t>(generated_.size()) < options_.max_new_tokens) pass();  // the last needs no logits
  }
  return generated_;
}

}  // namespace vkattn
