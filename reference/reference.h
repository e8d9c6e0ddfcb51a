#pragma once
// The CPU reference: one plain function per step, named like its shader (shaders/<name>.comp)
// and its Backend method. Straight loops over raw row-major float arrays, fp32 accumulation in
// the same order as the shaders, no cleverness: this is the ground truth and the thing to read.
// Notation: B batch, L query length, S key length, T either, E embed dim, H heads, d = E/H.
// Grouped-query attention: K and V may hold H_kv = H / group heads, each shared by `group`
// consecutive query heads (torch's repeat_interleave on the head axis): query head n = b·H + h
// reads key/value head n / group = b·H_kv + h / group. group = 1 is multi-head attention.
// A sliding window (window W > 0, causal only) lets query i see keys i - W < j <= i: the last W.
#include <cstdint>
#include <limits>

namespace vkattn::reference {

// y = x · Wᵀ + b           x (N, K), W (M, K), b (M) or null, y (N, M)
void linear(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t K, int64_t M);

// (B, T, n·E) -> (B, H, T, d) of chunk c (E = H·d): head h owns features c·E + [h·d, (h+1)·d).
// n = 1 splits a projection; n = 3 picks q, k or v out of the packed in_proj (torch's .chunk(3, -1)).
void split_heads(const float* x, float* y, int64_t B, int64_t T, int64_t H, int64_t d, int64_t chunks = 1,
                 int64_t chunk = 0);

// (N, T, C) + row (C) -> (N, T+1, C); row null appends zeros (add_zero_attn)
void append_row(const float* x, const float* row, float* y, int64_t N, int64_t T, int64_t C);

// scores = Q · Kᵀ · scale     Q (B·H, L, d), K (B·H/group, S, d), scores (B·H, L, S)
void attention_scores(const float* q, const float* k, float* scores, int64_t BH, int64_t L, int64_t S,
                      int64_t d, float scale, int64_t group);

// out = scores + attn_mask + key_padding_mask; -inf where causal and j > i, and with a window
// W > 0 where j <= i - W
//   scores, out (B, H, L, S); attn_mask (L, S) if attn_mask_rank 2, (B·H, L, S) if 3, null if 0;
//   key_padding_mask (B, S) or null; masks are additive (a bool mask arrives as 0 / -inf)
void attention_mask(const float* scores, const float* attn_mask, int attn_mask_rank,
                    const float* key_padding_mask, bool causal, int64_t window, float* out, int64_t B,
                    int64_t H, int64_t L, int64_t S);

// Whether query i may not see key j by position: past the diagonal when causal (top-left
// aligned, as torch's is_causal), or, with a window W > 0, W or more keys behind it.
inline bool causally_blocked(bool causal, int64_t window, int64_t i, int64_t j) {
  return causal && (j > i || (window > 0 && j <= i - window));
}

// One score after the masks: score + attn_mask + key_padding_mask, -inf where causally_blocked.
// Shared by attention_mask and flash_attention.
//   `index` is the score's flat index in (B·H, L, S); b its batch item; i, j its query and key
inline float masked_score(float score, const float* attn_mask, int attn_mask_rank, const float* key_padding_mask,
                          bool causal, int64_t window, int64_t index, int64_t b, int64_t i, int64_t j, int64_t S) {
  if (attn_mask_rank == 2) score += attn_mask[i * S + j];
  if (attn_mask_rank == 3) score += attn_mask[index];
  if (key_padding_mask) score += key_padding_mask[b * S + j];
  if (causally_blocked(causal, window, i, j)) score = -std::numeric_limits<float>::infinity();
  return score;
}

// out = softmax(masked(Q · Kᵀ · scale)) · V, one query row at a time, never holding the (L, S)
// scores: an online softmax keeps the running max m (from -1e30, a large finite negative), the
// running sum l of exp(s - m) and the running output Σ exp(s - m)·v, rescaling both by
// exp(m_old - m_new) when the max grows. Blocked keys (-inf) are skipped; a row with none left
// keeps l = 0 and gives zeros, as softmax does.
//   Q (B·H, L, d), K, V (B·H/group, S, d), out (B·H, L, d); masks as attention_mask's
void flash_attention(const float* q, const float* k, const float* v, const float* attn_mask, int attn_mask_rank,
                     const float* key_padding_mask, bool causal, int64_t window, float* out, int64_t B, int64_t H,
                     int64_t L, int64_t S, int64_t d, float scale, int64_t group);

// ---- decoding with a key/value cache ------------------------------------------------------------

// Writes T new rows into a cache at `position`:  cache[n, position + t, :] = rows[n, t, :]
//   cache (N, C, d) with N = B·H and capacity C; rows (N, T, d); position + T <= C
// format: 0 float32; 1 float16, 2 bfloat16 — a cache kept 16-bit (KVCache's dtype), each value
// rounded to it (round_to) as it is written: the numbers a Vulkan device stores 2 bytes each.
void kv_cache_append(float* cache, const float* rows, int64_t N, int64_t C, int64_t T, int64_t d, int64_t position,
                     int format = 0);

// ---- 16-bit numbers (format 1 float16, 2 bfloat16), as shaders/sixteen_bit.glsl has them --------

// The 16 bits of the `format` number nearest `value`, ties to even (float16: 65520 and up to
// infinity, below 2^-24 to float16's subnormals or zero); NaN stays NaN.
uint32_t narrow_bits(float value, int format);
// The float32 those 16 bits are, exactly.
float widen_bits(uint32_t bits, int format);
// widen_bits(narrow_bits(value)): `value` rounded to `format`; format 0 leaves it as it is.
float round_to(float value, int format);

// Keys per part when S keys are split into `parts` (the last part may hold fewer, or none).
int64_t decoding_part_keys(int64_t S, int64_t parts);

// flash_attention over the first S rows of a cache, its keys split into `parts` ranges of
// decoding_part_keys(S, parts), each range walked by flash_attention's online softmax on its own.
// Each part leaves its unnormalised output Σ exp(s - m)·v, its max m and its sum l of exp(s - m)
// for attention_combine; a part that sees no key leaves m = -1e30, l = 0 and zeros.
//   Q (B·H, L, d): the L newest positions S - L … S - 1; K, V (B·H/group, C, d) caches, S <= C
//   rows used; key_padding_mask (B, S) additive, or null; causal: query i, at position
//   S - L + i, sees keys j <= S - L + i, and with a window W > 0 only j > S - L + i - W
//   partials (B·H, L, parts, d + 2): [output (d), m, l] per part
void flash_decoding(const float* q, const float* k, const float* v, const float* key_padding_mask, bool causal,
                    int64_t window, float* partials, int64_t B, int64_t H, int64_t L, int64_t C, int64_t S, int64_t d,
                    int64_t parts, float scale, int64_t group);

// Merges flash_decoding's parts: with M the largest m of a part that saw a key,
//   out = Σ_p output_p · exp(m_p - M) / Σ_p l_p · exp(m_p - M); a row no part saw a key of gives 0.
//   partials (R, parts, d + 2), out (R, d)
void attention_combine(const float* partials, float* out, int64_t R, int64_t parts, int64_t d);

// row-wise softmax, max-subtracted   x, y (R, S); a row of all -inf gives all 0
void softmax(const float* x, float* y, int64_t R, int64_t S);

// out = P · V     P (B·H, L, S), V (B·H/group, S, d), out (B·H, L, d)
void attention_values(const float* p, const float* v, float* out, int64_t BH, int64_t L, int64_t S,
                      int64_t d, int64_t group);

// (B, H, T, d) -> (B, T, E)
void merge_heads(const float* x, float* y, int64_t B, int64_t H, int64_t T, int64_t d);

// mean over heads    p (B, H, L·S) -> avg (B, L·S)
void average_heads(const float* p, float* avg, int64_t B, int64_t H, int64_t plane);

// ---- the encoder block (TransformerEncoderLayer) and the classifier around it --------------------

// y = (x - mean) / √(var + eps) · weight + bias over each row; var the biased variance (÷ E)
//   x, y (N, E)  weight, bias (E)
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t N, int64_t E, float eps);
// y = x / √(mean(x²) + eps) · weight over each row: Llama's RMSNorm      x, y (N, E)  weight (E)
void rms_norm(const float* x, const float* weight, float* y, int64_t N, int64_t E, float eps);

