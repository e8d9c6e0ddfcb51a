"""The multi-head attention of the multi-head-attention article (../shared/articles/02-…), written
in PyTorch as a learner writes it, recording each step under vkattn's name — and, by `bug=`, each
of the classic mistakes the articles warn about. The tests and tutorials/python/ use it."""
import math

import torch
import torch.nn.functional as F
from torch import nn

BUGS = ("missing_transpose", "scaled_by_d", "softmax_dim", "inverted_mask", "merge_order")


class ArticleAttention(nn.Module):
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
        Q = rec("q_proj", self.W_q(x))                                       # (B, T, E)
        K = rec("k_proj", self.W_k(x))
        V = rec("v_proj", self.W_v(x))
        heads = lambda t: t.view(B, T, self.num_heads, self.d_k).transpose(1, 2)  # (B, H, T, d)
        if self.bug == "missing_transpose":
            Q = rec("split_heads_q", Q.view(B, T, self.num_heads, self.d_k))   # (B, T, H, d)
            K = rec("split_heads_k", K.view(B, T, self.num_heads, self.d_k))
            V = rec("split_heads_v", V.view(B, T, self.num_heads, self.d_k))
            Q, K, V = (t.transpose(1, 2) for t in (Q, K, V))                  # too late to record
        else:
            Q, K, V = rec("split_heads_q", heads(Q)), rec("split_heads_k", heads(K)), rec("split_heads_v", heads(V))
        scale = self.d_k if self.bug == "scaled_by_d" else math.sqrt(self.d_k)
        scores = rec("attention_scores", Q @ K.transpose(-2, -1) / scale)    # (B, H, T, T)
        if mask is not None:
            blocked = ~mask if self.bug == "inverted_mask" else mask
            scores = rec("attention_mask", scores.masked_fill(blocked, float("-inf")))
        P = rec("softmax", F.softmax(scores, dim=-2 if self.bug == "softmax_dim" else -1))
        O = rec("attention_values", P @ V)                                     # (B, H, T, d)
        if self.bug == "merge_order":
            O = rec("merge_heads", O.contiguous().view(B, T, self.d_model))    # no transpose first
        else:
            O = rec("merge_heads", O.transpose(1, 2).contiguous().view(B, T, self.d_model))
        return rec("out_proj", self.W_o(O)), P
