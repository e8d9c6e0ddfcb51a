"""Traces in Python: every step with its values, the command line's table, the dump format that
`vkattn diff` reads, load_trace, the notebook view, and the GPU beside the CPU reference."""
import html
import json
import os
import re
import subprocess

import numpy as np
import pytest
import torch

import vkattn

UNFUSED = ["q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj", "split_heads_v", "attention_scores",
           "softmax", "attention_values", "merge_heads", "out_proj", "average_heads"]


@pytest.fixture(scope="module")
def traced():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    v = vkattn.MultiheadAttention.from_torch(m)
    out, trace = v.trace(x)
    return m, v, x, out, trace


def test_steps_hold_names_shapes_dims_and_values(traced):
    m, v, x, out, trace = traced
    assert [s.name for s in trace.steps] == UNFUSED
    scores = trace.steps[6]
    assert (scores.op, scores.shape, scores.dims) == ("attention_scores", (2, 4, 5, 5), ("b", "h", "i", "j"))
    assert [tuple(i["shape"]) for i in scores.inputs] == [(2, 4, 5, 4), (2, 4, 5, 4)]
    assert all(s.time_us is not None and s.time_us >= 0 for s in trace.steps)
    np.testing.assert_array_equal(trace["out_proj"], out)
    q = x.numpy() @ m.in_proj_weight[:16].detach().numpy().T + m.in_proj_bias[:16].detach().numpy()
    np.testing.assert_allclose(trace["q_proj"], q, atol=1e-5)
    np.testing.assert_allclose(trace["softmax"].sum(-1), 1, atol=1e-6)
    with pytest.raises(KeyError, match="no such step"):
        trace["scores"]
    assert re.search(r"\n1 +split_heads_q +\(2, 5, 16\) -> \(2, 4, 5, 4\) +0.0\n +folded into q_proj's store",
                     trace.table())


def test_folded_layout_steps_say_so_and_keep_their_tensors(traced):
    m, v, x, out, trace = traced
    q_proj, split = trace.steps[0], trace.steps[1]
    assert split.folded == "folded into q_proj's store, which wrote (B, T, H, d) at strides (80, 4, 20, 1)"
    assert split.time_us == 0 and q_proj.folded is None and q_proj.time_us > 0
    assert q_proj.shape == (2, 5, 16) and q_proj.stored_as == (2, 4, 5, 4)
    # the values are the tensors, each in its own order, whatever the memory's
    np.testing.assert_array_equal(split.values, q_proj.values.reshape(2, 5, 4, 4).transpose(0, 2, 1, 3))
    merge = trace["merge_heads"]
    np.testing.assert_array_equal(merge, trace["attention_values"].transpose(0, 2, 1, 3).reshape(2, 5, 16))


def test_layout_steps_copied_or_folded_on_request_and_the_values_agree(traced):
    m, v, x, out, folded = traced
    copied_out, copied = v.trace(x, fold_layout_steps=False)
    np.testing.assert_array_equal(copied_out, out)
    assert [s.name for s in copied.steps] == UNFUSED
    assert all(s.folded is None and s.stored_as is None for s in copied.steps)
    assert copied.steps[1].time_us > 0  # a copy that ran, timed
    for a, b in zip(copied.steps, folded.steps):
        np.testing.assert_array_equal(a.values, b.values)
    # the device's own way again afterwards: a request lasts one trace
    _, again = v.trace(x)
    assert again.steps[1].folded == folded.steps[1].folded is not None
    # the CPU reference copies by default and folds on request, with the same values
    cpu = vkattn.MultiheadAttention.from_state_dict(v.state_dict(), 4, batch_first=True, device="cpu")
    _, cpu_copied = cpu.trace(x)
    _, cpu_folded = cpu.trace(x, fold_layout_steps=True)
    assert cpu_copied.steps[1].folded is None and cpu_folded.steps[1].folded.startswith("folded into q_proj's store")
    np.testing.assert_array_equal(cpu_folded["out_proj"], cpu_copied["out_proj"])
    # an encoder and grouped-query attention (4 query heads over 2) take it too
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    rng = np.random.default_rng(0)
    state = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             [("q_proj.weight", (16, 16)), ("k_proj.weight", (8, 16)), ("v_proj.weight", (8, 16)),
              ("o_proj.weight", (16, 16))]}
    for module in (vkattn.TransformerEncoderLayer.from_torch(layer), vkattn.GroupedQueryAttention(state, num_heads=4)):
        y_folded, t_folded = module.trace(x)
        y_copied, t_copied = module.trace(x, fold_layout_steps=False)
        np.testing.assert_array_equal(y_folded, y_copied)
        assert any(s.folded for s in t_folded.steps) and not any(s.folded for s in t_copied.steps), module
    with pytest.raises(vkattn.ConfigError, match="fold_layout_steps='yes'"):
        v.trace(x, fold_layout_steps="yes")


