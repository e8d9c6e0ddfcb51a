"""vkattn.check's diagnoses (vkattn.DIAGNOSES) on attention written from scratch: each mistake is
named at the step where it happens, on both backends, with the PyTorch line to change; a correct
model gets none; where the numbers fit several mistakes alike, all are named."""
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vkattn
from conftest import gemma_folder, recorded_steps
from what_check_knows import MISTAKES, ScratchAttention, check, trusted

B, L, E, H = 2, 7, 32, 4
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "check.md"

# mistake -> (the first divergent step, the diagnoses named there)
EXPECTED = {
    "sixteen_bit": ("q_proj", ["sixteen_bit"]),
    "weight_transposed": ("q_proj", ["weight_transposed"]),
    "weight_swapped": ("k_proj", ["weight_swapped"]),
    "input_swapped": ("q_proj", ["input_swapped"]),
    "bias_missing": ("q_proj", ["bias_missing"]),
    "bias_extra": ("q_proj", ["bias_extra"]),
    "heads_view": ("split_heads_q", ["heads_view"]),
    "heads_order": ("split_heads_q", ["heads_order"]),
    "scale_width": ("attention_scores", ["scale_width"]),
    "scale_twice": ("attention_scores", ["scale_d", "scale_twice"]),  # 1/√d twice is 1/d: both said
    "scale_none": ("attention_scores", ["scale_none"]),
    "mask_skipped": ("attention_mask", ["mask_skipped"]),
    "mask_after_softmax": ("softmax", ["mask_after_softmax"]),
    "mask_shifted": ("attention_mask", ["mask_shifted"]),
    "rows_not_normalised": ("softmax", ["rows_not_normalised"]),
    "dropout": ("softmax", ["dropout"]),
}


def run(mistake=None, device=None, embed_dim=E, heads=H, keep=None):
    """Lesson 4's check of the scratch model with `mistake`; `keep` limits the recorded steps to
    those names."""
    if keep is None:
        return check(mistake, device, embed_dim, heads)
    torch.manual_seed(0)
    reference = trusted(embed_dim, heads)
    model = ScratchAttention(embed_dim, heads, dropout=0.2, mistake=mistake).eval()
    model.load_from(reference)
    x, memory = torch.randn(B, L, embed_dim), torch.randn(B, L, embed_dim)
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    rec = vkattn.Recorder()
    with torch.no_grad():
        model(x, memory, memory, causal, rec)
    rec.tensors = {name: t for name, t in rec.tensors.items() if name in keep}
    return vkattn.check(rec, reference, query=x, key=memory, value=memory, attn_mask=causal, device=device)


def test_the_catalogue_is_complete_and_documented():
    page = DOCS.read_text()
    assert len(vkattn.DIAGNOSES) >= 20
    for name, (steps, mistake, culprit, fix) in vkattn.DIAGNOSES.items():
        assert steps and mistake and culprit and fix, name
        assert f"`{name}`" in page, f"docs/check.md does not explain {name}"
    assert set(MISTAKES) <= set(vkattn.DIAGNOSES)


@pytest.mark.parametrize("train", [False, True])
def test_a_correct_model_gets_no_diagnosis(device, train):
    torch.manual_seed(1)
    reference = trusted(E, H)
    model = ScratchAttention(E, H, dropout=0.0 if train else 0.2)   # dropout on only where p = 0
    model.load_from(reference)
    model.train(train)
    x = torch.randn(B, L, E)
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    rec = vkattn.Recorder()
    with torch.no_grad():
        model(x, x, x, causal, rec)
    report = vkattn.check(rec, reference, query=x, attn_mask=causal, device=device)
    assert report.ok, str(report)
    assert all(not s["diagnoses"] and not s["diagnosis"] for s in report.steps)
    assert "all 12 recorded steps agree" in str(report)


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_is_named_where_it_happens(device, mistake):
    report = run(mistake, device)
    step, ids = EXPECTED[mistake]
    assert not report.ok
    first = report.first_divergent
    assert (first["name"], first["diagnoses"]) == (step, ids), str(report)
    before = [s for s in report.steps[:first["index"]] if s["verdict"] != "not recorded"]
    assert all(s["verdict"] == "agrees" for s in before)
    text = str(report)
    for name in ids:  # the mistake, the line that usually causes it and the catalogue's name
        _, words, culprit, _ = vkattn.DIAGNOSES[name]
        assert words in first["diagnosis"] and culprit in first["diagnosis"] and f"[{name}]" in first["diagnosis"]
    assert all(len(line) <= 100 for line in text.splitlines())


