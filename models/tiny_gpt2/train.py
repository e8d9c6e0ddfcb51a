#!/usr/bin/python3
"""Trains tiny_gpt2, the GPT-2 that `vkattn generate --model models/tiny_gpt2` ships with, and
saves it exactly as the Hugging Face hub saves GPT-2 — so that the real `gpt2` folder goes through
the same code.

    /usr/bin/python3 models/tiny_gpt2/train.py      # Debian's python3 and python3-torch

The text is the opening of "Alice's Adventures in Wonderland" (1865, public domain:
models/tiny_char/text.txt). The tokenizer is GPT-2's algorithm — byte-level BPE over GPT-2's
pre-tokens — with its own 256 merges learnt here from that text (GPT-2 learnt 50 000 from 8 M web
pages). The model is GPT-2's architecture (GPT2LMHeadModel, written here from its definition:
transformers is not a Debian package) at E 64, 4 heads, 2 layers, 128 positions: about 130 k
parameters. 600 steps take about a minute on 2 cores.

It writes, as `save_pretrained` does:
  config.json        GPT-2's config (architectures, model_type, n_embd, n_head, …)
  model.safetensors  GPT2LMHeadModel's state_dict ("transformer.h.0.attn.c_attn.weight", …; Conv1D
                     weights stored (in, out); lm_head tied to wte, so not stored), F32
  vocab.json, merges.txt   the tokenizer, as GPT-2's
and expected.json for vkattn's tests: the prompt's ids, torch's logits at its last position, and
torch's greedy continuation token by token with the smallest top-1 margin on the way.
"""
import collections
import json
import math
import pathlib
import re
import sys
import time

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "golden"))
from generate import save_safetensors  # noqa: E402  the numpy-only safetensors writer

E, HEADS, LAYERS, POSITIONS, MERGES = 64, 4, 2, 128, 256
PROMPT, NEW_TOKENS = "Alice was beginning", 40
END = "<|endoftext|>"

# GPT-2's pre-tokenizer pattern with Python's re (no \p{L}): letters [^\W\d_], numbers \d. The
# same pieces on this ASCII text; vkattn's tokenizer uses Unicode's classes.
PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's printable stand-in for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


STAND_IN = bytes_to_unicode()


def words(text):
    return ["".join(STAND_IN[b] for b in piece.encode()) for piece in PIECES.findall(text)]


def learn_merges(text, count):
    """Byte-level BPE training: merge the most frequent adjacent pair, `count` times."""
    corpus = collections.Counter(tuple(w) for w in words(text))
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for word, n in corpus.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))  # ties: the larger pair, reproducibly
        merges.append(best)
        merged = collections.Counter()
        for word, n in corpus.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        corpus = merged
    return merges


