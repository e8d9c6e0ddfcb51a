#include "engine/modules/attention_core.h"

#include "vkattn/errors.h"

namespace vkattn {

AttentionPath attention_path(const std::string& who, AttentionPath requested, bool need_weights) {
  const AttentionPath path = resolve_attention(requested, need_weights);
  if (path == AttentionPath::fused && need_weights) {
    throw ConfigError(who + ": the fused path (flash_attention) never holds the attention weights; "
                            "pass need_weights=false");
  }
  return path;
}

AttentionCore attention_core(Backend& b, const Value& q, const Value& k, const Value& v, const Value* attn_mask,
                             const Value* key_padding_mask, bool causal, int64_t window, AttentionPath path,
                             bool need_weights) {
  AttentionCore out;
  if (path == AttentionPath::fused) {
    out.heads = b.flash_attention("flash_attention", q, k, v, attn_mask, key_padding_mask, causal, window);
    return out;
  }
  Value scores = b.attention_scores("attention_scores", q, k);  // (B, H, L, S)
  if (attn_mask || key_padding_mask || causal) {
    scores = b.attention_mask("attention_mask", scores, attn_mask, key_padding_mask, causal, window);
  }
  Value p = b.softmax("softmax", scores);  // (B, H, L, S)
  out.heads = b.attention_values("attention_values", p, v);  // (B, H, L, d)
  if (need_weights) out.weights = std::move(p);
  return out;
}

}  // namespace vkattn
