#!/usr/bin/python3
"""Python lesson 4: what vkattn.check knows — sixteen mistakes, each named where it happens.

Lesson 1 checks the article's class. This one is multi-head attention written from scratch as a
learner first writes it (ScratchAttention below): four nn.Linear with their biases, its weights
copied from a reference it trusts (torch's own nn.MultiheadAttention), dropout on the weights,
every step recorded under vkattn's name. Then it makes one mistake at a time — each one line of
the class, each one of vkattn.DIAGNOSES — and shows what check says: the step where it happens,
the numbers that show it, the PyTorch line that usually causes it and what to write instead.
Where the numbers fit several mistakes alike, check names them all.

Run: PYTHONPATH=build/python /usr/bin/python3 tutorials/python/what_check_knows.py [--device D]
"""
import argparse
import math
import textwrap

import torch
import torch.nn.functional as F
from torch import nn

# The mistakes, as `mistake=` switches them on, in the order a forward meets them.
MISTAKES = ("sixteen_bit", "weight_transposed", "weight_swapped", "input_swapped", "bias_missing", "bias_extra",
            "heads_view", "heads_order", "scale_width", "scale_twice", "scale_none", "mask_skipped",
            "mask_after_softmax", "mask_shifted", "rows_not_normalised", "dropout")