def test_each_mistake_is_named_by_the_right_diagnosis_alone():
    """No mistake's numbers fit another's diagnosis: the what-ifs do not fire on each other."""
    named = {m: run(m, "cpu").first_divergent["diagnoses"] for m in MISTAKES}
    assert named == {m: EXPECTED[m][1] for m in MISTAKES}


def test_scale_by_root_width_when_the_width_is_heads_squared_names_all_three(device):
    # E = 16, H = 4: d = 4 = √E, so / √E is / d, and √d twice: the numbers cannot tell them apart
    report = run("scale_width", device, embed_dim=16, heads=4)
    first = report.first_divergent
    assert first["name"] == "attention_scores"
    assert first["diagnoses"] == ["scale_d", "scale_twice", "scale_width"]
    assert "3 mistakes give these numbers alike" in first["diagnosis"]


def test_a_wrong_scale_is_named_at_the_softmax_when_the_scores_were_not_recorded(device):
    report = run("scale_width", device, keep={"softmax", "attention_values", "out_proj"})
    assert report.first_divergent["name"] == "softmax"
    assert report.first_divergent["diagnoses"] == ["scale_width"]
    assert "softmax of vkattn's scores × 0.5" in report.first_divergent["diagnosis"]


def test_the_mask_after_the_softmax_is_named_at_the_values_when_the_weights_were_not_recorded(device):
    report = run("mask_after_softmax", device, keep={"attention_values", "out_proj"})
    assert report.first_divergent["name"] == "attention_values"
    assert report.first_divergent["diagnoses"] == ["mask_after_softmax"]


def test_a_query_given_to_check_in_another_layout_names_both_possibilities(device):
    torch.manual_seed(0)
    reference = trusted(E, H)
    model = ScratchAttention(E, H).eval()
    model.load_from(reference)
    x = torch.randn(B, L, E)
    rec = vkattn.Recorder()
    with torch.no_grad():
        model(x, x, x, None, rec)
    report = vkattn.check(rec, reference, query=x.transpose(0, 1), device=device)  # (L, B, E) to a batch-first check
    first = report.first_divergent
    assert first["name"] == "q_proj" and first["diagnoses"] == ["input_layout", "axes_order"]
    assert "first two axes swapped" in first["diagnosis"]


def test_a_row_with_every_key_blocked_is_nan_in_torch_and_printed_as_python_prints_it(device):
    torch.manual_seed(0)
    reference = trusted(E, H)
    model = ScratchAttention(E, H).eval()
    model.load_from(reference)
    x = torch.randn(B, L, E)
    blocked = torch.zeros(L, L, dtype=torch.bool)
    blocked[2] = True                                       # query 2 sees no key
    rec = vkattn.Recorder()
    with torch.no_grad():
        model(x, x, x, blocked, rec)
    report = vkattn.check(rec, reference, query=x, attn_mask=blocked, device=device)
    first = report.first_divergent
    assert first["name"] == "softmax" and first["diagnoses"] == ["masked_row_nan"]
    assert "yours nan, vkattn's 0" in str(report) and "-nan" not in str(report)


