#pragma once
// Generation: a LanguageModel continues a prompt a token at a time — the prompt's pass, then for
// each new token its choice from the last position's logits, greedy (the first of equal logits,
// as torch.argmax) or drawn from softmax(logits / temperature) over the k likeliest, reproducibly
// from a seed, and the pass that gives the logits after it: with a KV cache one row, without it
// every position again (as a model without a cache must).
//
//   Generation g(backend, model, prompt_ids, {.max_new_tokens = 40});
//   std::vector<int64_t> ids = g.run();        // or: g.prompt_pass(); while (auto t = g.next()) g.pass();
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/language_model.h"

namespace vkattn {

struct GenerationOptions {
  int64_t max_new_tokens = 20;
  double temperature = 0.0;   // 0: greedy; > 0: sampled
  int64_t top_k = 0;          // sample among the k likeliest only; 0: all
  uint64_t seed = 0;          // the sampler's: the same seed, the same tokens
  bool use_cache = true;      // false: every position again for each token
  Narrow cache_dtype = Narrow::none;  // the cache's numbers (KVCache): float32, float16 or bfloat16
  int64_t eos_token_id = -1;  // drawing it ends the generation (it is not kept); -1: none
};

// The next token from one position's logits (V), as GenerationOptions says.
int64_t next_token(std::span<const float> logits, double temperature, int64_t top_k, std::mt19937_64& rng);

class Generation {
 public:
  // ShapeError naming them for an empty prompt, or one that max_new_tokens takes past the model's
  // max_positions(); ConfigError for a negative temperature, top_k or max_new_tokens.
  Generation(Backend& backend, const LanguageModel& model, std::vector<int64_t> prompt, GenerationOptions options);

  // The prompt's pass (with the cache: it fills it). Once, first.
  void prompt_pass();
  // The next token, chosen from the latest logits; none when max_new_tokens are drawn or the
  // end-of-text token is.
  std::optional<int64_t> next();
  // The pass of the token next() gave, so that the following next() has its logits.
  void pass();
  // prompt_pass, then next and pass until done; the new tokens.
  std::vector<int64_t> run();

  const std::vector<int64_t>& generated() const { return generated_; }
  bool stopped_at_end_of_text() const { return stopped_; }
  const KVCache* cache() const { return cache_ ? &*cache_ : nullptr; }

 private:
  Backend& backend_;
  const LanguageModel& model_;
  std::vector<int64_t> tokens_;  // the prompt and every token drawn
  std::vector<int64_t> generated_;
  GenerationOptions options_;
  std::optional<KVCache> cache_;
  std::mt19937_64 rng_;
  std::vector<float> logits_;  // the last position's (V)
  size_t passed_ = 0;          // tokens_ the model has seen
  bool stopped_ = false;
};

}  // namespace vkattn
