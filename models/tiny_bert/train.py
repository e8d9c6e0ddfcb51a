#!/usr/bin/python3
"""Trains tiny_bert, a BERT-architecture encoder saved exactly as the Hugging Face hub saves
bert-base-uncased (BertForMaskedLM: the encoder and pooler under "bert.", the masked-LM head under
"cls."; F16 weights), for vkattn's tests and for `vkattn run --model models/tiny_bert --text …`.

    /usr/bin/python3 models/tiny_bert/train.py      # Debian's python3 and python3-torch

The architecture is BERT's, written here from its definition (transformers is not a Debian
package): word + token-type + position embeddings and a LayerNorm; post-norm layers
(LayerNorm(x + attention(x)), LayerNorm(x + output(gelu(intermediate(x))))) with the exact gelu;
padding as -finfo.min added to the scores of padded keys; the pooler tanh(dense(x[:, 0])). E 64,
4 heads, 2 layers, intermediate 256, 64 positions, 2 token types. Its WordPiece vocabulary is
uncased: the special tokens, every character of the text alone and as "##c", and the 200
commonest words of the opening of *Alice*, on which it learns to fill in masked words (masked LM,
300 steps, half a minute on 2 cores).

It writes config.json, model.safetensors, vocab.txt, tokenizer_config.json ({"do_lower_case":
true}) and expected.json: for two texts batched with padding, and for a pair of sentences with
their token types, the ids, torch's last_hidden_state and pooler_output — computed in float32
from the weights as stored (rounded to float16), so that vkattn, which widens them exactly, is
held to 1e-4. The ids come from a WordPiece written here for ASCII text, independent of vkattn's.
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

E, HEADS, LAYERS, FF, POSITIONS, TYPES, EPS, WORDS = 64, 4, 2, 256, 64, 2, 1e-12, 200
D = E // HEADS
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TEXTS = ["Alice was beginning to get very tired of sitting by her sister.",
         "The White Rabbit ran close by her!"]
PAIR = ("Down the rabbit-hole.", "Alice felt a little sleepy.")


def words(text):
    """BERT's basic tokenizer on ASCII text: lowercased, split at whitespace and at each
    punctuation mark (a word of its own)."""
    return re.findall(r"[a-z0-9]+|[^a-z0-9\s]", text.lower())


def word_pieces(word, vocab):
    """The longest vocabulary token from the start, then "##" pieces; [UNK] when none fits."""
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(vocab[piece])
                start = end
                break
        else:
            return [vocab["[UNK]"]]
    return pieces


def encode(text, vocab):
    return [vocab["[CLS]"]] + [i for w in words(text) for i in word_pieces(w, vocab)] + [vocab["[SEP]"]]


def make_vocab(text):
    chars = sorted(set(c for w in words(text) for c in w))
    common = [w for w, _ in collections.Counter(words(text)).most_common() if len(w) > 1][:WORDS]
    tokens = SPECIAL + chars + ["##" + c for c in chars if c.isalnum()] + common
    return {t: i for i, t in enumerate(tokens)}


class Module(nn.Module):  # a namespace of submodules, for Hugging Face's names
    def __init__(*args, **children):
        self = args[0]  # "self" is also a child's name (attention.self)
        super(Module, self).__init__()
        for name, child in children.items():
            setattr(self, name, child)


def layer():
    return Module(attention=Module(self=Module(query=nn.Linear(E, E), key=nn.Linear(E, E), value=nn.Linear(E, E)),
                                   output=Module(dense=nn.Linear(E, E), LayerNorm=nn.LayerNorm(E, eps=EPS))),
                  intermediate=Module(dense=nn.Linear(E, FF)),
                  output=Module(dense=nn.Linear(FF, E), LayerNorm=nn.LayerNorm(E, eps=EPS)))


class BertModel(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.embeddings = Module(word_embeddings=nn.Embedding(vocab_size, E),
                                 position_embeddings=nn.Embedding(POSITIONS, E),
                                 token_type_embeddings=nn.Embedding(TYPES, E), LayerNorm=nn.LayerNorm(E, eps=EPS))
        self.encoder = Module(layer=nn.ModuleList([layer() for _ in range(LAYERS)]))
        self.pooler = Module(dense=nn.Linear(E, E))

    def forward(self, ids, types, mask, positions=None):
        """ids, types (B, T) int64, mask (B, T) 1 = a token -> last_hidden_state (B, T, E), pooled (B, E);
        positions (B, T) the rows of position_embeddings (RoBERTa's), 0 … T-1 when None (BERT's)"""
        B, T = ids.shape
        e = self.embeddings
        x = e.word_embeddings(ids) + e.token_type_embeddings(types)
        x = e.LayerNorm(x + e.position_embeddings(torch.arange(T) if positions is None else positions))
        added = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for l in self.encoder.layer:
            s = l.attention.self
            q, k, v = (p(x).view(B, T, HEADS, D).transpose(1, 2) for p in (s.query, s.key, s.value))
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + added, dim=-1)
            context = (p @ v).transpose(1, 2).reshape(B, T, E)
            x = l.attention.output.LayerNorm(x + l.attention.output.dense(context))
            h = nn.functional.gelu(l.intermediate.dense(x))
            x = l.output.LayerNorm(x + l.output.dense(h))
        return x, torch.tanh(self.pooler.dense(x[:, 0]))


class BertForMaskedLM(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.bert = BertModel(vocab_size)
        self.cls = Module(predictions=Module(transform=Module(dense=nn.Linear(E, E),
                                                              LayerNorm=nn.LayerNorm(E, eps=EPS))))
        self.cls.predictions.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, ids):  # masked-LM logits (B, T, V), the decoder tied to word_embeddings
        x, _ = self.bert(ids, torch.zeros_like(ids), torch.ones_like(ids))
        t = self.cls.predictions.transform
        h = t.LayerNorm(nn.functional.gelu(t.dense(x)))
        return h @ self.bert.embeddings.word_embeddings.weight.T + self.cls.predictions.bias


def train(model, ids, vocab, steps, start):
    """AdamW at 2e-3 on 32 windows of 32 tokens a step, 15 % of them masked and predicted."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    batch, length = 32, 32
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(ids) - length, (batch,))
        y = torch.stack([ids[s:s + length] for s in starts])
        masked = torch.rand(y.shape) < 0.15
        x = torch.where(masked, torch.full_like(y, vocab["[MASK]"]), y)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits[masked], y[masked])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step:5d}  masked-LM loss {loss.item():.3f}  {time.time() - start:5.1f} s", flush=True)
    model.eval()
    return loss.item()


