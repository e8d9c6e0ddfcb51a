#!/usr/bin/python3
"""Writes the PyTorch golden fixtures that tests/modules/test_golden.cpp and tests/tools/test_cli_run.cpp check.

Run it from anywhere with Debian's python3-torch and python3-numpy:
    apt-get install python3-torch python3-numpy && /usr/bin/python3 tests/golden/generate.py
The fixtures are committed; neither CI nor the tests need PyTorch.

Each fixture is a folder tests/golden/<name>/ holding
    weights.safetensors   the module's state_dict (safetensors written with numpy only, below),
                          __metadata__ {"num_heads": "H"} unless config.json says "metadata": false
    query.npy [key.npy value.npy] [key_padding_mask.npy] [attn_mask.npy]
                          the inputs exactly as PyTorch got them (batch_first or not, unbatched)
    expected_output.npy [expected_weights.npy]
    config.json           how forward() was called, so the C++ tests make the same call
Weights and inputs are drawn in float32 (float16 / bfloat16 where a fixture says so); the expected
values are computed by torch.nn.MultiheadAttention in float64 from exactly those values, then
stored as float32, so the reference is as exact as the inputs allow.

Deliberate differences from PyTorch 1.13 (DESIGN.md), applied here and recorded in config.json:
  * is_causal: torch 1.13's MultiheadAttention has no is_causal, so it is given the equivalent
    bool attn_mask (True above the diagonal) while vkattn gets is_causal=True.
  * a fully masked row: PyTorch gives NaN; vkattn gives zero weights, hence an output of
    out_proj.bias for that row. The generator writes those values where PyTorch wrote NaN.
"""
import copy
import json
import pathlib
import shutil
import struct

import numpy as np
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent


def save_safetensors(tensors, path, metadata=None, dtype="F32"):
    """A numpy-only safetensors writer (docs/models.md: "Using your PyTorch weights").

    `tensors` maps names to torch tensors; dtype F32, F16 or BF16."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if dtype == "BF16":  # numpy has no bfloat16: store its raw 16 bits
            data = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        else:
            data = t.numpy().astype("<f2" if dtype == "F16" else "<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def stored(t, dtype):
    """The values a reader of `dtype` sees: float32 rounded through float16 / bfloat16."""
    if dtype == "F16":
        return t.to(torch.float16).to(torch.float32)
    if dtype == "BF16":
        return t.to(torch.bfloat16).to(torch.float32)
    return t


def random_bool_mask(shape, p, gen):
    """True (blocked) with probability p, leaving one key open in every row."""
    mask = torch.rand(shape, generator=gen) < p
    rows = mask.reshape(-1, shape[-1])
    for r in range(rows.shape[0]):
        rows[r, r % shape[-1]] = False
    return rows.reshape(shape)


def random_float_mask(shape, gen):
    """Additive: finite values in [-2, 2), -inf where a random bool mask blocks."""
    values = torch.rand(shape, generator=gen) * 4 - 2
    return values.masked_fill(random_bool_mask(shape, 0.3, gen), float("-inf"))


def fixture(name, *, B=2, L=5, S=None, E=8, H=2, kdim=None, vdim=None, bias=True, add_bias_kv=False,
            add_zero_attn=False, batch_first=True, unbatched=False, need_weights=True, average=True,
            causal=False, key_padding=None, attn_mask=None, fully_masked_batch=None, dtype="F32",
            metadata=True, cli=True, seed=0):
    """key_padding: None or "bool"; attn_mask: None or ("bool"|"float", 2|3)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cross = S is not None or kdim is not None or vdim is not None
    S = S if S is not None else L
    m = nn.MultiheadAttention(E, H, bias=bias, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                              kdim=kdim, vdim=vdim, batch_first=batch_first)
    with torch.no_grad():  # PyTorch zeroes the biases at init; draw them so the tests see them
        for pname, p in m.named_parameters():
            if pname in ("in_proj_bias", "out_proj.bias"):
                p.uniform_(-0.5, 0.5, generator=gen)
            p.copy_(stored(p, dtype))
    m.eval()

    def draw(*shape):
        return stored(torch.rand(shape, generator=gen) * 2 - 1, dtype)

    def layout(b, t, c):  # PyTorch's input layout for this fixture
        if unbatched:
            return (t, c)
        return (b, t, c) if batch_first else (t, b, c)

    query = draw(*layout(B, L, E))
    key = draw(*layout(B, S, kdim or E)) if cross else query
    value = draw(*layout(B, S, vdim or E)) if cross else query

    inputs = {"query": query}
    if cross:
        inputs.update(key=key, value=value)
    kpm = None
    if key_padding == "bool":
        kpm = random_bool_mask((S,) if unbatched else (B, S), 0.4, gen)
        if causal:
            kpm[..., 0] = False  # query 0 sees only key 0 under the causal mask
    if fully_masked_batch is not None:
        kpm = torch.zeros((B, S), dtype=torch.bool) if kpm is None else kpm
        kpm[fully_masked_batch, :] = True
    if kpm is not None:
        inputs["key_padding_mask"] = kpm
    mask = None
    if attn_mask is not None:
        kind, rank = attn_mask
        shape = (L, S) if rank == 2 else (B * H, L, S)
        mask = random_bool_mask(shape, 0.4, gen) if kind == "bool" else random_float_mask(shape, gen)
        inputs["attn_mask"] = mask
    torch_mask = mask
    if causal:
        torch_mask = torch.ones(L, S, dtype=torch.bool).triu(1)
        assert mask is None, "causal fixtures take no attn_mask"

    m64 = copy.deepcopy(m).double()

    def f64(t):
        return None if t is None else (t.double() if t.is_floating_point() else t)

    out, weights = m64(f64(query), f64(key), f64(value), key_padding_mask=kpm, need_weights=need_weights,
                       attn_mask=f64(torch_mask), average_attn_weights=average)
    out = out.detach().float()
    weights = None if weights is None else weights.detach().float()
    patched = False
    if torch.isnan(out).any() or (weights is not None and torch.isnan(weights).any()):
        assert fully_masked_batch is not None, f"{name}: NaN without a fully masked row"
        b = fully_masked_batch
        ob = out[b] if batch_first else out[:, b]
        ob[...] = m.out_proj.bias.detach() if bias else 0.0  # zero weights: P·V = 0, output = bias
        if weights is not None:
            weights[b] = 0.0
        assert not torch.isnan(out).any() and (weights is None or not torch.isnan(weights).any())
        patched = True

    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    save_safetensors(m.state_dict(), folder / "weights.safetensors",
                     {"num_heads": str(H)} if metadata else None, dtype)
    for iname, t in inputs.items():
        if t.dtype == torch.bool:
            np.save(folder / f"{iname}.npy", t.numpy())
        else:
            np.save(folder / f"{iname}.npy", t.numpy().astype("<f2" if dtype == "F16" else "<f4"))
    np.save(folder / "expected_output.npy", out.numpy())
    if weights is not None:
        np.save(folder / "expected_weights.npy", weights.numpy())
    config = {
        "num_heads": H, "metadata": metadata, "batch_first": batch_first, "unbatched": unbatched,
        "add_zero_attn": add_zero_attn, "need_weights": need_weights, "average_attn_weights": average,
        "is_causal": causal, "fully_masked_rows_patched": patched, "cli": cli,
        "inputs": sorted(inputs), "torch": torch.__version__,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    print(f"{name:28} out {tuple(out.shape)}" + ("" if weights is None else f" weights {tuple(weights.shape)}"))


def main():
    for old in HERE.iterdir():
        if old.is_dir():
            shutil.rmtree(old)
    fixture("self_attention")
    fixture("cross_attention", L=3, S=7, seed=1)
    fixture("kdim_vdim", L=4, S=6, E=12, H=3, kdim=5, vdim=7, average=False, seed=2)
    fixture("no_bias", E=8, H=4, bias=False, need_weights=False, seed=3)
    fixture("causal", L=6, seed=4)
    fixture("causal_cross", L=4, S=7, causal=True, seed=5)
    fixture("key_padding_mask", B=3, L=4, S=5, key_padding="bool", seed=6)
    fixture("attn_mask_bool_2d", attn_mask=("bool", 2), seed=7)
    fixture("attn_mask_float_2d", L=4, S=6, attn_mask=("float", 2), seed=8)
    fixture("attn_mask_bool_3d", L=4, S=6, attn_mask=("bool", 3), seed=9)
    fixture("attn_mask_float_3d", attn_mask=("float", 3), key_padding="bool", seed=10)
    fixture("per_head_weights", H=4, average=False, seed=11)
    fixture("causal_padding_per_head", B=3, L=6, E=16, H=4, causal=True, key_padding="bool", average=False, seed=12)
    fixture("add_bias_kv", L=4, S=6, add_bias_kv=True, key_padding="bool", attn_mask=("float", 2), seed=13)
    fixture("add_zero_attn", L=4, S=6, add_zero_attn=True, key_padding="bool", attn_mask=("bool", 3), cli=False,
            seed=14)
    fixture("add_bias_kv_zero_attn", add_bias_kv=True, add_zero_attn=True, average=False, cli=False, seed=15)
    fixture("batch_first_false", B=3, L=4, S=5, batch_first=False, key_padding="bool", cli=False, seed=16)
    fixture("unbatched", L=5, S=7, H=2, unbatched=True, key_padding="bool", seed=17)
    fixture("unbatched_per_head", L=4, unbatched=True, average=False, cli=False, seed=18)
    fixture("one_head", H=1, metadata=False, seed=19)
    fixture("single_query", L=1, S=9, E=12, H=3, seed=20)
    fixture("single_query_single_key", B=1, L=1, S=1, E=4, H=2, seed=21)
    fixture("fully_masked_row", B=3, L=4, key_padding="bool", fully_masked_batch=1, seed=22)
    fixture("awkward_sizes", B=3, L=17, S=113, E=24, H=6, kdim=17, vdim=3, attn_mask=("float", 3),
            key_padding="bool", seed=23)
    fixture("float16_weights", dtype="F16", seed=24)
    fixture("bfloat16_weights", L=6, S=3, dtype="BF16", causal=True, seed=25)


if __name__ == "__main__":
    main()