def recorded_by_hooks(model, names, change=None):
    """`model`'s forward recorded by forward hooks on its submodules `names` (torch's module paths,
    vkattn's step names too); change(name, module, input, output) may stand in for one output."""
    rec = vkattn.Recorder()

    def hook(name):
        def record(module, inputs, output):
            out = change(name, module, inputs, output) if change else None
            rec(name, output if out is None else out)
            return out
        return record
    modules = dict(model.named_modules())
    return rec, [modules[name].register_forward_hook(hook(name)) for name in names]


def encoder_and_input():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, 64, dropout=0.1, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    with torch.no_grad():  # torch copies one layer: the second made its own
        for p in encoder.layers[1].parameters():
            p.add_(0.1 * torch.randn_like(p))
    return encoder, torch.randn(B, L, E)


ENCODER_STEPS = [f"layers.{n}.{step}" for n in range(2) for step in ("linear1", "linear2", "norm1", "norm2")]


@pytest.mark.parametrize("mistake, step, ids", [
    (None, None, []),
    ("bias_missing", "layers.1.linear1", ["bias_missing"]),
    ("weight_swapped", "layers.1.linear1", ["weight_swapped"]),
    ("dropout", "layers.0.linear2", ["dropout"]),
])
def test_an_encoders_steps_are_checked_under_their_module_paths(device, mistake, step, ids):
    encoder, x = encoder_and_input()

    def change(name, module, inputs, output):
        if name != step:
            return None
        if mistake == "bias_missing":
            return output - module.bias
        if mistake == "weight_swapped":  # layer 0's linear1 in layer 1
            return F.linear(inputs[0], encoder.layers[0].linear1.weight, encoder.layers[0].linear1.bias)
        torch.manual_seed(1)
        return F.dropout(output, 0.25, training=True)
    rec, hooks = recorded_by_hooks(encoder, ENCODER_STEPS, change)
    encoder(x)  # with autograd on: torch's fused fast path would skip the hooks
    for h in hooks:
        h.remove()
    report = vkattn.check(rec, encoder, query=x, device=device)
    if mistake is None:
        assert report.ok, str(report)
        assert "all 8 recorded steps agree" in str(report)
        return
    assert (report.first_divergent["name"], report.first_divergent["diagnoses"]) == (step, ids), str(report)
    if mistake == "weight_swapped":
        assert "with layers.0.linear1.weight for layers.1.linear1.weight" in report.first_divergent["diagnosis"]


def save_state(module, path):
    from article_safetensors import save_safetensors
    heads = next(m for m in module.modules() if isinstance(m, torch.nn.MultiheadAttention)).num_heads
    save_safetensors({k: v.detach() for k, v in module.state_dict().items()}, path, {"num_heads": str(heads)})


def run_cli(*args):
    return subprocess.run([os.environ["VKATTN_CLI"], "check", *map(str, args)], capture_output=True, text=True)


