#!/usr/bin/python3
"""Writes the PyTorch golden fixtures of the decoder: nn.TransformerDecoderLayer,
nn.TransformerDecoder and nn.Transformer, which tests/modules/test_decoder.cpp and tests/tools/cli_test.sh check.

Run it from anywhere with Debian's python3-torch (1.13 or 2.x) and python3-numpy:
    /usr/bin/python3 tests/golden_decoder/generate.py
The fixtures are committed; neither CI nor the tests need PyTorch.

A fixture is a folder tests/golden_decoder/<name>/ holding
    weights.safetensors   the module's state_dict, __metadata__ {"num_heads": "H"}
    tgt.npy, memory.npy   float32 (B, T, E) and (B, S, E) batch-first, or (T, E), (S, E) unbatched
                          (an nn.Transformer fixture has src.npy instead of memory.npy)
    [tgt_mask.npy] [memory_mask.npy] [src_mask.npy]      bool, True = blocked, or float, added
    [tgt_key_padding_mask.npy] [memory_key_padding_mask.npy] [src_key_padding_mask.npy]
                          bool (B, ·), True = padding
    expected_output.npy   float32, like tgt
    config.json           what the state_dict cannot say (activation, norm_first, eps, causal)
Weights and inputs are drawn in float32; the expected output is computed in float64 from exactly
those values and stored as float32. Each is also checked here against the decoder written out from
its definition (`decoder_layer`), so a torch fast path cannot slip in.

As for the encoder's fixtures: torch 1.13 has no tgt_is_causal, so torch gets the equivalent bool
tgt_mask while config.json says "tgt_is_causal" for vkattn; the encoder inside nn.Transformer runs
without nested tensors (padded positions computed like any other); LayerNorm weights are drawn
(1 ± 0.25, ± 0.25). No row is fully masked: torch gives NaN there, vkattn zeros (DESIGN.md).
"""
import json
import pathlib
import shutil
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "golden"))
from generate import save_safetensors  # noqa: E402  the numpy-only safetensors writer
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("encoder_generate", HERE.parent / "golden_encoder" / "generate.py")
encoder_generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(encoder_generate)
perturb_norms, encoder_layer = encoder_generate.perturb_norms, encoder_generate.by_definition


def attention(x, mem, w, nhead, mask, key_padding):
    """torch.nn.MultiheadAttention from its definition: x (B, T, E) attends to mem (B, S, E)."""
    B, T, E = x.shape
    S, d = mem.shape[1], E // nhead
    W, b = w("in_proj_weight"), w("in_proj_bias")
    q = x @ W[:E].T + b[:E]
    k = mem @ W[E:2 * E].T + b[E:2 * E]
    v = mem @ W[2 * E:].T + b[2 * E:]
    split = lambda t, n: t.view(B, n, nhead, d).transpose(1, 2)  # noqa: E731
    scores = split(q, T) @ split(k, S).transpose(-1, -2) / d ** 0.5  # (B, H, T, S)
    if mask is not None:
        mask = mask.view(B, nhead, T, S) if mask.dim() == 3 else mask
        scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if key_padding is not None:
        scores = scores.masked_fill(key_padding[:, None, None, :], float("-inf"))
    heads = scores.softmax(-1) @ split(v, S)
    return heads.transpose(1, 2).reshape(B, T, E) @ w("out_proj.weight").T + w("out_proj.bias")


def decoder_layer(x, mem, sd, prefix, nhead, activation, norm_first, eps, masks):
    """One TransformerDecoderLayer from torch's definition, in float64, batch-first."""
    E = x.shape[-1]
    w = lambda module: lambda name: sd[prefix + module + "." + name]  # noqa: E731
    sa = lambda h: attention(h, h, w("self_attn"), nhead, masks["tgt_mask"], masks["tgt_key_padding_mask"])  # noqa
    ca = lambda h: attention(h, mem, w("multihead_attn"), nhead, masks["memory_mask"],  # noqa: E731
                             masks["memory_key_padding_mask"])

    def ffn(h):
        hidden = h @ sd[prefix + "linear1.weight"].T + sd[prefix + "linear1.bias"]
        hidden = F.gelu(hidden) if activation == "gelu" else F.relu(hidden)
        return hidden @ sd[prefix + "linear2.weight"].T + sd[prefix + "linear2.bias"]

    def norm(h, name):
        return F.layer_norm(h, (E,), sd[prefix + name + ".weight"], sd[prefix + name + ".bias"], eps)

    if norm_first:
        x = x + sa(norm(x, "norm1"))
        x = x + ca(norm(x, "norm2"))
        return x + ffn(norm(x, "norm3"))
    x = norm(x + sa(x), "norm1")
    x = norm(x + ca(x), "norm2")
    return norm(x + ffn(x), "norm3")


