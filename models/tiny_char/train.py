#!/usr/bin/python3
"""Trains the tiny character-level language model that `vkattn generate` ships with.

    /usr/bin/python3 models/tiny_char/train.py      # Debian's python3 and python3-torch

The text is the opening of Lewis Carroll's "Alice's Adventures in Wonderland" (1865, in the
public domain): text.txt. The model is a CausalLM in vkattn's names (include/vkattn/modules/
causal_lm.h): token and position embeddings, two pre-norm decoder-only blocks
(nn.TransformerEncoderLayer with a causal mask: E 64, 4 heads, feed-forward 256, GELU), a final
LayerNorm and the LM head. About 110 k parameters: model.safetensors is under 0.5 MiB. Training
(800 steps of 16 windows of 128 characters, every position trained) takes about a minute on 2 cores.

It also writes expected.json: torch's greedy continuation of a prompt, token by token, with the
smallest gap between the best and second-best logit on the way (a tie would make any other
implementation's greedy choice differ honestly). vkattn's tests hold `vkattn generate` to it.
"""
import json
import pathlib
import sys
import time

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "golden"))
from generate import save_safetensors  # noqa: E402  the numpy-only safetensors writer

E, HEADS, FF, LAYERS, POSITIONS = 64, 4, 256, 2, 128
PROMPT, NEW_TOKENS = "Alice was", 110


class CausalLM(nn.Module):
    """vkattn's CausalLM in torch (bench/decoding_torch.py builds a larger one)."""

    def __init__(self, vocab, embed=E, heads=HEADS, feedforward=FF, layers=LAYERS, positions=POSITIONS):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, embed)
        self.position_embedding = nn.Embedding(positions, embed)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(embed, heads, feedforward, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(layers))
        self.norm = nn.LayerNorm(embed)
        self.lm_head = nn.Linear(embed, vocab)

    def forward(self, ids):  # (B, T) -> logits (B, T, V)
        T = ids.shape[1]
        x = self.token_embedding(ids) + self.position_embedding(torch.arange(T))
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        for layer in self.layers:
            x = layer(x, src_mask=causal)
        return self.lm_head(self.norm(x))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    text = (HERE / "text.txt").read_text()
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text])
    model = CausalLM(len(vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    start, step, batch, length = time.time(), 0, 16, POSITIONS
    while step < 800:
        starts = torch.randint(0, len(ids) - length - 1, (batch,))
        x = torch.stack([ids[s:s + length] for s in starts])
        y = torch.stack([ids[s + 1:s + length + 1] for s in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(-1, len(vocab)), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - start:5.1f} s", flush=True)

    model.eval()
    state = model.state_dict()
    metadata = {"num_heads": str(HEADS), "activation": "gelu", "norm_first": "true", "layer_norm_eps": "1e-05",
                "vocab": "".join(vocab)}
    save_safetensors(state, HERE / "model.safetensors", metadata)

    tokens = [vocab.index(c) for c in PROMPT]
    margins = []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([tokens]))[0, -1]
            top = torch.topk(logits, 2).values
            margins.append((top[0] - top[1]).item())
            tokens.append(int(torch.argmax(logits)))
    expected = {"prompt": PROMPT, "new_tokens": NEW_TOKENS, "tokens": tokens[len(PROMPT):],
                "text": "".join(vocab[t] for t in tokens[len(PROMPT):]), "smallest_margin": min(margins),
                "steps": step, "final_loss": round(loss.item(), 4), "torch": torch.__version__}
    (HERE / "expected.json").write_text(json.dumps(expected) + "\n")
    print(f"{step} steps in {time.time() - start:.1f} s, loss {loss.item():.3f}; greedy after {PROMPT!r}:")
    print(PROMPT + expected["text"])
    print(f"smallest top-1 margin {min(margins):.4f}")


if __name__ == "__main__":
    main()