class ScratchAttention(nn.Module):
    """A learner's first multi-head attention, with `mistake` (one of MISTAKES) made in one line."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, mistake=None):
        super().__init__()
        assert mistake in (None, *MISTAKES)
        self.E, self.H, self.d, self.mistake = embed_dim, num_heads, embed_dim // num_heads, mistake
        self.q, self.k, self.v, self.o = (nn.Linear(embed_dim, embed_dim) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    @torch.no_grad()
    def load_from(self, mha):
        """Copies a torch nn.MultiheadAttention's weights: in_proj_weight's thirds are q, k, v."""
        E, W, b = self.E, mha.in_proj_weight, mha.in_proj_bias
        for n, layer in enumerate((self.q, self.k, self.v)):
            w = W[n * E:(n + 1) * E]
            if self.mistake == "weight_transposed" and n == 0:
                w = w.T
            if self.mistake == "weight_swapped" and n == 1:
                w = W[:E]                                     # k given q's third
            layer.weight.copy_(w)
            layer.bias.copy_(b[n * E:(n + 1) * E])
        self.o.load_state_dict(mha.out_proj.state_dict())

    def forward(self, query, key, value, mask, rec):
        """query (B, L, E), key and value (B, S, E); mask (L, S) bool, True = blocked."""
        B, L, E = query.shape
        S, H, d, mistake = key.shape[1], self.H, self.d, self.mistake
        if mistake == "input_swapped":
            q = self.q(key)
        elif mistake == "bias_missing":
            q = F.linear(query, self.q.weight)
        elif mistake == "bias_extra":
            q = self.q(query) + self.q.bias
        elif mistake == "sixteen_bit":                        # as torch.autocast(bfloat16) computes it
            q = F.linear(query.bfloat16(), self.q.weight.bfloat16(), self.q.bias.bfloat16()).float()
        else:
            q = self.q(query)
        q, k, v = rec("q_proj", q), rec("k_proj", self.k(key)), rec("v_proj", self.v(value))
        if mistake == "heads_view":
            q = q.view(B, H, L, d)
        elif mistake == "heads_order":
            q = q.view(B, L, d, H).permute(0, 3, 1, 2)
        else:
            q = q.view(B, L, H, d).transpose(1, 2)
        q = rec("split_heads_q", q)
        k = rec("split_heads_k", k.view(B, S, H, d).transpose(1, 2))
        v = rec("split_heads_v", v.view(B, S, H, d).transpose(1, 2))
        if mistake == "scale_twice":
            q = q / math.sqrt(d)
        scale = {"scale_width": math.sqrt(E), "scale_none": 1.0}.get(mistake, math.sqrt(d))
        scores = rec("attention_scores", q @ k.transpose(-2, -1) / scale)
        if mask is not None:
            if mistake == "mask_shifted":
                mask = torch.ones(L, S, dtype=torch.bool).triu(0)   # diagonal=0: the diagonal too
            if mistake == "mask_skipped":
                scores.masked_fill(mask, float("-inf"))               # the result dropped
            elif mistake != "mask_after_softmax":
                scores = scores.masked_fill(mask, float("-inf"))
            if mistake != "mask_after_softmax":
                rec("attention_mask", scores)
        if mistake == "rows_not_normalised":
            p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        else:
            p = F.softmax(scores, dim=-1)
        if mistake == "mask_after_softmax":
            p = p.masked_fill(mask, 0.0)
        p = rec("softmax", self.drop(p))
        out = rec("attention_values", p @ v)
        out = rec("merge_heads", out.transpose(1, 2).reshape(B, L, E))
        return rec("out_proj", self.o(out))


def trusted(embed_dim, num_heads):
    """torch's own attention, the reference: its biases drawn (torch starts them at 0, where a
    dropped bias would go unseen)."""
    reference = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
    with torch.no_grad():
        reference.in_proj_bias.uniform_(-0.5, 0.5)
        reference.out_proj.bias.uniform_(-0.5, 0.5)
    return reference


def check(mistake, device, embed_dim=32, num_heads=4, seed=0):
    """The scratch model with `mistake` on a cross-attention (a query of 7 positions over a memory
    of 7, causal), recorded step by step and checked against the reference it copied."""
    import vkattn
    torch.manual_seed(seed)
    reference = trusted(embed_dim, num_heads)
    model = ScratchAttention(embed_dim, num_heads, dropout=0.2, mistake=mistake)
    model.load_from(reference)
    model.train(mistake == "dropout")  # every other run in eval mode, as a check should be
    x, memory = torch.randn(2, 7, embed_dim), torch.randn(2, 7, embed_dim)
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1)
    rec = vkattn.Recorder()
    with torch.no_grad():
        model(x, memory, memory, causal, rec)
    return vkattn.check(rec, reference, query=x, key=memory, value=memory, attn_mask=causal, device=device)


def main():
    import vkattn
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="a GPU index or name substring (vkattn.devices()); default: the best")
    device = parser.parse_args().device
    print(__doc__.split("\n\n")[0] + "\n")
    print(f"check knows {len(vkattn.DIAGNOSES)} mistakes (vkattn.DIAGNOSES, docs/check.md); this lesson "
          f"makes {len(MISTAKES)}.")
    print("x (2, 7, 32) attends to a memory (2, 7, 32), 4 heads of d = 8, causal.\n")
    print("== the class as written, its weights copied from nn.MultiheadAttention: every step agrees\n")
    report = check(None, device)
    print(report)
    ok = report.ok
    for mistake in MISTAKES:
        _, words, _, _ = vkattn.DIAGNOSES[mistake]
        print("\n" + textwrap.fill(f"== {mistake}: {words}", 100, subsequent_indent="   ") + "\n")
        report = check(mistake, device)
        text = str(report)
        print(text[text.index("first divergent step"):].rstrip())
        first = report.first_divergent
        ok = ok and first is not None and mistake in first["diagnoses"]
    print("\n== when the numbers cannot tell mistakes apart: E = 16, H = 4, scores divided by √E\n")
    report = check("scale_width", device, embed_dim=16, num_heads=4)
    text = str(report)
    print(text[text.index("first divergent step"):].rstrip())
    ok = ok and report.first_divergent["diagnoses"] == ["scale_d", "scale_twice", "scale_width"]
    print("\nWhat to notice: each mistake is named at its own step, with the numbers that show it —\n"
          "a factor, a vector at every position, zeros where the mask was, a key off along the\n"
          "diagonal — and the line to change. With d = √E, dividing by √E, by d, or by √d twice give\n"
          "the same scores: check says all three rather than guess one.")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
