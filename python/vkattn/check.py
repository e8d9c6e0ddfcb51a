"""Check your own attention: record its intermediate tensors under vkattn's step names, and
vkattn runs the same weights through its recipe and says at which step, at which index and why
yours differ.

    reference = torch.nn.MultiheadAttention(E, H, batch_first=True)   # one you trust
    model.load_from(reference)                                # your own code copies its weights
    rec = vkattn.Recorder()
    Q = rec("q_proj", self.W_q(x))                           # in your forward, as it runs
    Q = rec("split_heads_q", Q.view(B, T, H, d).transpose(1, 2))
    ...
    report = vkattn.check(rec, reference, query=x)
    print(report); assert report.ok

Checked against a reference you trust, a mistake in your own parameters (a weight transposed, a
slice of in_proj_weight given to the wrong layer, a bias dropped) shows at the projection it
spoils. DIAGNOSES lists the mistakes check recognises (docs/check.md explains each).
"""
import html
import os

import numpy as np

from . import _vkattn
from ._convert import _numpy, as_array, as_mask
from .modules import (GroupedQueryAttention, MultiheadAttention, TransformerDecoder, TransformerDecoderLayer,
                      TransformerEncoder, TransformerEncoderLayer, _inputs)
from .pretrained import PretrainedEncoder, PretrainedModel

# vkattn's steps of one nn.MultiheadAttention forward, in order: (the shape, its axes, the
# PyTorch line it is). B batch, L query positions, S key positions, E embed_dim, H heads,
# d = E/H; the axes are b, t (i for queries, j for keys), h, c (a head's channel), f (features).
STEPS = {
    "q_proj": ("(B, L, E)", "b, t, f", "Q = self.W_q(query)"),
    "k_proj": ("(B, S, E)", "b, t, f", "K = self.W_k(key)"),
    "v_proj": ("(B, S, E)", "b, t, f", "V = self.W_v(value)"),
    "split_heads_q": ("(B, H, L, d)", "b, h, t, c", "Q.view(B, L, H, d).transpose(1, 2)"),
    "split_heads_k": ("(B, H, S, d)", "b, h, t, c", "K.view(B, S, H, d).transpose(1, 2)"),
    "split_heads_v": ("(B, H, S, d)", "b, h, t, c", "V.view(B, S, H, d).transpose(1, 2)"),
    "attention_scores": ("(B, H, L, S)", "b, h, i, j", "Q @ K.transpose(-2, -1) / math.sqrt(d)"),
    "attention_mask": ("(B, H, L, S)", "b, h, i, j", "scores.masked_fill(mask, float('-inf'))"),
    "softmax": ("(B, H, L, S)", "b, h, i, j", "F.softmax(scores, dim=-1)"),
    "attention_values": ("(B, H, L, d)", "b, h, i, c", "P @ V"),
    "merge_heads": ("(B, L, E)", "b, i, f", "O.transpose(1, 2).contiguous().view(B, L, E)"),
    "out_proj": ("(B, L, E)", "b, t, f", "self.W_o(O)"),
    "average_heads": ("(B, L, S)", "b, i, j", "P.mean(dim=1)"),
    "flash_attention": ("(B, H, L, d)", "b, h, i, c", "F.scaled_dot_product_attention(Q, K, V)"),
    # a grouped-query attention's (GroupedQueryAttention): H_kv key/value heads, Qwen3's q/k norms,
    # RoPE, o_proj
    "q_norm": ("(B, H, T, d)", "b, h, t, c", "self.q_norm(q): Qwen3's RMSNorm over each head's d"),
    "k_norm": ("(B, H_kv, T, d)", "b, h, t, c", "self.k_norm(k): Qwen3's RMSNorm over each head's d"),
    "rotary_embedding_q": ("(B, H, T, d)", "b, h, t, c", "q * cos + rotate_half(q) * sin"),
    "rotary_embedding_k": ("(B, H_kv, T, d)", "b, h, t, c", "k * cos + rotate_half(k) * sin, before repeat_kv"),
    "o_proj": ("(B, T, E)", "b, t, f", "self.o_proj(attn_output)"),
}


# The mistakes check recognises: id -> (the steps where it shows, the mistake, the PyTorch line
# that usually causes it, what to write instead). A step's "diagnoses" in a report are these ids.
DIAGNOSES = _vkattn._diagnoses()


