#!/usr/bin/python3
"""Python lesson 1: check your own attention, step by step, against vkattn on the GPU.

The multi-head-attention article (../shared/articles/02-…) writes MultiHeadAttention by hand in
PyTorch: four nn.Linear, a .view(B, T, H, d).transpose(1, 2) per input, Q·Kᵀ/√d, a mask, a
softmax over the keys, P·V, the heads merged back and projected. This lesson writes the same
class (ArticleAttention below), records each intermediate tensor under vkattn's step name with
a vkattn.Recorder, and asks vkattn.check to run the same weights through vkattn's recipe on the
GPU and compare. Then it breaks the class in each of the ways the articles warn about, and shows
what check says: the first step where yours differs, the index, both values, and why.

One difference from the article: its mask keeps where mask == 1 (masked_fill(mask == 0, -1e9));
PyTorch's bool masks, and vkattn's, block where True. This class follows PyTorch.

Run: PYTHONPATH=build/python /usr/bin/python3 tutorials/python/check_your_attention.py [--device D]
"""
import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

# The mistakes, as `bug=` switches them on: each is one line of the class below.
BUGS = ("missing_transpose", "scaled_by_d", "softmax_dim", "inverted_mask", "merge_order")
LESSONS = {
    "missing_transpose": "split heads with .view(B, T, H, d) and no .transpose(1, 2)",
    "scaled_by_d": "scores divided by d instead of √d",
    "softmax_dim": "softmax over dim=-2 (the queries) instead of dim=-1 (the keys)",
    "inverted_mask": "a mask of the wrong polarity: blocked and kept positions swapped",
    "merge_order": "heads merged with .view(B, T, E) and no .transpose(1, 2) first",
}


class ArticleAttention(nn.Module):
    """The article's MultiHeadAttention, recording its steps: rec(name, tensor) returns the tensor."""

    def __init__(self, d_model, num_heads, bug=None):
        super().__init__()
        assert d_model % num_heads == 0 and bug in (None, *BUGS)
        self.d_model, self.num_heads, self.d_k, self.bug = d_model, num_heads, d_model // num_heads, bug
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None, rec=lambda name, t: t):
        """x (B, T, E); mask (T, T) bool, True = blocked (PyTorch's convention)."""
        B, T, _ = x.shape
        Q = rec("q_proj", self.W_q(x))                                          # (B, T, E)
        K = rec("k_proj", self.W_k(x))
        V = rec("v_proj", self.W_v(x))
        if self.bug == "missing_transpose":
            Q = rec("split_heads_q", Q.view(B, T, self.num_heads, self.d_k))     # (B, T, H, d)
            K = rec("split_heads_k", K.view(B, T, self.num_heads, self.d_k))
            V = rec("split_heads_v", V.view(B, T, self.num_heads, self.d_k))
            Q, K, V = (t.transpose(1, 2) for t in (Q, K, V))                    # fixed too late
        else:
            def heads(t):
                return t.view(B, T, self.num_heads, self.d_k).transpose(1, 2)  # (B, H, T, d)
            Q, K, V = rec("split_heads_q", heads(Q)), rec("split_heads_k", heads(K)), rec("split_heads_v", heads(V))
        scale = self.d_k if self.bug == "scaled_by_d" else math.sqrt(self.d_k)
        scores = rec("attention_scores", Q @ K.transpose(-2, -1) / scale)       # (B, H, T, T)
        if mask is not None:
            blocked = ~mask if self.bug == "inverted_mask" else mask
            scores = rec("attention_mask", scores.masked_fill(blocked, float("-inf")))
        P = rec("softmax", F.softmax(scores, dim=-2 if self.bug == "softmax_dim" else -1))
        O = rec("attention_values", P @ V)                                        # (B, H, T, d)
        if self.bug == "merge_order":
            O = rec("merge_heads", O.contiguous().view(B, T, self.d_model))       # no transpose
        else:
            O = rec("merge_heads", O.transpose(1, 2).contiguous().view(B, T, self.d_model))
        return rec("out_proj", self.W_o(O)), P


def check(model, x, mask, device):
    """model's forward recorded step by step, and what vkattn.check says of it."""
    import vkattn
    rec = vkattn.Recorder()
    with torch.no_grad():
        model(x, mask, rec)
    weights = vkattn.attention_weights(q_proj=model.W_q, k_proj=model.W_k, v_proj=model.W_v, out_proj=model.W_o)
    return vkattn.check(rec, weights, query=x, attn_mask=mask, num_heads=model.num_heads, device=device)


def main():
    import vkattn
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="a GPU index or name substring (vkattn.devices()); default: the best")
    device = parser.parse_args().device
    B, T, E, H = 2, 6, 32, 4
    torch.manual_seed(0)
    x = torch.randn(B, T, E)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True above the diagonal: the future is blocked
    print(__doc__.split("\n\n")[0])
    print(f"\nx is (B, T, E) = {tuple(x.shape)}, H = {H} heads of d = {E // H}, a causal mask.")
    print("Each step below is recorded with rec(name, tensor) under vkattn's name (vkattn.STEPS):")
    for name, (shape, axes, line) in vkattn.STEPS.items():
        if name not in ("average_heads", "flash_attention"):
            print(f"  {name:17} {shape:13} {line}")

    print("\n== the article's class, as written: every recorded step should agree\n")
    model = ArticleAttention(E, H)
    report = check(model, x, causal, device)
    print(report)
    ok = report.ok
    for bug in BUGS:
        broken = ArticleAttention(E, H, bug)
        broken.load_state_dict(model.state_dict())
        print(f"\n== bug: {LESSONS[bug]}\n")
        report = check(broken, x, causal, device)
        text = str(report)
        print(text[text.index("first divergent step"):].rstrip())  # the table is as above, to there
        ok = ok and not report.ok
    print("\nWhat to notice: the first divergent step is where the bug is, not where it shows. The "
          "missing\ntranspose is caught at split_heads_q even though the class transposes later and "
          "every later\nstep agrees; a wrong scale changes the scores and everything after them, "
          "but check names\nattention_scores, and the factor (1/√d) that explains it.")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