def stored(model):
    """The model with its weights rounded to float16, as the file stores them."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    return model


def expected_case(model, ids, types, mask):
    with torch.no_grad():
        hidden, pooled = model.bert(torch.tensor(ids), torch.tensor(types), torch.tensor(mask))
    return {"ids": ids, "token_type_ids": types, "attention_mask": mask,
            "last_hidden_state": [round(v, 6) for v in hidden.flatten().tolist()],
            "pooler_output": [round(v, 6) for v in pooled.flatten().tolist()]}


def write_expected(model, vocab, steps, loss):
    rows = [encode(t, vocab) for t in TEXTS]
    T = max(len(r) for r in rows)
    batch = expected_case(model, [r + [vocab["[PAD]"]] * (T - len(r)) for r in rows], [[0] * T for _ in rows],
                          [[1] * len(r) + [0] * (T - len(r)) for r in rows])
    a, b = encode(PAIR[0], vocab), encode(PAIR[1], vocab)[1:]  # [CLS] A [SEP] B [SEP]
    pair = expected_case(model, [a + b], [[0] * len(a) + [1] * len(b)], [[1] * (len(a) + len(b))])
    expected = {"texts": TEXTS, "batch": batch, "pair": PAIR, "pair_case": pair, "hidden_size": E,
                "steps": steps, "final_loss": round(loss, 4), "torch": torch.__version__}
    (HERE / "expected.json").write_text(json.dumps(expected) + "\n")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    start = time.time()
    text = (HERE.parent / "tiny_char" / "text.txt").read_text()
    vocab = make_vocab(text)
    ids = torch.tensor([i for w in words(text) for i in word_pieces(w, vocab)])
    print(f"{len(vocab)} tokens: {len(text)} characters are {len(ids)} tokens", flush=True)

    model = BertForMaskedLM(len(vocab))
    loss = train(model, ids, vocab, 300, start)
    stored(model)

    config = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "attention_probs_dropout_prob": 0.1,
              "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": E, "initializer_range": 0.02,
              "intermediate_size": FF, "layer_norm_eps": EPS, "max_position_embeddings": POSITIONS,
              "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "pad_token_id": vocab["[PAD]"],
              "position_embedding_type": "absolute", "type_vocab_size": TYPES, "vocab_size": len(vocab),
              "torch_dtype": "float16"}
    (HERE / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_safetensors(model.state_dict(), HERE / "model.safetensors", {"format": "pt"}, dtype="F16")
    (HERE / "vocab.txt").write_text("".join(t + "\n" for t in vocab))
    (HERE / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}) + "\n")
    write_expected(model, vocab, 300, loss)
    print(f"done in {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