class Recorder:
    """Your attention's tensors by vkattn's step names (STEPS). rec(name, tensor) keeps a float32
    copy and returns the tensor itself, so it can wrap a line: Q = rec("q_proj", self.W_q(x))."""

    def __init__(self):
        self.tensors = {}

    def __call__(self, name, tensor):
        a = _numpy(tensor)
        if a.dtype.kind not in "fb":
            raise _vkattn.ShapeError(f"{name}: dtype {a.dtype}; record float tensors")
        self.tensors[name] = np.array(a, dtype=np.float32)
        return tensor

    def __contains__(self, name):
        return name in self.tensors

    def __getitem__(self, name):
        return self.tensors[name]

    def __len__(self):
        return len(self.tensors)

    def clear(self):
        self.tensors.clear()

    def save(self, directory):
        """DIR/<step>.npy for each recorded tensor: what `vkattn check DIR` reads."""
        os.makedirs(directory, exist_ok=True)
        for name, a in self.tensors.items():
            np.save(os.path.join(directory, name + ".npy"), a)


def attention_weights(q_proj, k_proj, v_proj, out_proj):
    """A hand-written attention's four projections — torch nn.Linear modules, or (weight, bias)
    pairs (bias None when there is none) — as nn.MultiheadAttention's state_dict."""
    def parts(p):
        if isinstance(p, tuple):
            return _numpy(p[0]), None if p[1] is None else _numpy(p[1])
        return _numpy(p.weight), None if p.bias is None else _numpy(p.bias)
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (parts(p) for p in (q_proj, k_proj, v_proj, out_proj))
    state = {"q_proj_weight": wq, "k_proj_weight": wk, "v_proj_weight": wv, "out_proj.weight": wo}
    biases = [bq, bk, bv, bo]
    if any(b is not None for b in biases):
        state["in_proj_bias"] = np.concatenate([np.zeros(wq.shape[0], np.float32) if b is None else b
                                                for b in (bq, bk, bv)])
        state["out_proj.bias"] = np.zeros(wo.shape[0], np.float32) if bo is None else bo
    return state


class CheckReport:
    """What check() found. str(report) is the command line's text; report.ok a bool for tests."""

    def __init__(self, impl):
        self._impl = impl
        self.ok = impl.ok
        self.steps = impl.steps            # vkattn's recipe, in order, each a dict (verdict, diagnosis, …)
        self.unknown = impl.unknown        # (your name, the step it likely means)
        index = impl.first_divergent
        self.first_divergent = None if index is None else self.steps[index]

    def __str__(self):
        return self._impl.text()

    __repr__ = __str__

    def _repr_html_(self):
        colour = {"agrees": "#2a7", "differs": "#c33", "not recorded": "#999"}
        rows = []
        for s in self.steps:
            error = "" if s["max_abs_error"] is None else f"{s['max_abs_error']:.3g}"
            style = " style='background:#fee'" if s is self.first_divergent else ""
            rows.append(f"<tr{style}><td>{s['index']}</td><td><b>{html.escape(s['name'])}</b></td>"
                        f"<td>{s['shape']} ({', '.join(s['dims'])})</td><td>{s['yours'] or ''}</td><td>{error}</td>"
                        f"<td style='color:{colour[s['verdict']]}'>{s['verdict']}</td>"
                        f"<td>{html.escape(s['diagnosis'])}</td></tr>")
        head = ("<tr><th>#</th><th>step</th><th>vkattn's shape (axes)</th><th>yours</th>"
                "<th>max |yours &minus; vkattn's|</th><th></th><th>diagnosis</th></tr>")
        return f"<div><table>{head}{''.join(rows)}</table><pre>{html.escape(str(self))}</pre></div>"


def torch_layers():
    """torch's encoder and decoder layers and stacks, and vkattn's for each, when torch is there
    (vkattn itself does not need it)."""
    try:
        import torch
    except ImportError:
        return {}
    nn = torch.nn
    return {nn.TransformerEncoderLayer: TransformerEncoderLayer, nn.TransformerEncoder: TransformerEncoder,
            nn.TransformerDecoderLayer: TransformerDecoderLayer, nn.TransformerDecoder: TransformerDecoder}