def test_vkattn_check_dir_checks_an_encoder_and_a_decoder(tmp_path):
    encoder, x = encoder_and_input()
    save_state(encoder, tmp_path / "encoder.safetensors")
    np.save(tmp_path / "x.npy", x.numpy())
    rec, hooks = recorded_by_hooks(encoder, ENCODER_STEPS,
                                   lambda name, m, i, out: out - m.bias if name == "layers.1.linear2" else None)
    encoder(x)
    rec.save(tmp_path / "encoder")
    done = run_cli(tmp_path / "encoder", "--weights", tmp_path / "encoder.safetensors", "--query", tmp_path / "x.npy",
                   "--backend", "cpu")
    assert done.returncode == 1, done.stdout + done.stderr
    assert " layers.1.linear2 (linear)\n" in done.stdout and "[bias_missing]" in done.stdout

    torch.manual_seed(0)
    decoder = torch.nn.TransformerDecoderLayer(E, H, 64, dropout=0.0, batch_first=True).eval()
    save_state(decoder, tmp_path / "decoder.safetensors")
    memory = torch.randn(B, 5, E)
    np.save(tmp_path / "memory.npy", memory.numpy())
    rec, hooks = recorded_by_hooks(decoder, ["linear1", "linear2", "norm1", "norm2", "norm3"])
    decoder(x, memory)
    rec.save(tmp_path / "decoder")
    args = [tmp_path / "decoder", "--weights", tmp_path / "decoder.safetensors", "--query", tmp_path / "x.npy"]
    done = run_cli(*args, "--memory", tmp_path / "memory.npy")
    assert done.returncode == 0 and "all 5 recorded steps agree" in done.stdout, done.stdout + done.stderr
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])  # memory positions 3, 4 of item 1
    np.save(tmp_path / "padding.npy", padding.numpy())
    rec, hooks = recorded_by_hooks(decoder, ["linear1", "linear2", "norm1", "norm2", "norm3"])
    decoder(x, memory, memory_key_padding_mask=padding)
    rec.save(tmp_path / "padded")
    padded = [tmp_path / "padded", *args[1:], "--memory", tmp_path / "memory.npy"]
    done = run_cli(*padded)
    assert done.returncode == 1 and "first divergent step" in done.stdout, done.stdout + done.stderr
    done = run_cli(*padded, "--memory-key-padding-mask", tmp_path / "padding.npy")
    assert done.returncode == 0 and "all 5 recorded steps agree" in done.stdout, done.stdout + done.stderr
    done = run_cli(*args)
    assert done.returncode == 2 and "give its memory with --memory" in done.stderr, done.stderr
    done = run_cli(tmp_path / "encoder", "--weights", tmp_path / "encoder.safetensors", "--query", tmp_path / "x.npy",
                   "--memory", tmp_path / "memory.npy")
    assert done.returncode == 2 and "an encoder's state_dict, which does not take --memory" in done.stderr


def recorded_run(tmp_path, model, *flags):
    """models/`model` run by `vkattn run --model` on "Alice was tired.", every step's value recorded
    as check reads them (DIR/<step>.npy): (the folder, DIR, the run's stdout)"""
    folder = pathlib.Path(__file__).resolve().parents[2] / "models" / model
    return (folder, *recorded_steps(tmp_path, folder, "--text", "Alice was tired.", *flags))


