#!/usr/bin/python3
"""Writes the PyTorch golden fixtures of the encoder: nn.TransformerEncoderLayer, nn.TransformerEncoder
and the SimpleTransformer classifier of ../shared/articles/04-self-attention-in-pytorch.txt, which
tests/modules/test_encoder.cpp, tests/tools/cli_test.sh and the simple_transformer example check.

Run it from anywhere with Debian's python3-torch and python3-numpy:
    /usr/bin/python3 tests/golden_encoder/generate.py
The fixtures are committed; neither CI nor the tests need PyTorch.

An encoder fixture is a folder tests/golden_encoder/<name>/ holding
    weights.safetensors   the module's state_dict, __metadata__ {"num_heads": "H"}
    src.npy               float32 (B, L, E) batch-first, or (L, E) unbatched
    [src_key_padding_mask.npy]  bool (B, L), True = padding
    expected_output.npy   float32, like src
    config.json           what the state_dict cannot say (activation, norm_first, eps, causal)
Weights and inputs are drawn in float32; the expected output is computed in float64 from exactly
those values and then stored as float32. Each expected output is also checked here against the
encoder written out from its definition (`by_definition`), so a torch fast path cannot slip in.

Deliberate differences from PyTorch 1.13 (DESIGN.md), applied here and recorded in config.json:
  * is_causal: torch 1.13's TransformerEncoder has no is_causal; it gets the equivalent bool
    mask (True above the diagonal) while vkattn gets is_causal.
  * padded positions: the modules are built with enable_nested_tensor=False. With it, torch's
    eval fast path returns 0 at every padded position; vkattn computes them like any other (a
    padded query still attends to the unpadded keys), as torch's standard path does.
  * LayerNorm weights are drawn (1 ± 0.25, ± 0.25) rather than torch's ones and zeros, so that
    a test sees them.
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


def perturb_norms(module, gen):
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            with torch.no_grad():
                m.weight.copy_(1 + (torch.rand(m.weight.shape, generator=gen) - 0.5) * 0.5)
                m.bias.copy_((torch.rand(m.bias.shape, generator=gen) - 0.5) * 0.5)


def by_definition(x, sd, prefix, nhead, activation, norm_first, eps, key_padding, causal):
    """One TransformerEncoderLayer from torch's definition, in float64, batch-first x (B, L, E)."""
    B, L, E = x.shape
    d = E // nhead
    w = lambda name: sd[prefix + name]  # noqa: E731

    def attention(h):
        q, k, v = (h @ w("self_attn.in_proj_weight").T + w("self_attn.in_proj_bias")).split(E, dim=-1)
        split = lambda t: t.view(B, L, nhead, d).transpose(1, 2)  # noqa: E731
        scores = split(q) @ split(k).transpose(-1, -2) / d ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        if key_padding is not None:
            scores = scores.masked_fill(key_padding[:, None, None, :], float("-inf"))
        heads = scores.softmax(-1) @ split(v)
        merged = heads.transpose(1, 2).reshape(B, L, E)
        return merged @ w("self_attn.out_proj.weight").T + w("self_attn.out_proj.bias")

    def ffn(h):
        hidden = h @ w("linear1.weight").T + w("linear1.bias")
        hidden = F.gelu(hidden) if activation == "gelu" else F.relu(hidden)
        return hidden @ w("linear2.weight").T + w("linear2.bias")

    def norm(h, name):
        return F.layer_norm(h, (E,), w(name + ".weight"), w(name + ".bias"), eps)

    if norm_first:
        x = x + attention(norm(x, "norm1"))
        return x + ffn(norm(x, "norm2"))
    x = norm(x + attention(x), "norm1")
    return norm(x + ffn(x), "norm2")


