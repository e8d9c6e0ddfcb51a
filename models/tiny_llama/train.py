#!/usr/bin/python3
"""Trains tiny_llama, a Llama-architecture model saved exactly as the Hugging Face hub saves
LlamaForCausalLM — BF16 weights, as most Llama checkpoints are — for vkattn's tests and for
`vkattn generate --model models/tiny_llama`.

    /usr/bin/python3 models/tiny_llama/train.py      # Debian's python3 and python3-torch

The architecture is Llama's, written here from its definition (transformers is not a Debian
package): RMSNorm before attention and before the MLP, grouped-query attention (4 query heads
sharing 2 key/value heads) with RoPE in Hugging Face's rotate_half order, SwiGLU
(down(silu(gate(x)) · up(x))), a final RMSNorm and an untied lm_head; E 64, 2 layers,
intermediate 172, 128 positions. The text and the tokenizer are tiny_gpt2's (the opening of
*Alice*, 256 byte-level BPE merges), here as one tokenizer.json, the file Llama 3's and most
recent checkpoints carry. 500 steps take under a minute on 2 cores.

It writes, as save_pretrained does: config.json, model.safetensors ("model.layers.0.self_attn.
q_proj.weight", …, "lm_head.weight"; BF16), tokenizer.json; and expected.json: the prompt's ids,
torch's logits at its last position and its greedy tokens — computed in float32 from the weights
as stored (rounded to bfloat16), so that vkattn, which widens them exactly, is held to 1e-4.
"""
import importlib.util
import json
import math
import pathlib
import time

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tiny_gpt2_train", HERE.parent / "tiny_gpt2" / "train.py")
gpt2 = importlib.util.module_from_spec(_spec)  # its text, tokenizer and safetensors writer
_spec.loader.exec_module(gpt2)

E, HEADS, KV_HEADS, LAYERS, FF, POSITIONS, THETA, EPS = 64, 4, 2, 2, 172, 128, 10000.0, 1e-5
D = E // HEADS


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(E))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate_half(x):
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(x, positions):  # x (B, H, T, d), Hugging Face's apply_rotary_pos_emb
    inv_freq = 1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(E, HEADS * D, bias=False)
        self.k_proj = nn.Linear(E, KV_HEADS * D, bias=False)
        self.v_proj = nn.Linear(E, KV_HEADS * D, bias=False)
        self.o_proj = nn.Linear(HEADS * D, E, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, HEADS, D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV_HEADS, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV_HEADS, D).transpose(1, 2)
        positions = torch.arange(T)
        q, k = rope(q, positions), rope(k, positions)
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))  # repeat_kv
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return self.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, HEADS * D))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(E, FF, bias=False)
        self.up_proj = nn.Linear(E, FF, bias=False)
        self.down_proj = nn.Linear(FF, E, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.self_attn = RMSNorm(), Attention()
        self.post_attention_layernorm, self.mlp = RMSNorm(), MLP()

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, E)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm()

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.model = LlamaModel(vocab_size)
        self.lm_head = nn.Linear(E, vocab_size, bias=False)

    def forward(self, ids):  # (B, T) -> logits (B, T, V)
        return self.lm_head(self.model(ids))


def tokenizer_json(vocab, merges, end):
    """tokenizers' one file for a byte-level BPE: GPT-2's algorithm, as Llama 3's file holds it."""
    regular = {t: i for t, i in vocab.items() if t != end}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": vocab[end], "content": end, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": regular, "merges": [f"{a} {b}" for a, b in merges]}}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    start = time.time()
    text = (HERE.parent / "tiny_char" / "text.txt").read_text()
    vocab, merges, ranks = gpt2.tokenizer(text)
    ids = torch.tensor(gpt2.encode(text, vocab, ranks))

    model = LlamaForCausalLM(len(vocab))
    loss = gpt2.train(model, ids, len(vocab), 500, start)
    with torch.no_grad():  # the weights as stored: bfloat16
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
              "attention_dropout": 0.0, "bos_token_id": vocab[gpt2.END], "eos_token_id": vocab[gpt2.END],
              "hidden_act": "silu", "hidden_size": E, "initializer_range": 0.02, "intermediate_size": FF,
              "max_position_embeddings": POSITIONS, "mlp_bias": False, "num_attention_heads": HEADS,
              "num_hidden_layers": LAYERS, "num_key_value_heads": KV_HEADS, "rms_norm_eps": EPS,
              "rope_scaling": None, "rope_theta": THETA, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "vocab_size": len(vocab)}
    (HERE / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gpt2.save_safetensors(model.state_dict(), HERE / "model.safetensors", {"format": "pt"}, dtype="BF16")
    (HERE / "tokenizer.json").write_text(json.dumps(tokenizer_json(vocab, merges, gpt2.END), ensure_ascii=False) + "\n")
    gpt2.write_expected(HERE, model, vocab, ranks, 500, loss, start)


if __name__ == "__main__":
    main()
