"""TransformerLens's hook names for the steps of a GPT-2-style trace (a CausalLM: GPT-2's
checkpoints, vkattn's own language model), so that a trace lines up with a TransformerLens
ActivationCache: trace["blocks.0.attn.hook_pattern"] is trace["layers.0.self_attn.softmax"].

TransformerLens writes a head's axis after the positions — hook_q, hook_k, hook_v and hook_z are
(batch, pos, head, d_head) — where vkattn's split heads are (B, H, T, d): those are transposed.
hook_attn_scores (masked: -inf above the diagonal) and hook_pattern need a trace with
attention="unfused"; hook_z is flash_attention's output otherwise. The ln hooks are the norms'
outputs, weight and bias applied: TransformerLens's hook_normalized with fold_ln=False."""
import re

import numpy as np

HEADS_LAST = (0, 2, 1, 3)  # (B, H, T, d) -> (B, T, H, d)

# hook -> (vkattn steps, the first the trace has is used; how its tensor becomes the hook's)
_BLOCK_HOOKS = {
    "hook_resid_mid": (["residual_add1"], None),
    "hook_resid_post": (["residual_add2"], None),
    "ln1.hook_normalized": (["norm1"], None),
    "ln2.hook_normalized": (["norm2"], None),
    "attn.hook_q": (["self_attn.split_heads_q"], HEADS_LAST),
    "attn.hook_k": (["self_attn.split_heads_k"], HEADS_LAST),
    "attn.hook_v": (["self_attn.split_heads_v"], HEADS_LAST),
    "attn.hook_attn_scores": (["self_attn.attention_mask", "self_attn.attention_scores"], None),
    "attn.hook_pattern": (["self_attn.softmax"], None),
    "attn.hook_z": (["self_attn.attention_values", "self_attn.flash_attention"], HEADS_LAST),
    "hook_attn_out": (["self_attn.out_proj"], None),
    "mlp.hook_pre": (["linear1"], None),
    "mlp.hook_post": (["gelu_tanh", "gelu", "relu"], None),
    "hook_mlp_out": (["linear2"], None),
}
_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


def hook_names(trace):
    """The TransformerLens hooks the trace answers to, in the order TransformerLens runs them."""
    names = [s.name for s in trace.steps]
    found = [h for h, step in (("hook_embed", "token_embedding"), ("hook_pos_embed", "position_embedding"))
             if step in names]
    layers = sorted({int(m[1]) for n in names if (m := re.match(r"^layers\.(\d+)\.", n))})
    for i in layers:
        for hook, (steps, _) in [("hook_resid_pre", ([], None))] + list(_BLOCK_HOOKS.items()):
            if hook == "hook_resid_pre" or any(f"layers.{i}.{s}" in names for s in steps):
                found.append(f"blocks.{i}.{hook}")
    if "norm" in names:
        found.append("ln_final.hook_normalized")
    return found


def hook_values(trace, hook):
    """The tensor TransformerLens's `hook` holds, from the trace's steps; KeyError naming the step
    the trace lacks (hook_pattern without attention="unfused", a step traced without values)."""
    names = {s.name for s in trace.steps}
    if hook == "hook_embed":
        return trace["token_embedding"]
    if hook == "hook_pos_embed":  # vkattn's step adds the positions to the tokens: take them back out
        return trace["position_embedding"] - trace["token_embedding"]
    if hook == "ln_final.hook_normalized":
        return trace["norm"]
    m = _BLOCK.match(hook)
    if not m:
        raise KeyError(f"{hook}: not a TransformerLens hook vkattn's steps answer to")
    layer, rest = int(m[1]), m[2]
    if rest == "hook_resid_pre":  # the stream before the block: the embeddings, or the last block's output
        return trace["position_embedding"] if layer == 0 else trace[f"layers.{layer - 1}.residual_add2"]
    if rest not in _BLOCK_HOOKS:
        raise KeyError(f"{hook}: not a TransformerLens hook vkattn's steps answer to; they are "
                       f"{', '.join(_BLOCK_HOOKS)} and hook_resid_pre")
    steps, order = _BLOCK_HOOKS[rest]
    for step in steps:
        if f"layers.{layer}.{step}" in names:
            values = trace[f"layers.{layer}.{step}"]
            return np.ascontiguousarray(values.transpose(order)) if order else values
    raise KeyError(f"{hook}: the trace has no step layers.{layer}.{steps[0]}"
                   + (" (trace with attention='unfused')" if "attn." in rest else ""))
