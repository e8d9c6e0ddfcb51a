#!/usr/bin/python3
"""Writes the PyTorch fixtures of GroupedQueryAttention (Llama / Mistral / Qwen attention), which
tests/modules/test_grouped_query_attention.cpp and tests/tools/cli_test.sh check on both backends and paths.

Run it from anywhere with Debian's python3-torch (1.13 or 2.x) and python3-numpy:
    /usr/bin/python3 tests/golden_grouped_query/generate.py
The fixtures are committed; neither CI nor the tests need PyTorch.

The attention is written out from its definition in torch, a few lines a step, as Hugging Face's
LlamaAttention computes it: q/k/v projections, heads split, Qwen3's RMSNorm of each head's q and
k where the fixture has q_norm and k_norm, RoPE on q and k (both conventions,
from tests/golden_rotary/generate.py), K and V repeated per query head with repeat_interleave,
scaled scores, the causal mask narrowed to a sliding window, softmax, P·V, heads merged, o_proj.
Where torch has scaled_dot_product_attention(enable_gqa=True) (2.5 and later: Debian 13's 2.6),
the core is cross-checked against it; on torch 1.13 that check is skipped and said so. Each
fixture also checks that `repeat` (the wrong head order) gives another output.

A fixture is tests/golden_grouped_query/<name>/ with
    weights.safetensors   q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight [and biases,
                          q_norm.weight and k_norm.weight],
                          __metadata__ {"num_heads": "H"}
    x.npy                 float32 (B, T, E)
    [key_padding_mask.npy] bool (B, T), True = padding
    expected_output.npy   float32 (B, T, E)
    config.json           what a state_dict cannot say: rope, rope_theta, rotary_dims, window,
                          position (the first row's), and num_kv_heads for the command line
No row is fully masked (torch gives NaN there, vkattn zeros: DESIGN.md).
"""
import importlib.util
import json
import math
import pathlib
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "golden"))
from generate import save_safetensors  # noqa: E402  the numpy-only safetensors writer

_spec = importlib.util.spec_from_file_location("rotary_generate", HERE.parent / "golden_rotary" / "generate.py")
rotary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rotary)


def blocked(T, window, position):
    """(T, T) bool, True = blocked: causal, and with a window W only keys i - W < j <= i."""
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    out = j > i
    if window:
        out |= j <= i - window
    return out