// y = x · Φ(x) = x/2 · (1 + erf(x/√2)), torch's exact GELU      x, y (n)
void gelu(const float* x, float* y, int64_t n);
// x/2 · (1 + tanh(√(2/π) · (x + 0.044715 · x³))): torch's gelu(approximate='tanh'), GPT-2's gelu_new
void gelu_tanh(const float* x, float* y, int64_t n);

// y = max(x, 0)      x, y (n)
void relu(const float* x, float* y, int64_t n);

// y = x + residual      x, residual, y (n)
void residual_add(const float* x, const float* residual, float* y, int64_t n);
// y = x · sigmoid(x): torch's silu, Llama's act_fn      x, y (n)
void silu(const float* x, float* y, int64_t n);
// y = tanh(x): torch's tanh, BERT's pooler activation      x, y (n)
void tanh(const float* x, float* y, int64_t n);
// y = x · other, element by element (SwiGLU's gate times up)      x, other, y (n)
void multiply(const float* x, const float* other, float* y, int64_t n);

// y[n, :] = table[ids[n], :] · scale   ids (N) integer-valued floats, table (V, E), y (N, E); an
// id outside [0, V) gives a row of NaN; scale 1, or Gemma's √E
void embedding(const float* ids, const float* table, float* y, int64_t N, int64_t V, int64_t E, float scale = 1.0f);