def encode(text, vocab, ranks):
    """GPT-2's bpe(): merge the lowest-ranked pair until none is left."""
    ids = []
    for word in words(text):
        symbols = list(word)
        while len(symbols) > 1:
            ranked = [(ranks.get(p, math.inf), i) for i, p in enumerate(zip(symbols, symbols[1:]))]
            rank, _ = min(ranked)
            if rank == math.inf:
                break
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and ranks.get((symbols[i], symbols[i + 1])) == rank:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            symbols = out
        ids += [vocab[s] for s in symbols]
    return ids


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored (in, out), y = x · W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = Conv1D(E, 3 * E)  # q, k, v side by side
        self.c_proj = Conv1D(E, E)

    def forward(self, x):  # (B, T, E)
        B, T, _ = x.shape
        q, k, v = self.c_attn(x).split(E, dim=2)
        q, k, v = (t.view(B, T, HEADS, E // HEADS).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(E // HEADS)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, E)
        return self.c_proj(y)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(E, 4 * E)
        self.c_proj = Conv1D(4 * E, E)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(E), Attention(), nn.LayerNorm(E), MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, E), nn.Embedding(POSITIONS, E)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(E)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.transformer = GPT2Model(vocab_size)

    def forward(self, ids):  # (B, T) -> logits (B, T, V), the head tied to wte
        return self.transformer(ids) @ self.transformer.wte.weight.T


def tokenizer(text):
    """GPT-2's byte-level BPE learnt on `text`: (vocab, merges, ranks), the vocabulary in GPT-2's
    order (the 256 byte stand-ins, printable bytes first, then a token a merge, then END)."""
    merges = learn_merges(text, MERGES)
    vocab = {s: i for i, s in enumerate(STAND_IN.values())}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab[END] = len(vocab)
    return vocab, merges, {pair: rank for rank, pair in enumerate(merges)}


def train(model, ids, vocab_size, steps, start):
    """AdamW at 3e-3 on 16 random windows of 64 tokens a step, every position trained; the last
    step's loss. Leaves the model in eval mode."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch, length = 16, 64
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(ids) - length - 1, (batch,))
        x = torch.stack([ids[s:s + length] for s in starts])
        y = torch.stack([ids[s + 1:s + length + 1] for s in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab_size), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - start:5.1f} s", flush=True)
    model.eval()
    return loss.item()


def write_expected(folder, model, vocab, ranks, steps, loss, start):
    """expected.json for vkattn's tests: the prompt's ids, torch's logits at its last position,
    its greedy tokens one by one with the smallest top-1 margin on the way."""
    prompt = encode(PROMPT, vocab, ranks)
    tokens, margins = list(prompt), []
    with torch.no_grad():
        last_logits = model(torch.tensor([prompt]))[0, -1]
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([tokens]))[0, -1]
            top = torch.topk(logits, 2).values
            margins.append((top[0] - top[1]).item())
            tokens.append(int(torch.argmax(logits)))
    inverse = {i: s for s, i in vocab.items()}
    byte_of = {c: b for b, c in STAND_IN.items()}
    continuation = bytes(byte_of[c] for t in tokens[len(prompt):] for c in inverse[t]).decode()
    expected = {"prompt": PROMPT, "prompt_ids": prompt, "last_logits": [round(v, 6) for v in last_logits.tolist()],
                "new_tokens": NEW_TOKENS, "tokens": tokens[len(prompt):], "text": continuation,
                "smallest_margin": min(margins), "steps": steps, "final_loss": round(loss, 4),
                "torch": torch.__version__}
    (folder / "expected.json").write_text(json.dumps(expected) + "\n")
    print(f"{steps} steps in {time.time() - start:.1f} s, loss {loss:.3f}; greedy after {PROMPT!r}:")
    print(PROMPT + continuation)
    print(f"smallest top-1 margin {min(margins):.4f}")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    start = time.time()
    text = (HERE.parent / "tiny_char" / "text.txt").read_text()
    vocab, merges, ranks = tokenizer(text)
    ids = torch.tensor(encode(text, vocab, ranks))
    print(f"{len(merges)} merges, {len(vocab)} tokens: {len(text)} characters are {len(ids)} tokens "
          f"({time.time() - start:.1f} s)", flush=True)

    model = GPT2LMHeadModel(len(vocab))
    loss = train(model, ids, len(vocab), 600, start)

    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "bos_token_id": vocab[END], "eos_token_id": vocab[END], "initializer_range": 0.02,
              "layer_norm_epsilon": 1e-05, "n_ctx": POSITIONS, "n_embd": E, "n_head": HEADS, "n_inner": None,
              "n_layer": LAYERS, "n_positions": POSITIONS, "vocab_size": len(vocab), "torch_dtype": "float32"}
    (HERE / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_safetensors(model.state_dict(), HERE / "model.safetensors", {"format": "pt"})
    (HERE / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n")
    (HERE / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    write_expected(HERE, model, vocab, ranks, 600, loss, start)


if __name__ == "__main__":
    main()