def right_padding(B, N):
    """Item b keeps N - b·(N // (B + 1)) positions, at least one: no row is fully masked."""
    m = torch.zeros(B, N, dtype=torch.bool)
    for b in range(B):
        m[b, max(1, N - b * max(1, N // (B + 1))):] = True
    return m


def fixture(name, *, module, E, H, F_, B=2, T=5, S=7, layers=1, encoder_layers=1, activation="relu",
            norm_first=False, eps=1e-5, final_norm=False, tgt_is_causal=False, tgt_mask=None, memory_mask=None,
            tgt_padding=False, memory_padding=False, src_padding=False, unbatched=False, seed=0):
    """module: "TransformerDecoderLayer", "TransformerDecoder" or "Transformer". tgt_mask /
    memory_mask: None, "bool" (random blocks, the diagonal kept) or "float" (random, additive)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    kw = dict(dim_feedforward=F_, dropout=0.1, activation=activation, layer_norm_eps=eps, batch_first=True,
              norm_first=norm_first)
    if module == "Transformer":
        m = nn.Transformer(E, H, num_encoder_layers=encoder_layers, num_decoder_layers=layers, **kw)
        m.encoder.enable_nested_tensor = False
        m.encoder.use_nested_tensor = False  # torch 2.x's name for it
        final_norm = True
    else:
        layer = nn.TransformerDecoderLayer(E, H, **kw)
        m = layer if module == "TransformerDecoderLayer" else nn.TransformerDecoder(
            layer, layers, norm=nn.LayerNorm(E, eps=eps) if final_norm else None)
    perturb_norms(m, gen)
    m.eval()

    tgt = torch.randn(B, T, E, generator=gen)
    memory = torch.randn(B, S, E, generator=gen)  # src for a Transformer
    masks = {"tgt_mask": None, "memory_mask": None, "tgt_key_padding_mask": None, "memory_key_padding_mask": None}

    def draw_mask(kind, rows, cols):
        if kind == "bool":
            blocked = torch.rand(rows, cols, generator=gen) < 0.3
            blocked[torch.arange(rows), torch.arange(rows) % cols] = False  # every row keeps a key
            return blocked
        return (torch.randn(rows, cols, generator=gen) * 2).float()

    if tgt_mask:
        masks["tgt_mask"] = draw_mask(tgt_mask, T, T)
    if tgt_is_causal:  # what vkattn gets as tgt_is_causal, torch 1.13 as a mask
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        assert masks["tgt_mask"] is None
        masks["tgt_mask"] = causal
    if memory_mask:
        masks["memory_mask"] = draw_mask(memory_mask, T, S)
    if tgt_padding:
        masks["tgt_key_padding_mask"] = right_padding(B, T)
    if memory_padding or src_padding:
        masks["memory_key_padding_mask"] = right_padding(B, S)
    src_key_padding = masks["memory_key_padding_mask"] if src_padding else None
    if not memory_padding:
        masks["memory_key_padding_mask"] = None

    m64 = m.double()
    as64 = {k: (v.double() if v is not None and v.dtype != torch.bool else v) for k, v in masks.items()}
    with torch.no_grad():
        x, mem = tgt.double(), memory.double()
        if module == "Transformer":
            out = m64(mem[0] if unbatched else mem, x[0] if unbatched else x,
                      src_key_padding_mask=src_key_padding, **as64)
        elif unbatched:
            out = m64(x[0], mem[0], tgt_mask=as64["tgt_mask"], memory_mask=as64["memory_mask"])
        else:
            out = m64(x, mem, **as64)

        sd = {k: v.double() for k, v in m64.state_dict().items()}
        if unbatched:
            x, mem = x[:1], mem[:1]
        root = ""
        if module == "Transformer":  # the encoder from its definition, then the decoder
            for i in range(encoder_layers):
                mem = encoder_layer(mem, sd, f"encoder.layers.{i}.", H, activation, norm_first, eps, src_key_padding,
                                    False)
            mem = F.layer_norm(mem, (E,), sd["encoder.norm.weight"], sd["encoder.norm.bias"], eps)
            root = "decoder."
        prefixes = [""] if module == "TransformerDecoderLayer" else [f"{root}layers.{i}." for i in range(layers)]
        ref = x
        for prefix in prefixes:
            ref = decoder_layer(ref, mem, sd, prefix, H, activation, norm_first, eps, as64)
        if final_norm:
            ref = F.layer_norm(ref, (E,), sd[root + "norm.weight"], sd[root + "norm.bias"], eps)
        if unbatched:
            ref = ref[0]
        assert torch.allclose(out, ref, atol=1e-10), f"{name}: torch and the definition differ by {(out - ref).abs().max()}"

    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    state = {k: v.float() for k, v in m64.state_dict().items()}
    save_safetensors(state, folder / "weights.safetensors", {"num_heads": str(H)})
    first = (lambda t: t[0]) if unbatched else (lambda t: t)  # noqa: E731
    np.save(folder / "tgt.npy", first(tgt).numpy().astype("<f4"))
    np.save(folder / ("src.npy" if module == "Transformer" else "memory.npy"), first(memory).numpy().astype("<f4"))
    for key, value in masks.items():
        if value is not None and not (key == "tgt_mask" and tgt_is_causal):
            np.save(folder / f"{key}.npy", value.numpy() if value.dtype == torch.bool else value.numpy().astype("<f4"))
    if src_key_padding is not None:
        np.save(folder / "src_key_padding_mask.npy", src_key_padding.numpy())
    np.save(folder / "expected_output.npy", out.numpy().astype("<f4"))
    config = {"module": module, "num_layers": layers, "nhead": H, "dim_feedforward": F_, "activation": activation,
              "norm_first": norm_first, "layer_norm_eps": eps, "final_norm": final_norm,
              "tgt_is_causal": tgt_is_causal, "unbatched": unbatched}
    if module == "Transformer":
        config["num_encoder_layers"] = encoder_layers
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def main():
    for folder in HERE.iterdir():
        if folder.is_dir() and (folder / "config.json").exists():
            shutil.rmtree(folder)
    fixture("layer_post_relu_causal", module="TransformerDecoderLayer", E=8, H=2, F_=16, tgt_is_causal=True)
    fixture("layer_pre_gelu_masks", module="TransformerDecoderLayer", E=8, H=2, F_=12, T=4, S=9, activation="gelu",
            norm_first=True, tgt_mask="bool", memory_mask="float", seed=1)
    fixture("decoder2_post_gelu_norm_padding", module="TransformerDecoder", E=12, H=3, F_=20, B=3, T=6, S=5,
            layers=2, activation="gelu", final_norm=True, tgt_is_causal=True, tgt_padding=True,
            memory_padding=True, seed=2)
    fixture("decoder3_pre_relu_awkward_eps", module="TransformerDecoder", E=16, H=4, F_=24, B=1, T=17, S=3,
            layers=3, norm_first=True, eps=1e-6, memory_mask="bool", tgt_mask="float", seed=3)
    fixture("decoder2_pre_gelu_norm_unbatched", module="TransformerDecoder", E=8, H=2, F_=16, T=3, S=6, layers=2,
            activation="gelu", norm_first=True, final_norm=True, tgt_is_causal=True, unbatched=True, seed=4)
    fixture("transformer_post_relu_padding", module="Transformer", E=8, H=2, F_=16, B=2, T=4, S=6, layers=2,
            encoder_layers=2, tgt_is_causal=True, src_padding=True, memory_padding=True, seed=5)
    fixture("transformer_pre_gelu", module="Transformer", E=12, H=2, F_=20, B=2, T=5, S=3, layers=1,
            encoder_layers=2, activation="gelu", norm_first=True, memory_mask="bool", seed=6)
    print(f"wrote the decoder fixtures to {HERE} with torch {torch.__version__}")


if __name__ == "__main__":
    main()