def check(recorder, reference, query, key=None, value=None, key_padding_mask=None, attn_mask=None,
          is_causal=False, num_heads=None, batch_first=True, device=None, atol=1e-4, rtol=1e-4, position=0,
          memory=None, memory_mask=None, memory_key_padding_mask=None, text_pair=None):
    """Runs `reference` through vkattn's recipe on query/key/value (key and value default to the
    query) and compares every step in `recorder` (a Recorder or a dict name -> tensor) in the
    recipe's order. reference: a torch.nn.MultiheadAttention, a vkattn.MultiheadAttention, or a
    state_dict under PyTorch's names (attention_weights() makes one from four nn.Linear) with
    num_heads; an encoder layer or stack (torch's nn.TransformerEncoderLayer or TransformerEncoder,
    or vkattn's), run on the query as its src with attn_mask as its mask, its steps named by torch's
    module paths (self_attn.q_proj, layers.1.norm2, …); a decoder layer or stack the same way, on the
    query as its target and `memory`, with attn_mask and key_padding_mask the target's and
    memory_mask and memory_key_padding_mask the memory's; or a vkattn.GroupedQueryAttention (Llama's),
    run on the query alone with its own causal mask and window, from `position`, whose check also
    names RoPE's other convention, another θ, and K/V heads copied with .repeat instead of
    .repeat_interleave. Masks as PyTorch takes them (bool True blocks). Returns a CheckReport.

    A reference you trust (torch's module, or a state_dict you loaded) checks your own parameters
    too; attention_weights(m.W_q, …) from your own modules checks only the steps between them.

    A checkpoint's model (vkattn.from_pretrained's) as `reference` checks `recorder` on the tokens
    `query`: your steps under vkattn's names, or for a language model a TransformerLens-style
    cache ({hook name: tensor}) (PretrainedModel.check, PretrainedEncoder.check); an encoder's
    on the pair of texts query and text_pair where given (a question and its context)."""
    tensors = recorder.tensors if isinstance(recorder, Recorder) else recorder
    if isinstance(reference, PretrainedEncoder):
        return reference.check(tensors, query, atol, rtol, text_pair=text_pair)
    if text_pair is not None:
        raise _vkattn.ConfigError("check: text_pair is a pretrained encoder's second text (vkattn.from_pretrained's "
                                  "BERT, RoBERTa, DistilBERT); this reference reads one input")
    if isinstance(reference, PretrainedModel):
        return reference.check(tensors, query, atol, rtol)
    recorded = [(name, np.ascontiguousarray(_numpy(t), dtype=np.float32)) for name, t in tensors.items()]
    if isinstance(reference, GroupedQueryAttention):
        if key is not None or value is not None or attn_mask is not None or is_causal:
            raise _vkattn.ConfigError("check: a GroupedQueryAttention attends the query to itself with its own "
                                      "causal mask and window; drop key, value, attn_mask and is_causal")
        return CheckReport(reference._impl.check(recorded, as_array(query, "query"),
                                                 as_mask(key_padding_mask, "key_padding_mask"), position, atol, rtol))
    ours = torch_layers().get(type(reference))
    if ours is not None:
        reference = ours.from_torch(reference, device=device)
    if isinstance(reference, (TransformerEncoderLayer, TransformerEncoder)):
        if key is not None or value is not None or memory is not None:
            raise _vkattn.ConfigError("check: an encoder attends its input (query) to itself; drop key, value "
                                      "and memory")
        return CheckReport(reference._impl.check(recorded, reference._in(query, "src"), as_mask(attn_mask, "attn_mask"),
                                                 as_mask(key_padding_mask, "key_padding_mask"), is_causal, atol, rtol))
    if isinstance(reference, (TransformerDecoderLayer, TransformerDecoder)):
        if memory is None or key is not None or value is not None:
            raise _vkattn.ConfigError("check: a decoder takes its target as query and the encoder's output as "
                                      "memory (not key and value)")
        masks = reference._masks(attn_mask, memory_mask, key_padding_mask, memory_key_padding_mask)
        return CheckReport(reference._impl.check(recorded, reference._in(query, "tgt"), reference._in(memory, "memory"),
                                                 masks, bool(is_causal), atol, rtol))
    if isinstance(reference, MultiheadAttention):
        mha = reference
    elif isinstance(reference, dict):
        mha = MultiheadAttention.from_state_dict(reference, num_heads, batch_first=batch_first, device=device)
    elif hasattr(reference, "in_proj_bias") and hasattr(reference, "num_heads"):
        mha = MultiheadAttention.from_torch(reference, device=device)
    else:
        raise _vkattn.ConfigError(f"reference: a {type(reference).__name__}; give torch's (or vkattn's) "
                                  "MultiheadAttention, TransformerEncoder[Layer] or TransformerDecoder[Layer], "
                                  "a vkattn.GroupedQueryAttention, a checkpoint's model or a state_dict (with "
                                  "num_heads=)")
    q, k, v = _inputs(query, key, value)
    report = mha._impl.check(recorded, q, k, v, as_mask(key_padding_mask, "key_padding_mask"),
                             as_mask(attn_mask, "attn_mask"), is_causal, atol, rtol)
    return CheckReport(report)
