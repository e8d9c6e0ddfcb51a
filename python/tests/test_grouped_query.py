"""vkattn.GroupedQueryAttention against a Llama attention written by hand in torch (Hugging Face's
LlamaAttention, a few lines a step), and vkattn.check on it: the correct one agrees at every step,
and each classic mistake of the attention since 2017 — RoPE's other convention, another θ, K and V
copied with .repeat instead of .repeat_interleave — is named at the step where it happens."""
import math
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vkattn
from conftest import assert_close

B, T, E, H, H_KV = 2, 7, 32, 8, 2
D = E // H


def rotate(x, theta, pairs):
    """RoPE on (B, heads, T, d): halves (rotate_half) or neighbouring pairs (GPT-J)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))
    phi = torch.outer(torch.arange(x.shape[-2]).float(), inv_freq)  # (T, d/2)
    if pairs:
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(phi), phi)).flatten(-2)
    cos, sin = torch.cat([phi, phi], -1).cos(), torch.cat([phi, phi], -1).sin()
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class HeadNorm(torch.nn.Module):
    """Qwen3's q_norm / k_norm: RMSNorm over each head's d features (eps 1e-6), its weight drawn
    about 1 (a trained one's are; all ones would hide a weight left out)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.5 * torch.rand(D))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class LlamaAttention(torch.nn.Module):
    """A learner's Llama attention (with qk_norm, Qwen3's); `bug` is one mistake or None."""

    def __init__(self, bug=None, qk_norm=False):
        super().__init__()
        self.q_proj = torch.nn.Linear(E, H * D, bias=False)
        self.k_proj = torch.nn.Linear(E, H_KV * D, bias=False)
        self.v_proj = torch.nn.Linear(E, H_KV * D, bias=False)
        self.o_proj = torch.nn.Linear(H * D, E, bias=False)
        if qk_norm:
            self.q_norm, self.k_norm = HeadNorm(), HeadNorm()
        self.bug = bug

    def forward(self, x, rec):
        theta = 500000.0 if self.bug == "theta" else 10000.0
        pairs = self.bug == "pairs"
        q = rec("split_heads_q", rec("q_proj", self.q_proj(x)).view(B, T, H, D).transpose(1, 2))
        k = rec("split_heads_k", rec("k_proj", self.k_proj(x)).view(B, T, H_KV, D).transpose(1, 2))
        v = rec("split_heads_v", rec("v_proj", self.v_proj(x)).view(B, T, H_KV, D).transpose(1, 2))
        if hasattr(self, "q_norm") and self.bug != "qk_norm_missing":
            q, k = rec("q_norm", self.q_norm(q)), rec("k_norm", self.k_norm(k))
        q = rec("rotary_embedding_q", rotate(q, theta, pairs))
        k = rec("rotary_embedding_k", rotate(k, theta, pairs))
        if self.bug == "repeat":
            k, v = k.repeat(1, H // H_KV, 1, 1), v.repeat(1, H // H_KV, 1, 1)
        else:
            k, v = k.repeat_interleave(H // H_KV, dim=1), v.repeat_interleave(H // H_KV, dim=1)
        scores = rec("attention_scores", q @ k.transpose(-2, -1) / math.sqrt(D))
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        p = rec("softmax", rec("attention_mask", scores.masked_fill(causal, float("-inf"))).softmax(-1))
        o = rec("merge_heads", rec("attention_values", p @ v).transpose(1, 2).reshape(B, T, H * D))
        return rec("o_proj", self.o_proj(o))


def run(bug, device=None, qk_norm=False):
    torch.manual_seed(0)
    model = LlamaAttention(bug, qk_norm)
    x = torch.randn(B, T, E)
    rec = vkattn.Recorder()
    with torch.no_grad():
        out = model(x, rec)
    attention = vkattn.GroupedQueryAttention(model.state_dict(), num_heads=H, device=device)
    return out, x, attention, vkattn.check(rec, attention, query=x)


def test_on_device_tensors_it_computes_what_torch_does_and_leaves_its_results_there(device):
    out, x, attention, _ = run(None, device)
    y, weights = attention(vkattn.to_device(x, device=device), need_weights=True)
    assert isinstance(y, vkattn.DeviceTensor) and isinstance(weights, vkattn.DeviceTensor)
    assert y.shape == (B, T, E) and weights.shape == (B, H, T, T)
    assert_close(y.numpy(), out, atol=1e-5, rtol=1e-4)
    assert_close(weights.numpy(), attention(x, need_weights=True)[1], atol=1e-6, rtol=1e-5)
    flat, _ = attention(vkattn.to_device(x[1], device=device))  # unbatched
    assert flat.shape == (T, E)
    assert_close(flat.numpy(), out[1], atol=1e-5, rtol=1e-4)
    again, _ = attention(y)  # chained, as a model's layers are
    assert_close(again.numpy(), attention(out)[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(vkattn.ShapeError, match=r"^GroupedQueryAttention.forward: x \(2, 7, 16\) must be "
                                                r"\(B, T, E\) or \(T, E\) with E = hidden_size = 32$"):
        attention(vkattn.to_device(np.zeros((2, 7, 16), dtype=np.float32), device=device))


def test_the_module_computes_what_torch_does(device):
    out, x, attention, _ = run(None, device)
    assert attention.num_kv_heads == H_KV and attention.head_dim == D and attention.rope == "half"
    for path in ("fused", "unfused"):
        assert_close(attention(x, attention=path)[0], out, atol=1e-5, rtol=1e-4)
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None and "enable_gqa" in (sdpa.__doc__ or ""):  # torch 2.5+ (Debian 13): torch's own GQA
        torch.manual_seed(0)
        model = LlamaAttention()
        with torch.no_grad():
            q = rotate(model.q_proj(x).view(B, T, H, D).transpose(1, 2), 10000.0, False)
            k = rotate(model.k_proj(x).view(B, T, H_KV, D).transpose(1, 2), 10000.0, False)
            v = model.v_proj(x).view(B, T, H_KV, D).transpose(1, 2)
            o = sdpa(q, k, v, is_causal=True, enable_gqa=True)
            assert_close(attention(x)[0], model.o_proj(o.transpose(1, 2).reshape(B, T, E)), atol=1e-5, rtol=1e-4)


def test_a_correct_llama_attention_agrees_at_every_step(device):
    *_, report = run(None, device)
    assert report.ok, str(report)
    assert sum(s["verdict"] == "agrees" for s in report.steps) == 14


def test_qwen3s_attention_normalises_each_heads_q_and_k_as_torch_does(device):
    out, x, attention, report = run(None, device, qk_norm=True)
    assert attention.qk_norm and "qk_norm=True" in repr(attention)
    for path in ("fused", "unfused"):
        assert_close(attention(x, attention=path)[0], out, atol=1e-5, rtol=1e-4)
    assert report.ok, str(report)
    assert [s["name"] for s in report.steps][6:8] == ["q_norm", "k_norm"]
    assert sum(s["verdict"] == "agrees" for s in report.steps) == 16
    *_, report = run("qk_norm_missing", device, qk_norm=True)  # Llama's forward on Qwen3's weights
    assert report.first_divergent["name"] == "rotary_embedding_q", str(report)
    assert report.first_divergent["diagnoses"] == ["qk_norm_missing"], str(report)
    assert "(Qwen3's q_norm, k_norm) was left out?" in report.first_divergent["diagnosis"]


MISTAKES = [
    ("pairs", "rotary_embedding_q", "rope_convention",
     "yours rotates neighbouring pairs (2i, 2i + 1: GPT-J, Meta's Llama code); the recipe rotates halves"),
    ("theta", "rotary_embedding_q", "rope_theta", "θ = 500000; the recipe's θ = 10000"),
    ("repeat", "attention_scores", "kv_repeat", "K and V copied with .repeat(1, 4, 1, 1); grouped-query attention "
                                                "gives query heads 0 … 3 key/value head 0: .repeat_interleave(4, dim=1)"),
]


@pytest.mark.parametrize("bug, step, name, words", MISTAKES)
def test_each_mistake_is_named_where_it_happens(device, bug, step, name, words):
    *_, report = run(bug, device)
    assert not report.ok
    assert report.first_divergent["name"] == step, str(report)
    assert words in report.first_divergent["diagnosis"], report.first_divergent["diagnosis"]
    assert report.first_divergent["diagnoses"] == [name]
    assert all(len(line) <= 100 for line in str(report).splitlines())


def test_vkattn_check_dir_checks_a_grouped_query_attention(tmp_path):
    from article_safetensors import save_safetensors
    torch.manual_seed(0)
    save_safetensors(LlamaAttention().state_dict(), tmp_path / "w.safetensors", {"num_heads": str(H)})
    for bug, code in ((None, 0), ("theta", 1)):
        torch.manual_seed(0)
        model, x, rec = LlamaAttention(bug), torch.randn(B, T, E), vkattn.Recorder()
        with torch.no_grad():
            model(x, rec)
        np.save(tmp_path / "x.npy", x.numpy())
        rec.save(tmp_path / str(bug))
        done = subprocess.run([os.environ["VKATTN_CLI"], "check", str(tmp_path / str(bug)), "--weights",
                               str(tmp_path / "w.safetensors"), "--query", str(tmp_path / "x.npy"), "--causal"],
                              capture_output=True, text=True)
        assert done.returncode == code, done.stdout + done.stderr
        assert ("all 14 recorded steps agree" if bug is None else "[rope_theta]") in done.stdout


def test_bad_arguments_are_one_line_errors():
    torch.manual_seed(0)
    state = LlamaAttention().state_dict()
    with pytest.raises(vkattn.FileError, match="--kv-heads 4 disagrees with tensor 'k_proj.weight'"):
        vkattn.GroupedQueryAttention(state, num_heads=H, num_kv_heads=4, device="cpu")
    with pytest.raises(vkattn.ConfigError, match="attention path|not one of|half"):
        vkattn.GroupedQueryAttention(state, num_heads=H, rope="neox", device="cpu")
    attention = vkattn.GroupedQueryAttention(state, num_heads=H, device="cpu")
    with pytest.raises(vkattn.ConfigError, match="drop key, value, attn_mask and is_causal"):
        vkattn.check({}, attention, query=np.zeros((B, T, E), np.float32), is_causal=True)
