"""TransformerLens's hook names for the steps of a GPT-2-style trace (a CausalLM: GPT-2's
checkpoints, vkattn's own language model), so that a trace lines up with a TransformerLens
ActivationCache: trace["blocks.0.attn.hook_pattern"] is trace["layers.0.self_attn.softmax"].

TransformerLens writes a head's axis after the positions — hook_q, hook_k, hook_v and hook_z are
(batch, pos, head, d_head) — where vkattn's split heads are (B, H, T, d): those are transposed.
hook_attn_scores (masked: -inf above the diagonal) and hook_pattern need a trace with
attention="unfused"; hook_z is flash_attention's output otherwise. The ln hooks are the norms'
outputs, weight and bias applied: TransformerLens's hook_normalized with fold_ln=False."""
import re
import textwrap

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
        before = "position_embedding" if i == 0 else f"layers.{i - 1}.residual_add2"
        for hook, (steps, _) in [("hook_resid_pre", ([before], None))] + list(_BLOCK_HOOKS.items()):
            if any((s if hook == "hook_resid_pre" else f"layers.{i}.{s}") in names for s in steps):
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


class HookCheck:
    """check()'s findings for a TransformerLens-style cache against a checkpoint's trace, shaped as
    the engine's check report (CheckReport wraps it): each hook vkattn's steps answer to, in
    TransformerLens's order, agreeing, differing or not in the cache."""

    def __init__(self, cache, trace, model, atol, rtol):
        self.steps, self.first_divergent = [], None
        known = hook_names(trace)
        self.unknown = [(name, "") for name in cache if name not in known]
        for index, name in enumerate(known):
            ours = hook_values(trace, name)
            step = {"index": index, "name": name, "shape": tuple(ours.shape), "dims": (), "yours": None,
                    "max_abs_error": None, "verdict": "not recorded", "diagnosis": ""}
            if name in cache:
                yours = np.asarray(cache[name], dtype=np.float32)
                step["yours"] = tuple(yours.shape)
                step["verdict"], step["max_abs_error"], step["diagnosis"] = _compare(name, yours, ours, atol, rtol)
                if step["verdict"] == "differs" and self.first_divergent is None:
                    self.first_divergent = index
            self.steps.append(step)
        self.ok = self.first_divergent is None and any(s["yours"] is not None for s in self.steps)
        self.backend, self.device, self.model = trace.backend, trace.device, model

    def text(self):
        compared = sum(s["yours"] is not None for s in self.steps)
        lines = [f"check: {compared} of {len(self.steps)} hooks of {self.model} compared",
                 f"  on {self.backend}: {self.device}"]
        if compared == 0:
            lines.append("none of the cache's names is a hook vkattn's steps answer to (hooks.hook_names)")
        if self.first_divergent is None:
            lines.append("every hook compared agrees" if compared else "")
        else:
            s = self.steps[self.first_divergent]
            error = "" if s["max_abs_error"] is None else f", max |yours - vkattn's| = {s['max_abs_error']:.3g}"
            lines.append(f"first divergent hook: {s['name']} {s['shape']}{error}")
            if s["diagnosis"]:
                lines += textwrap.wrap(s["diagnosis"], 98, initial_indent="  ", subsequent_indent="  ")
        if self.unknown:
            lines += textwrap.wrap("not hooks vkattn knows: " + ", ".join(name for name, _ in self.unknown), 100,
                                   subsequent_indent="  ")
        return "\n".join(line for line in lines if line)


def _compare(name, yours, ours, atol, rtol):
    """(verdict, max |difference| or None, diagnosis)"""
    if yours.shape != ours.shape:
        if yours.ndim == 4 and yours.shape == tuple(ours.shape[i] for i in HEADS_LAST):
            return "differs", None, (f"shape {yours.shape}: heads before positions; TransformerLens's "
                                     f"{name.split('.')[-1]} is (batch, pos, head, d_head) = {ours.shape}")
        return "differs", None, f"shape {yours.shape} where vkattn's is {ours.shape}"
    same_inf = np.isinf(yours) & (yours == ours)
    with np.errstate(invalid="ignore"):  # -inf - -inf where both mask a score: counted 0
        difference = np.where(same_inf, 0.0, np.abs(yours.astype(np.float64) - ours))
    difference = np.where(np.isnan(difference), np.inf, difference)
    worst = float(difference.max()) if difference.size else 0.0
    within = np.all(difference <= atol + rtol * np.where(np.isinf(ours), 0.0, np.abs(ours)))
    return ("agrees" if within else "differs"), worst, ""