def attention(x, w, H, H_kv, cfg, key_padding, share=torch.repeat_interleave):
    B, T, E = x.shape
    d = w["q_proj.weight"].shape[0] // H
    q = F.linear(x, w["q_proj.weight"], w.get("q_proj.bias")).view(B, T, H, d).transpose(1, 2)
    k = F.linear(x, w["k_proj.weight"], w.get("k_proj.bias")).view(B, T, H_kv, d).transpose(1, 2)
    v = F.linear(x, w["v_proj.weight"], w.get("v_proj.bias")).view(B, T, H_kv, d).transpose(1, 2)
    if "q_norm.weight" in w:  # Qwen3RMSNorm over each head's d features (eps 1e-6), before RoPE
        def rms_norm(t, weight):
            return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
        q, k = rms_norm(q, w["q_norm.weight"]), rms_norm(k, w["k_norm.weight"])
    rope = rotary.rope_half if cfg["rope"] == "half" else rotary.rope_pairs
    r = cfg["rotary_dims"] or d
    q, k = rope(q, cfg["rope_theta"], cfg["position"], r), rope(k, cfg["rope_theta"], cfg["position"], r)
    core_in = (q, k, v)
    if share is torch.repeat_interleave:
        k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    else:  # the bug: heads 0, 1, …, H_kv - 1, 0, 1, …
        k, v = k.repeat(1, H // H_kv, 1, 1), v.repeat(1, H // H_kv, 1, 1)
    mask = blocked(T, cfg["window"], cfg["position"]).expand(B, H, T, T)
    if key_padding is not None:
        mask = mask | key_padding[:, None, None, :]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(mask, float("-inf"))
    heads = scores.softmax(-1) @ v  # (B, H, T, d)
    if hasattr(F, "scaled_dot_product_attention") and share is torch.repeat_interleave:
        try:
            sdpa = F.scaled_dot_product_attention(*core_in, attn_mask=~mask, enable_gqa=True)
            assert (sdpa - heads).abs().max() < 1e-10, "scaled_dot_product_attention(enable_gqa=True) disagrees"
            attention.cross_checked += 1
        except TypeError:  # torch 2.0 - 2.4: no enable_gqa
            pass
    merged = heads.transpose(1, 2).reshape(B, T, H * d)
    return F.linear(merged, w["o_proj.weight"], w.get("o_proj.bias"))


attention.cross_checked = 0


def fixture(name, *, E, H, H_kv, d=None, B=2, T=17, rope="half", theta=10000.0, rotary_dims=0, window=0,
            position=0, bias=False, o_bias=False, padding=False, qk_norm=False, seed=0):
    d = d or E // H
    gen = torch.Generator().manual_seed(seed)

    def linear(out_f, in_f):
        bound = 1 / math.sqrt(in_f)
        return (torch.rand(out_f, in_f, generator=gen) * 2 - 1) * bound

    w = {"q_proj.weight": linear(H * d, E), "k_proj.weight": linear(H_kv * d, E),
         "v_proj.weight": linear(H_kv * d, E), "o_proj.weight": linear(E, H * d)}
    if bias:
        for n, size in (("q_proj", H * d), ("k_proj", H_kv * d), ("v_proj", H_kv * d)):
            w[n + ".bias"] = linear(size, 1)[:, 0] * 0.5
    if o_bias:
        w["o_proj.bias"] = linear(E, 1)[:, 0] * 0.5
    if qk_norm:  # weights about 1, as trained ones are, but not all 1: a norm without its weight differs
        w["q_norm.weight"] = 1 + linear(d, 1)[:, 0]
        w["k_norm.weight"] = 1 + linear(d, 1)[:, 0]
    x = torch.randn(B, T, E, generator=gen)
    key_padding = None
    if padding:  # the last sequence is right-padded by 3: its last keys are never attended to
        key_padding = torch.zeros(B, T, dtype=torch.bool)
        key_padding[-1, T - 3:] = True
    cfg = {"rope": rope, "rope_theta": theta, "rotary_dims": rotary_dims, "window": window, "position": position,
           "num_kv_heads": H_kv}
    w64 = {k: v.double() for k, v in w.items()}
    out = attention(x.double(), w64, H, H_kv, cfg, key_padding)
    if 1 < H_kv < H:
        wrong = attention(x.double(), w64, H, H_kv, cfg, key_padding, share=torch.Tensor.repeat)
        assert (out - wrong).abs().max() > 0.01, f"{name}: repeat and repeat_interleave agree"
    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    save_safetensors(w, folder / "weights.safetensors", {"num_heads": str(H)})
    np.save(folder / "x.npy", x.numpy().astype("<f4"))
    if key_padding is not None:
        np.save(folder / "key_padding_mask.npy", key_padding.numpy())
    np.save(folder / "expected_output.npy", out.float().numpy().astype("<f4"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")


def main():
    fixture("gqa_half", E=32, H=4, H_kv=2)                                   # Llama's layout
    fixture("gqa_pairs", E=32, H=4, H_kv=2, rope="pairs", seed=1)            # the same, GPT-J pairs
    fixture("mqa_theta500k", E=24, H=6, H_kv=1, B=1, T=13, theta=500000.0, seed=2)
    fixture("mha_llama", E=16, H=2, H_kv=2, T=9, seed=3)                     # H_kv = H
    fixture("window_padding", E=32, H=8, H_kv=2, T=33, window=5, padding=True, seed=4)  # Mistral's
    fixture("qwen_bias_partial", E=24, H=4, H_kv=2, d=8, rotary_dims=4, bias=True, o_bias=True, seed=5)
    fixture("offset_window", E=16, H=4, H_kv=1, B=1, T=7, position=100, window=3, rope="pairs", seed=6)
    fixture("qwen3_qk_norm", E=32, H=4, H_kv=2, d=16, T=19, qk_norm=True, seed=7)  # d ≠ E / H
    checked = f"{attention.cross_checked} cross-checked against scaled_dot_product_attention(enable_gqa=True)"
    if not attention.cross_checked:
        checked = "this torch has no scaled_dot_product_attention(enable_gqa=True): not cross-checked"
    print(f"wrote the grouped-query fixtures to {HERE} with torch {torch.__version__}; {checked}")


if __name__ == "__main__":
    main()