// y[b, t, :] = x[b, t, :] + table[t, :]      x, y (B, T, E), table (P, E) with P >= T
void positional_encoding(const float* x, const float* table, float* y, int64_t B, int64_t T, int64_t E);

// y[b, :] = mean over t of x[b, t, :]      x (B, T, E), y (B, E)
void mean_pool(const float* x, float* y, int64_t B, int64_t T, int64_t E);
// y[b, e] = x[b, 0, e]: each sequence's first position (BERT's [CLS])      x (B, T, E), y (B, E)
void first_token(const float* x, float* y, int64_t B, int64_t T, int64_t E);
// y[b, t, e] = x[b, T - n + t, e]: each sequence's last n positions (x[:, -n:]; a language model's
// logits_to_keep)      x (B, T, E), y (B, n, E), 1 <= n <= T
void last_tokens(const float* x, float* y, int64_t B, int64_t T, int64_t n, int64_t E);

// Rotary position embedding (RoPE) of x (N, T, d), N = B·H, row t at position offset + t: the
// first rotary_dims (even) features rotated pair by pair, pair i by (offset + t) · inv_freq[i];
// pairs false: pair i is features (i, i + r/2) (GPT-NeoX, rotate_half), true: (2i, 2i + 1) (GPT-J).
void rotary_embedding(const float* x, const float* inv_freq, float* y, int64_t N, int64_t T, int64_t d,
                      int64_t offset, int64_t rotary_dims, bool pairs);
// 1 / θ^(2i / r) in float32, as torch computes RoPE's inv_freq
float rotary_inverse_frequency(int64_t i, int64_t rotary_dims, float theta);
// Llama 3.1's rope_scaling "llama3" of one inverse frequency, in float32 as Hugging Face computes
// it: wavelength w = 2π / inv_freq; w > original / low: inv_freq / factor; w < original / high:
// inv_freq; between: blended by s = (original / w - low) / (high - low).
float rotary_llama3_frequency(float inv_freq, float factor, float low_freq_factor, float high_freq_factor,
                              float original_positions);
// cos_sin (T, r/2, 2): cos φ and sin φ of pair i at position offset + t, φ as rotary_embedding
// forms it (the table a GPU's rotary_embedding reads instead of its approximate cos and sin)
void rotary_cos_sin(const float* inv_freq, float* cos_sin, int64_t T, int64_t offset, int64_t rotary_dims);

}  // namespace vkattn::reference
