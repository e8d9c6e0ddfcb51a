#pragma once
// LanguageModel: what a decoder-only language model offers whatever its recipe — CausalLM (GPT's
// and GPT-2's), Llama (Llama's, Mistral's, Qwen2's) — so that generation, the command line and
// Python drive any of them: logits for token ids, and a KV cache to decode with.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tensor.h"

namespace vkattn {

class LanguageModel : public KeepsWeights {
 public:
  virtual ~LanguageModel() = default;

  // ids (B, T) int64 -> logits (B, T, V), every position computed; key_padding_mask (B, T);
  // `attention` the path each layer's attention takes (unfused: its scores, mask, softmax and
  // weights @ v traced as steps; automatic: the backend's choice, fused on most).
  // logits_to_keep (Hugging Face's): n > 0 gives the last n positions' logits only, (B, n, V)
  // (all T where n >= T): the final norm and lm_head run on those rows alone (step last_tokens),
  // which is all generation needs (n = 1); 0 gives every position's.
  Tensor forward(Backend& backend, const Tensor& ids, const std::optional<Tensor>& key_padding_mask = {},
                 AttentionPath attention = AttentionPath::automatic, int64_t logits_to_keep = 0) const;
  // forward()'s pass with its logits left on `backend` (Backend::download reads them back): the
  // ids cross to the device, nothing comes back. Torch's forward on CUDA.
  Value forward_on_device(Backend& backend, const Tensor& ids, const std::optional<Tensor>& key_padding_mask = {},
                          AttentionPath attention = AttentionPath::automatic, int64_t logits_to_keep = 0) const;
  // A cache for `batch` sequences of up to `capacity` positions (<= max_positions()), keeping
  // `dtype`'s numbers (KVCache).
  virtual KVCache make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype = Narrow::none) const = 0;
  // ids (B, T): the T positions after the cache's length() -> their logits (B, T, V), or the last
  // options.logits_to_keep positions' (B, n, V) as forward's.
  virtual Tensor decode(Backend& backend, const Tensor& ids, KVCache& cache,
                        const DecodeOptions& options = {}) const = 0;

  virtual int64_t vocab_size() const = 0;     // V
  virtual int64_t max_positions() const = 0;  // the longest sequence
  virtual uint64_t parameter_count() const = 0;  // a tied head counted once
  // Its layers in a line or two: "2 × TransformerEncoderLayer(d_model=64, nhead=4, …)"
  virtual std::string describe() const = 0;

 protected:
  // A forward's pass: its name ("causal_lm", "llama") and its steps from the ids to the logits
  struct ForwardPass {
    std::string name;
    std::function<Value(Backend&)> steps;
  };
  // forward()'s inputs checked (errors name "<Model>.<who>") and its pass on them
  virtual ForwardPass forward_pass(const std::string& who, const Tensor& ids,
                                   const std::optional<Tensor>& key_padding_mask, AttentionPath attention,
                                   int64_t logits_to_keep) const = 0;
  // ConfigError "<who>: logits_to_keep=-1 must be >= 0 …" for n < 0
  static void check_logits_to_keep(const std::string& who, int64_t n);
  // The positions whose logits are kept, before the final norm: x (B, T, E) -> x[:, -n:] (B, n, E)
  // (Backend::last_tokens) where 0 < n < T, else x itself
  static Value kept_positions(Backend& backend, const Value& x, int64_t logits_to_keep);
};

}  // namespace vkattn
