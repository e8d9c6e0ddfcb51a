#pragma once
// The attention both attention modules run once their heads are split (MultiHeadAttention,
// GroupedQueryAttention):
//   fused    flash_attention                                               -> heads
//   unfused  attention_scores, attention_mask (when a mask, causal or a window is given),
//            softmax, attention_values                                     -> heads, weights
//   q (B, H, L, d)   k, v (B, H_kv, S, d)   heads (B, H, L, d)   weights P (B, H, L, S)
#include <cstdint>
#include <optional>
#include <string>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {

// The path to take (resolve_attention), and a ConfigError "<who>: the fused path … never holds
// the attention weights" when the weights are wanted from the fused path.
AttentionPath attention_path(const std::string& who, AttentionPath requested, bool need_weights);

struct AttentionCore {
  Value heads;                  // (B, H, L, d)
  std::optional<Value> weights;  // P (B, H, L, S): unfused, and only when wanted
};

// `path` resolved (fused or unfused); the weights are dropped as soon as the values are made
// unless `need_weights`, so that later steps may take their buffer.
AttentionCore attention_core(Backend& b, const Value& q, const Value& k, const Value& v, const Value* attn_mask,
                             const Value* key_padding_mask, bool causal, int64_t window, AttentionPath path,
                             bool need_weights);

}  // namespace vkattn