@pytest.mark.parametrize("model, step", [("tiny_llama", "layers.0.self_attn.o_proj"), ("tiny_bert", "layers.1.linear2")])
def test_vkattn_check_dir_checks_a_hub_checkpoint_on_a_text(tmp_path, model, step):
    folder, mine, _ = recorded_run(tmp_path, model)
    args = [mine, "--model", folder, "--text", "Alice was tired."]
    done = run_cli(*args)
    assert done.returncode == 0 and "recorded steps agree" in done.stdout, done.stdout + done.stderr
    yours = np.load(mine / f"{step}.npy")
    np.save(mine / f"{step}.npy", yours + np.linspace(-0.2, 0.3, yours.shape[-1], dtype=np.float32))
    done = run_cli(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f" {step} (linear)\n" in done.stdout and "[bias_" in done.stdout, done.stdout
    done = run_cli(*args, "--query", tmp_path / "x.npy")
    assert done.returncode == 2 and "--query is for a module's state_dict" in done.stderr, done.stderr


def test_vkattn_check_checks_a_masked_lms_head_where_its_steps_were_recorded(tmp_path):
    """`vkattn run` on a text with [MASK] runs BertForMaskedLM's head (cls.predictions): check runs
    the same pass, so the head's steps are checked, not refused as steps of no recipe."""
    folder = pathlib.Path(__file__).resolve().parents[2] / "models" / "tiny_bert"
    mine, _ = recorded_steps(tmp_path, folder, "--text", "Alice was [MASK].")
    args = [mine, "--model", folder, "--text", "Alice was [MASK]."]
    done = run_cli(*args)
    assert done.returncode == 0 and " cls.predictions.decoder " in done.stdout, done.stdout + done.stderr
    yours = np.load(mine / "cls.predictions.transform.LayerNorm.npy")
    np.save(mine / "cls.predictions.transform.LayerNorm.npy", yours * np.float32(1.5))
    done = run_cli(*args)
    assert done.returncode == 1 and "first divergent step: 39 cls.predictions.transform.LayerNorm" in done.stdout, \
        done.stdout


@pytest.mark.parametrize("dtype, name", [("BF16", "bfloat16"), ("F16", "float16")])
def test_vkattn_check_rounds_the_checkpoint_as_the_run_it_checks_did(tmp_path, dtype, name):
    """A trace of tiny_gpt2 run with its weights rounded to 16 bits (vkattn run --weights-dtype)
    diverges from the checkpoint as stored, and agrees with it rounded the same way. bfloat16's
    rounding shows at the first step, the embedding's rows, whose numbers check sees are 16-bit;
    float16's is within the tolerance there (a note says its numbers are 16-bit) and shows first
    where float32 sums meet it."""
    folder, mine, said = recorded_run(tmp_path, "tiny_gpt2", "--weights-dtype", dtype)
    assert f"its weights rounded to {name} as they were read (--weights-dtype {dtype})" in said, said
    args = [mine, "--model", folder, "--text", "Alice was tired."]
    done = run_cli(*args)
    assert done.returncode == 1 and "DIFFERS" in done.stdout, done.stdout + done.stderr
    words = " ".join(done.stdout.split())  # the report's lines wrapped at 100 columns, joined
    if dtype == "BF16":
        assert re.search(r"first divergent step: 0 token_embedding \(embedding\) [^[]* every one of your 384 "
                         r"nonzero values is a bfloat16 [^[]*\[sixteen_bit\]", words), done.stdout
    else:
        assert "\nnote, token_embedding: yours agrees" in done.stdout, done.stdout  # a line of its own
        assert re.search(r"note, token_embedding: yours agrees within the tolerances, but every one of your 384 "
                         r"nonzero values is a float16 [^[]*\[sixteen_bit\]", words), done.stdout
    done = run_cli(*args, "--weights-dtype", dtype)
    assert done.returncode == 0 and "recorded steps agree" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("model, step, ids", [("tiny_llama", "layers.0.self_attn.o_proj", ["bias_extra"]),
                                              ("tiny_gpt2", "layers.1.self_attn.out_proj", ["dropout"]),
                                              ("tiny_bert", "layers.1.linear2", ["dropout"])])
def test_a_checkpoints_steps_are_checked_from_python(device, model, step, ids):
    folder = pathlib.Path(__file__).resolve().parents[2] / "models" / model
    m = vkattn.from_pretrained(folder, device=device)
    _, trace = m.trace("Alice was tired.")
    rec = {s.name: trace[s.name] for s in trace.steps}
    assert vkattn.check(rec, m, query="Alice was tired.").ok
    yours = rec[step]
    if ids == ["bias_extra"]:  # Llama's o_proj has no bias: one added
        rec[step] = yours + np.linspace(-0.2, 0.3, yours.shape[-1], dtype=np.float32)
    else:                      # dropout left on at this step
        torch.manual_seed(0)
        rec[step] = F.dropout(torch.from_numpy(yours), 0.25, training=True).numpy()
    report = vkattn.check(rec, m, query="Alice was tired.")
    assert (report.first_divergent["name"], report.first_divergent["diagnoses"]) == (step, ids), str(report)


def test_gemmas_embeddings_recorded_unscaled_are_named(tmp_path, device):
    """Gemma's embed_tokens is the table's rows times √E (GemmaModel's normalizer): rows recorded
    without it are named at that step, not as a bare constant factor."""
    gemma = vkattn.from_pretrained(gemma_folder(tmp_path), device=device)
    _, trace = gemma.trace("Alice was tired.")
    rec = {s.name: trace[s.name] for s in trace.steps}
    assert vkattn.check(rec, gemma, query="Alice was tired.").ok
    rec["embed_tokens"] = rec["embed_tokens"] / np.float32(8)  # √64
    report = vkattn.check(rec, gemma, query="Alice was tired.")
    assert report.first_divergent["name"] == "embed_tokens", str(report)
    assert report.first_divergent["diagnoses"] == ["embedding_unscaled"], str(report)
    assert "yours is vkattn's ÷ √E = 8 (E = 64)" in str(report)


def test_a_decoder_runs_as_torchs_and_its_steps_are_checked_from_python(device):
    torch.manual_seed(0)
    layer = torch.nn.TransformerDecoderLayer(E, H, 64, dropout=0.0, batch_first=True)
    decoder = torch.nn.TransformerDecoder(layer, 2).eval()
    with torch.no_grad():  # torch copies one layer: the second made its own
        for p in decoder.layers[1].parameters():
            p.add_(0.1 * torch.randn_like(p))
    tgt, memory = torch.randn(B, L, E), torch.randn(B, 5, E)
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    ours = vkattn.TransformerDecoder.from_torch(decoder, device=device)
    with torch.no_grad():
        expected = decoder(tgt, memory, tgt_mask=causal, memory_key_padding_mask=padding)
    out = ours(tgt, memory, tgt_mask=causal, memory_key_padding_mask=padding)
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-5, rtol=1e-4)

    steps = [f"layers.{n}.{s}" for n in range(2) for s in ("linear1", "linear2", "norm1", "norm2", "norm3")]
    rec, hooks = recorded_by_hooks(decoder, steps, lambda name, m, i, out: out - m.bias
                                   if name == "layers.1.linear1" else None)
    decoder(tgt, memory, tgt_mask=causal, memory_key_padding_mask=padding)  # autograd on: the hooks run
    report = vkattn.check(rec, decoder, query=tgt, memory=memory, attn_mask=causal,
                          memory_key_padding_mask=padding, device=device)
    first = report.first_divergent
    assert (first["name"], first["diagnoses"]) == ("layers.1.linear1", ["bias_missing"]), str(report)
    before = [s for s in report.steps[:first["index"]] if s["verdict"] != "not recorded"]
    assert len(before) == 7 and all(s["verdict"] == "agrees" for s in before)


