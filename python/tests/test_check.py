"""vkattn.check on the article's hand-written attention: a correct one passes, and each classic
bug is caught at the step where it happens, with its diagnosis. Also `vkattn check DIR`."""
import os
import subprocess

import numpy as np
import pytest
import torch

import vkattn
from check_your_attention import BUGS, ArticleAttention

B, T, E, H = 2, 6, 32, 4

# bug -> (the first divergent step, words its diagnosis must hold)
EXPECTED = {
    "missing_transpose": ("split_heads_q", "yours (2, 6, 4, 8) is (b, t, h, c); vkattn's split_heads_q is "
                                           "(b, h, t, c): a missing .transpose(1, 2)?"),
    "scaled_by_d": ("attention_scores", "yours is 0.3536 × vkattn's everywhere (d = 8, E = H·d = 32); 2 mistakes "
                                        "give these numbers alike: scores divided by d instead of √d?"),
    "softmax_dim": ("softmax", "softmax over dim=-2 instead of dim=-1?"),
    "inverted_mask": ("attention_mask", "a mask of the wrong polarity?"),
    "merge_order": ("merge_heads", "in the order (b, h, i, c), vkattn's merge_heads in the order (b, i, h, c): "
                                   "a missing .transpose(1, 2) before a .view or .reshape?"),
}


def run(bug, device=None, causal=True):
    torch.manual_seed(0)
    m = ArticleAttention(E, H, bug)
    x = torch.randn(B, T, E)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    rec = vkattn.Recorder()
    with torch.no_grad():
        m(x, mask, rec)
    weights = vkattn.attention_weights(m.W_q, m.W_k, m.W_v, m.W_o)
    return rec, weights, x, mask, vkattn.check(rec, weights, query=x, attn_mask=mask, num_heads=H, device=device)


def test_a_correct_attention_passes(device):
    *_, report = run(None, device)
    assert report.ok and report.first_divergent is None
    recorded = [s for s in report.steps if s["verdict"] != "not recorded"]
    assert len(recorded) == 12 and all(s["verdict"] == "agrees" for s in recorded)
    assert "all 12 recorded steps agree" in str(report)


@pytest.mark.parametrize("bug", BUGS)
def test_each_bug_is_caught_where_it_happens(device, bug):
    *_, report = run(bug, device)
    step, words = EXPECTED[bug]
    assert not report.ok
    assert report.first_divergent["name"] == step
    assert words in report.first_divergent["diagnosis"]
    before = [s for s in report.steps[:report.first_divergent["index"]] if s["verdict"] != "not recorded"]
    assert before and all(s["verdict"] == "agrees" for s in before)
    assert f"first divergent step: {report.first_divergent['index']} {step}" in str(report)
    assert all(len(line) <= 100 for line in str(report).splitlines())


def test_large_negative_fill_and_merged_axes_agree():
    torch.manual_seed(0)
    m = ArticleAttention(E, H)
    x = torch.randn(B, T, E)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    rec = vkattn.Recorder()
    with torch.no_grad():
        m(x, mask, rec)
    rec("attention_mask", torch.from_numpy(rec["attention_scores"]).masked_fill(mask, -1e9))  # the article's fill
    rec("split_heads_q", torch.from_numpy(rec["split_heads_q"]).reshape(B * H, T, E // H))   # (B·H, T, d)
    report = vkattn.check(rec, vkattn.attention_weights(m.W_q, m.W_k, m.W_v, m.W_o), query=x, attn_mask=mask,
                          num_heads=H)
    assert report.ok, str(report)
    assert "large negative number" in str(report) and "with axes merged" in str(report)


def test_unknown_names_and_a_constant_factor():
    rec, weights, x, mask, _ = run(None)
    rec("scores", np.zeros(3, np.float32))
    rec("out_proj", rec["out_proj"] * 2)
    report = vkattn.check(rec, weights, query=x, attn_mask=mask, num_heads=H)
    assert not report.ok
    assert report.unknown == [("scores", "attention_scores")]
    assert report.first_divergent["name"] == "out_proj"
    assert "yours is 2 × vkattn's everywhere: every value multiplied by one constant?" in \
        report.first_divergent["diagnosis"]
    assert report.first_divergent["diagnoses"] == ["constant_factor"]
    assert "scores: not a step of vkattn's recipe (attention_scores?)" in str(report)
    assert "<table>" in report._repr_html_()


def test_keys_and_queries_swapped_is_a_transpose():
    rec, weights, x, mask, _ = run(None, causal=False)
    scores = rec["attention_scores"]
    rec("attention_scores", np.swapaxes(scores, -2, -1).copy())  # K @ Q.T instead of Q @ K.T
    report = vkattn.check(rec, weights, query=x, num_heads=H)
    assert report.first_divergent["name"] == "attention_scores"
    assert "a missing .transpose(-2, -1)?" in report.first_divergent["diagnosis"]


def test_vkattn_check_on_the_command_line(tmp_path):
    rec, weights, x, mask, _ = run("softmax_dim")
    sd = {name: torch.from_numpy(np.asarray(a)) for name, a in weights.items()}
    torch_mha = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True)
    torch_mha.load_state_dict({"in_proj_weight": torch.cat([sd["q_proj_weight"], sd["k_proj_weight"],
                                                            sd["v_proj_weight"]]),
                               "out_proj.weight": sd["out_proj.weight"]})
    from article_safetensors import save_safetensors
    save_safetensors(torch_mha.state_dict(), tmp_path / "w.safetensors", {"num_heads": str(H)})
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "mask.npy", mask.numpy())
    rec.save(tmp_path / "mine")
    cli = os.environ["VKATTN_CLI"]
    args = [cli, "check", str(tmp_path / "mine"), "--weights", str(tmp_path / "w.safetensors"),
            "--query", str(tmp_path / "x.npy"), "--attn-mask", str(tmp_path / "mask.npy")]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "first divergent step: 8 softmax" in done.stdout and "dim=-2" in done.stdout
    for name in ("softmax", "attention_values", "merge_heads", "out_proj"):
        os.remove(tmp_path / "mine" / f"{name}.npy")
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0 and "all 8 recorded steps agree" in done.stdout, done.stdout + done.stderr
    np.save(tmp_path / "mine" / "scores.npy", np.zeros(2, np.float32))
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 2 and "'scores' is not a step of vkattn's recipe" in done.stderr
