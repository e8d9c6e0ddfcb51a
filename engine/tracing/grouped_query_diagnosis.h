#pragma once
// The check's diagnoses for the attention since 2017 (check.h): what a grouped-query attention's
// step looks like when RoPE pairs other features, turns by another θ, rotates heads Qwen3's q/k
// norms should have normalised first, or the key/value heads were copied with .repeat instead of
// .repeat_interleave. Each returns its Finding, empty when the difference is not that mistake.
#include <cstdint>
#include <string>

#include "vkattn/tensor.h"
#include "engine/tracing/mistakes.h"
#include "vkattn/tracing/check.h"

namespace vkattn::diagnosis {

// rotary_embedding: yours (N, T, d) against the recipe's rotation of `input` (the step's input).
Finding rotary(const Tensor& yours, const Tensor& input, const RotaryCheck& rope, double atol, double rtol);
// rotary_embedding after q_norm or k_norm: yours the recipe's rotation of `split`, the norm's
// input (split_heads' output), as when the norm was left out.
Finding unnormalised(const Tensor& yours, const Tensor& split, const RotaryCheck& rope, double atol, double rtol);

// A key/value tensor vkattn holds as (B, H_kv, T, d), yours with H = group · H_kv heads: the
// copy vkattn skips, in repeat_interleave's order (a note) or in repeat's (the mistake).
Finding repeated_heads(const Tensor& yours, const Tensor& theirs, int64_t group, double atol, double rtol);

// attention_scores (inputs q (B, H, L, d), k (B, H_kv, S, d)) or attention_values (p (B, H, L, S),
// v (B, H_kv, S, d)): whether yours is what query head h gets from key/value head h mod H_kv.
Finding repeat_order(const std::string& op, const Tensor& yours, const Tensor& a, const Tensor& b,
                     int64_t group, double atol, double rtol);

}  // namespace vkattn::diagnosis
