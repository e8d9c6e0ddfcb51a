#include "vkattn/tracing/diagnoses.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace vkattn {

namespace {

constexpr std::array kDiagnoses = {
    // ---- the projections -------------------------------------------------------------------------
    Diagnosis{"input_layout", "q_proj, k_proj, v_proj",
              "the input given to check in another layout than the one your model reads",
              "vkattn.check(…, query=x) with x (L, B, E) where batch_first=True (the default) says (B, L, E)",
              "give check the tensor your model read, with batch_first= as your model reads it"},
    Diagnosis{"input_swapped", "q_proj, k_proj, v_proj", "another input projected",
              "Q = self.W_q(key) in cross-attention, or K = self.W_k(query)",
              "queries from the query; keys and values from the key and value (an encoder's memory)"},
    Diagnosis{"weight_swapped", "q_proj, k_proj, v_proj, out_proj", "another projection's weight",
              "K = self.W_q(x), or a slice of in_proj_weight copied to the wrong layer",
              "each projection its own weight: in_proj_weight's thirds are q, k and v, in that order"},
    Diagnosis{"gate_up_swapped", "mlp.gate_proj, mlp.up_proj (Llama's, Phi-3's)",
              "the MLP's gate and up projections swapped: the activation on up_proj's output",
              "up, gate = self.gate_up_proj(x).chunk(2, dim=-1) with Phi-3's packed weight (its gate's rows "
              "first), or gate_proj's weight loaded into up_proj",
              "gate, up = self.gate_up_proj(x).chunk(2, dim=-1); self.down_proj(up * act(gate))"},
    Diagnosis{"weight_transposed", "q_proj, k_proj, v_proj, out_proj",
              "the weight transposed: x·W where nn.Linear computes x·Wᵀ",
              "x @ W with W stored (out, in), or a weight copied from an (in, out) layout such as GPT-2's "
              "Conv1D",
              "x @ W.T + b, or F.linear(x, W, b)"},
    Diagnosis{"bias_missing", "q_proj, k_proj, v_proj, out_proj", "the bias left out",
              "F.linear(x, W) or x @ W.T without + b, or nn.Linear(…, bias=False) where the weights have one",
              "F.linear(x, W, b); nn.Linear's bias=True"},
    Diagnosis{"bias_extra", "q_proj, k_proj, v_proj, out_proj", "a bias the weights do not have, or one added twice",
              "nn.Linear(E, E), whose bias=True by default, where the reference has bias=False",
              "nn.Linear(E, E, bias=False), as the weights given to check, and the bias added once"},
    // ---- splitting the heads ----------------------------------------------------------------------
    Diagnosis{"heads_view", "split_heads_q, split_heads_k, split_heads_v",
              "heads split by viewing (B, T, E) as (B, H, T, d): positions and heads mixed",
              "Q.view(B, H, T, d) or Q.reshape(B, H, T, d)", "Q.view(B, T, H, d).transpose(1, 2)"},
    Diagnosis{"heads_order", "split_heads_q, split_heads_k, split_heads_v",
              "each head's channels taken from every H-th feature, not from d features side by side",
              "Q.view(B, T, d, H).permute(0, 3, 1, 2)", "Q.view(B, T, H, d).transpose(1, 2)"},
    Diagnosis{"axes_order", "split_heads_*, attention_scores, merge_heads (any step)",
              "the step's axes in another order",
              "a .view(B, T, H, d) with no .transpose(1, 2), K @ Q.transpose(-2, -1) for "
              "Q @ K.transpose(-2, -1), or heads merged with no .transpose(1, 2) before the .view",
              "the .transpose or .permute the report names"},
    // ---- the scores -------------------------------------------------------------------------------
    Diagnosis{"scale_d", "attention_scores, softmax", "scores divided by d instead of √d",
              "Q @ K.transpose(-2, -1) / d_k", "Q @ K.transpose(-2, -1) / math.sqrt(d_k)"},
    Diagnosis{"scale_twice", "attention_scores, softmax", "scores scaled by 1/√d twice",
              "Q = Q / math.sqrt(d_k) before the product, and the product divided by math.sqrt(d_k) again",
              "scale once"},
    Diagnosis{"scale_width", "attention_scores, softmax",
              "scores divided by √E, the model's width, instead of √d, a head's",
              "Q @ K.transpose(-2, -1) / math.sqrt(d_model)",
              "Q @ K.transpose(-2, -1) / math.sqrt(d_model // num_heads)"},
    Diagnosis{"scale_none", "attention_scores, softmax", "scores not scaled", "Q @ K.transpose(-2, -1)",
              "Q @ K.transpose(-2, -1) / math.sqrt(d_k)"},
    // ---- the mask and the softmax -----------------------------------------------------------------
    Diagnosis{"mask_polarity", "attention_mask, softmax", "a mask of the wrong polarity: blocked and kept swapped",
              "scores.masked_fill(mask == 0, …) with a bool mask whose True blocks (PyTorch's convention)",
              "scores.masked_fill(mask, float('-inf')) where True blocks"},
    Diagnosis{"mask_shifted", "attention_mask, softmax", "a mask one key off along the diagonal",
              "torch.triu(torch.ones(L, S), diagonal=0) for a causal mask, which blocks the diagonal too "
              "(diagonal=2 lets each query see the next key)",
              "torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1): True where j > i"},
    Diagnosis{"mask_other", "attention_mask, softmax", "another mask than the one given to check",
              "a mask built for other positions, or padding given to the model but not to check (or back)",
              "give check the masks your model used"},
    Diagnosis{"mask_skipped", "attention_mask, softmax, attention_values",
              "the scores left unmasked: the mask computed and its result dropped",
              "scores.masked_fill(mask, float('-inf')) with its result dropped: masked_fill returns a new tensor",
              "scores = scores.masked_fill(mask, float('-inf')), or masked_fill_ in place"},
    Diagnosis{"mask_after_softmax", "softmax, attention_values",
              "the mask applied after the softmax: blocked weights set to 0, rows no longer summing to 1",
              "P = F.softmax(scores, dim=-1).masked_fill(mask, 0)",
              "scores.masked_fill(mask, float('-inf')) before the softmax"},
    Diagnosis{"softmax_axis", "softmax", "the softmax over another axis than the keys",
              "F.softmax(scores, dim=-2) or dim=1", "F.softmax(scores, dim=-1)"},
    Diagnosis{"rows_not_normalised", "softmax", "attention weights whose rows do not sum to 1",
              "torch.exp(scores) not divided by its row's sum, or by the sum over another dim",
              "F.softmax(scores, dim=-1)"},
    Diagnosis{"masked_row_nan", "softmax", "a row whose every key is blocked: PyTorch's softmax gives it NaN",
              "F.softmax of a row of -inf (a query with no key to see)",
              "nothing, if the row is meant to see no key (vkattn gives it zeros); else a mask that "
              "leaves each query a key"},
    Diagnosis{"dropout", "softmax, out_proj (any step)",
              "dropout left on: zeros at random, the rest scaled by 1/(1 - p)",
              "the model in training mode (an nn.Module starts in it), or F.dropout(x, p) (training=True)",
              "model.eval() before checking; F.dropout(x, p, training=self.training)"},
    // ---- grouped-query attention and RoPE ---------------------------------------------------------
    Diagnosis{"rope_missing", "rotary_embedding_q, rotary_embedding_k", "RoPE not applied",
              "q, k used straight from the projections", "q * cos + rotate_half(q) * sin, and so for k"},
    Diagnosis{"qk_norm_missing", "rotary_embedding_q, rotary_embedding_k",
              "Qwen3's q_norm and k_norm left out: heads rotated as they were split",
              "a Llama attention's forward reused for Qwen3: q, k rotated straight after the view",
              "q = self.q_norm(q.view(B, T, H, d)), and so for k, before RoPE"},
    Diagnosis{"rope_convention", "rotary_embedding_q, rotary_embedding_k",
              "RoPE's other convention: neighbouring pairs for halves, or the other way round",
              "Meta's complex-number pairs (2i, 2i + 1) with Hugging Face's weights, which rotate halves",
              "the convention the checkpoint was trained with: rotate_half for Hugging Face's"},
    Diagnosis{"rope_theta", "rotary_embedding_q, rotary_embedding_k", "RoPE's base θ another than the model's",
              "inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2) / d)) with a model whose rope_theta differs",
              "the base from config.json's rope_theta"},
    Diagnosis{"embedding_unscaled", "embed_tokens (Gemma's)",
              "Gemma's embeddings not scaled: the table's rows, not times √hidden_size",
              "a Llama forward reused for Gemma (its embeddings go straight to the first layer), or the "
              "rows recorded at the embedding module, before GemmaModel multiplies them",
              "x = self.embed_tokens(ids); x = x * torch.tensor(hidden_size ** 0.5, dtype=x.dtype), "
              "recorded after the product"},
    Diagnosis{"kv_repeat", "attention_scores, attention_values, split_heads_k, split_heads_v",
              "key/value heads copied with .repeat: query head h meets key/value head h mod H_kv",
              "k.repeat(1, group, 1, 1)", "k.repeat_interleave(group, dim=1): query head h meets head h / group"},
    Diagnosis{"kv_copied", "split_heads_k, split_heads_v, rotary_embedding_k",
              "nothing wrong: key/value heads recorded after their copy for each query head",
              "repeat_kv(k, group) before rec(…)", "record the tensor before the copy to compare it"},
    // ---- any step -----------------------------------------------------------------------------------
    Diagnosis{"sixteen_bit", "any step",
              "numbers of 16 bits: the step (or the model) run in bfloat16 or float16, where vkattn's is float32",
              "model.half(), model.to(torch.bfloat16), torch.autocast, or a checkpoint loaded with "
              "torch_dtype=torch.bfloat16",
              "check a float32 run (model.float()); or allow 16 bits' rounding (atol, rtol 1e-2), with a "
              "checkpoint's weights rounded alike (vkattn check --weights-dtype BF16)"},
    Diagnosis{"constant_factor", "any step", "every value multiplied by one constant",
              "a scale or a normalisation applied twice, or not at all", "the step's line, factor by factor"},
};

}  // namespace

std::span<const Diagnosis> diagnoses() { return kDiagnoses; }

const Diagnosis& diagnosis_named(std::string_view id) {
  auto it = std::find_if(kDiagnoses.begin(), kDiagnoses.end(), [&](const Diagnosis& d) { return d.id == id; });
  if (it == kDiagnoses.end()) throw std::out_of_range("no diagnosis named " + std::string(id));
  return *it;
}

}  // namespace vkattn