def encoder_fixture(name, *, layers, E, H, F_, B=2, L=5, activation="relu", norm_first=False, eps=1e-5,
                    final_norm=False, padding=False, causal=False, unbatched=False, seed=0):
    """layers=0: a single nn.TransformerEncoderLayer; otherwise nn.TransformerEncoder of `layers`."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=F_, dropout=0.1, activation=activation,
                                       layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
    if layers == 0:
        module = layer
    else:
        norm = nn.LayerNorm(E, eps=eps) if final_norm else None
        module = nn.TransformerEncoder(layer, layers, norm=norm, enable_nested_tensor=False)
    perturb_norms(module, gen)
    module.eval()

    src = torch.randn(B, L, E, generator=gen)
    key_padding = None
    if padding:  # right padding: item b keeps L - b·(L // (B + 1)) positions, at least one
        key_padding = torch.zeros(B, L, dtype=torch.bool)
        for b in range(B):
            key_padding[b, max(1, L - b * max(1, L // (B + 1))):] = True
    mask = torch.ones(L, L, dtype=torch.bool).triu(1) if causal else None

    m64 = module.double()
    with torch.no_grad():
        x = src.double()
        mask_kw = {"src_mask" if layers == 0 else "mask": mask}  # the layer and the encoder name it differently
        if unbatched:
            out = m64(x[0], **mask_kw)
        else:
            out = m64(x, src_key_padding_mask=key_padding, **mask_kw)
        # the same from the definition, layer by layer
        sd = {k: v.double() for k, v in m64.state_dict().items()}
        prefixes = [""] if layers == 0 else [f"layers.{i}." for i in range(layers)]
        ref = x[:1] if unbatched else x
        for prefix in prefixes:
            ref = by_definition(ref, sd, prefix, H, activation, norm_first, eps, None if unbatched else key_padding,
                                causal)
        if final_norm:
            ref = F.layer_norm(ref, (E,), sd["norm.weight"], sd["norm.bias"], eps)
        if unbatched:
            ref = ref[0]
        assert torch.allclose(out, ref, atol=1e-10), f"{name}: torch and the definition differ by {(out - ref).abs().max()}"

    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    state = {k: v.float() for k, v in m64.state_dict().items()}
    save_safetensors(state, folder / "weights.safetensors", {"num_heads": str(H)})
    np.save(folder / "src.npy", (src[0] if unbatched else src).numpy().astype("<f4"))
    if key_padding is not None:
        np.save(folder / "src_key_padding_mask.npy", key_padding.numpy())
    np.save(folder / "expected_output.npy", out.numpy().astype("<f4"))
    config = {"module": "TransformerEncoderLayer" if layers == 0 else "TransformerEncoder",
              "num_layers": max(1, layers), "nhead": H, "dim_feedforward": F_, "activation": activation,
              "norm_first": norm_first, "layer_norm_eps": eps, "final_norm": final_norm, "is_causal": causal,
              "unbatched": unbatched}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


# ---- the article's SimpleTransformer, verbatim but for formatting -----------------------------------
class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.1):
        super().__init__()
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.W_q = nn.Linear(embed_dim, embed_dim)
        self.W_k = nn.Linear(embed_dim, embed_dim)
        self.W_v = nn.Linear(embed_dim, embed_dim)
        self.W_o = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        B, T, C = x.shape
        Q = self.W_q(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        K = self.W_k(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        V = self.W_v(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        scores = (Q @ K.transpose(-2, -1)) / (self.head_dim ** 0.5)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float('-inf'))
        attn_weights = self.dropout(torch.softmax(scores, dim=-1))
        attn_output = (attn_weights @ V).transpose(1, 2).contiguous().view(B, T, C)
        return self.W_o(attn_output), attn_weights


class TransformerEncoderBlock(nn.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, dropout=0.1):
        super().__init__()
        self.attention = MultiHeadAttention(embed_dim, num_heads, dropout)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.ff = nn.Sequential(nn.Linear(embed_dim, ff_dim), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(ff_dim, embed_dim), nn.Dropout(dropout))

    def forward(self, x):
        attn_out, _ = self.attention(x)
        x = self.norm1(x + attn_out)
        return self.norm2(x + self.ff(x))


class SimpleTransformer(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_heads, num_layers, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.pos_encoding = nn.Parameter(torch.randn(1, 512, embed_dim))
        self.blocks = nn.ModuleList([TransformerEncoderBlock(embed_dim, num_heads, embed_dim * 4)
                                     for _ in range(num_layers)])
        self.classifier = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        B, T = x.shape
        x = self.embedding(x) + self.pos_encoding[:, :T, :]
        for block in self.blocks:
            x = block(x)
        x = x.mean(dim=1)
        return self.classifier(x)


def simple_transformer_fixture(name, *, vocab, E, H, layers, classes, B, T, seed=0):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = SimpleTransformer(vocab, E, H, layers, classes)
    perturb_norms(model, gen)
    model.eval()
    tokens = torch.randint(0, vocab, (B, T), generator=gen)
    tokens[0, 0], tokens[-1, -1] = 0, vocab - 1  # both ends of the table
    with torch.no_grad():
        logits = model.double()(tokens)
    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    save_safetensors({k: v.float() for k, v in model.state_dict().items()}, folder / "weights.safetensors",
                     {"num_heads": str(H)})
    np.save(folder / "tokens.npy", tokens.numpy().astype("<i8"))
    np.save(folder / "expected_logits.npy", logits.numpy().astype("<f4"))
    config = {"module": "SimpleTransformer", "vocab_size": vocab, "embed_dim": E, "num_heads": H,
              "num_layers": layers, "num_classes": classes}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def main():
    torch.set_grad_enabled(False)
    encoder_fixture("layer_post_relu", layers=0, E=16, H=4, F_=24)
    encoder_fixture("layer_pre_gelu_padding", layers=0, E=12, H=3, F_=20, B=3, L=7, activation="gelu",
                    norm_first=True, padding=True, seed=1)
    encoder_fixture("encoder2_post_gelu_norm_padding", layers=2, E=16, H=2, F_=32, B=2, L=6, activation="gelu",
                    final_norm=True, padding=True, seed=2)
    encoder_fixture("encoder3_pre_relu_causal_eps", layers=3, E=8, H=2, F_=12, B=2, L=5, norm_first=True,
                    eps=1e-6, causal=True, seed=3)
    encoder_fixture("encoder1_post_relu_norm_awkward", layers=1, E=20, H=5, F_=17, B=1, L=17, final_norm=True,
                    padding=True, causal=True, seed=4)
    encoder_fixture("encoder2_pre_gelu_norm_unbatched", layers=2, E=12, H=4, F_=9, B=1, L=9, activation="gelu",
                    norm_first=True, final_norm=True, unbatched=True, seed=5)
    simple_transformer_fixture("simple_transformer", vocab=50, E=16, H=4, layers=2, classes=3, B=3, T=7)


if __name__ == "__main__":
    main()