def test_a_reference_check_cannot_run_is_named_in_one_line():
    with pytest.raises(vkattn.ConfigError, match="reference: a Linear; give torch's"):
        vkattn.check({}, torch.nn.Linear(4, 4), query=np.zeros((1, 2, 4), np.float32))
    decoder = torch.nn.TransformerDecoderLayer(E, H, 64, batch_first=True).eval()
    with pytest.raises(vkattn.ConfigError, match="a decoder takes its target as query and the encoder's output as "
                                                 "memory"):
        vkattn.check({}, decoder, query=np.zeros((1, 2, E), np.float32))


def test_an_mlps_gate_and_up_swapped_are_named(device):
    """A Llama's (or a Phi-3's, whose gate_up_proj packs the gate's rows first) gate_proj and
    up_proj swapped, the activation then on up_proj's output: named at gate_proj as such, not as
    attention's weight_swapped with its advice about in_proj_weight."""
    llama = vkattn.from_pretrained(pathlib.Path(__file__).resolve().parents[2] / "models" / "tiny_llama",
                                   device=device)
    _, trace = llama.trace("Alice was tired.")
    rec = {s.name: trace[s.name] for s in trace.steps}
    gate, up = "layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"
    rec[gate], rec[up] = rec[up], rec[gate]
    report = vkattn.check(rec, llama, query="Alice was tired.")
    assert report.first_divergent["name"] == gate, str(report)
    assert report.first_divergent["diagnoses"] == ["gate_up_swapped"], str(report)
    assert "gate_up_proj(x).chunk(2, dim=-1)" in str(report)