def test_fused_path_and_values_off(traced):
    _, v, x, out, _ = traced
    fused_out, trace = v.trace(x, need_weights=False, values=False)
    assert "flash_attention" in [s.name for s in trace.steps] and "softmax" not in [s.name for s in trace.steps]
    assert all(s.values is None for s in trace.steps)
    np.testing.assert_allclose(fused_out, out, atol=1e-6)


def test_dump_is_read_by_vkattn_diff_and_load_trace(traced, tmp_path):
    _, v, x, _, trace = traced
    trace.dump(tmp_path / "a")
    names = sorted(os.listdir(tmp_path / "a"))
    assert "trace.json" in names and "timeline.json" in names and "007_softmax.npy" in names
    np.testing.assert_array_equal(np.load(tmp_path / "a" / "007_softmax.npy"), trace["softmax"])
    back = vkattn.load_trace(tmp_path / "a")
    assert [s.name for s in back.steps] == UNFUSED and back.device == trace.device
    np.testing.assert_array_equal(back["merge_heads"], trace["merge_heads"])
    assert back.table() == trace.table()
    _, cpu_trace = vkattn.MultiheadAttention.from_state_dict(v.state_dict(), 4, batch_first=True,
                                                             device="cpu").trace(x)
    cpu_trace.dump(tmp_path / "b")
    done = subprocess.run([os.environ["VKATTN_CLI"], "diff", str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "all 12 compared steps agree" in done.stdout, done.stdout + done.stderr
    with pytest.raises(vkattn.FileError, match="trace.json"):
        vkattn.load_trace(tmp_path / "nothing")


def test_side_by_side_and_html(traced):
    _, v, x, _, _ = traced
    _, trace = v.trace(x, side_by_side=True)
    table = trace.table()
    assert "cpu: reference (C++ loops)" in table and "every step agrees: gpu and cpu" in table
    frame = trace._repr_html_()
    assert frame.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;')
    page = html.unescape(frame.split('srcdoc="')[1].split('" style=')[0])
    assert page == trace.report()  # the page `vkattn report` writes, here the gpu against the cpu
    data = json.loads(page.split('id="vkattn-data">')[1].split("</script>")[0])
    section = data["sections"][0]
    assert [p["backend"] for p in section["passes"]] == ["gpu", "cpu"]
    assert [s["name"] for s in section["steps"]] == [s.name for s in trace.steps]
    assert all(s["status"] == "agrees" for s in section["steps"]) and section["first_divergent"] is None


def test_encoder_trace_names_steps_by_module_path():
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    enc = vkattn.TransformerEncoderLayer.from_torch(layer, device="cpu")
    out, trace = enc.trace(torch.randn(1, 3, 8))
    names = [s.name for s in trace.steps]
    assert names[0] == "self_attn.q_proj" and "norm2" in names and "linear1" in names
    np.testing.assert_array_equal(trace[names[-1]], out)
