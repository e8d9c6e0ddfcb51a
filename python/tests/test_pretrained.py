"""vkattn.from_pretrained on models/tiny_gpt2 (GPT-2's architecture, saved as the hub saves it)
against torch running the same GPT-2 from its definition (models/tiny_gpt2/train.py), on both
backends: text and ids in, every position's logits, greedy generation, the trace's steps."""
import importlib.util
import json
import os

import numpy as np
import pytest
import torch

import vkattn
from conftest import assert_close

MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny_gpt2")
_spec = importlib.util.spec_from_file_location("tiny_gpt2_train", os.path.join(MODEL, "train.py"))
train = importlib.util.module_from_spec(_spec)  # tiny_gpt2's torch definition
_spec.loader.exec_module(train)


def read_safetensors(path):
    """F32 tensors of a safetensors file, as torch tensors."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {name: torch.from_numpy(np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], "<f4")
                                   .reshape(e["shape"]).copy()) for name, e in header.items()}


@pytest.fixture(scope="module")
def torch_gpt2():
    with open(os.path.join(MODEL, "config.json")) as f:
        model = train.GPT2LMHeadModel(json.load(f)["vocab_size"])
    model.load_state_dict(read_safetensors(os.path.join(MODEL, "model.safetensors")))
    return model.eval()


def test_every_positions_logits_match_torchs_for_text_and_ids(device, torch_gpt2):
    gpt2 = vkattn.from_pretrained(MODEL, device=device)
    assert gpt2.config["architecture"] == "GPT2LMHeadModel" and gpt2.config["activation"] == "gelu_tanh"
    ids = gpt2.encode("Alice was beginning to get very tired")
    assert gpt2.decode(ids) == "Alice was beginning to get very tired"
    with torch.no_grad():
        expected = torch_gpt2(torch.tensor([ids, ids[::-1]]))
    assert_close(gpt2(np.array([ids, ids[::-1]])), expected, atol=1e-4, rtol=1e-4)
    assert_close(gpt2("Alice was beginning to get very tired"), expected[:1], atol=1e-4, rtol=1e-4)
    assert_close(gpt2(torch.tensor(ids)), expected[:1], atol=1e-4, rtol=1e-4)


def test_generate_continues_as_torchs_greedy_choice(device):
    with open(os.path.join(MODEL, "expected.json")) as f:
        expected = json.load(f)
    gpt2 = vkattn.from_pretrained(MODEL, device=device)
    assert gpt2.generate(expected["prompt"], max_new_tokens=expected["new_tokens"]) == expected["text"]
    assert gpt2.generate(expected["prompt_ids"], max_new_tokens=5) == expected["tokens"][:5]


def test_the_trace_holds_every_step_of_every_layer():
    gpt2 = vkattn.from_pretrained(MODEL)
    logits, trace = gpt2.trace("Alice was")
    names = [s.name for s in trace.steps]
    assert names[:3] == ["token_embedding", "position_embedding", "layers.0.norm1"]
    assert "layers.1.gelu_tanh" in names and names[-1] == "lm_head"
    np.testing.assert_array_equal(trace["lm_head"], logits)


def test_bad_folders_and_ids_are_one_line_errors(tmp_path):
    with pytest.raises(vkattn.FileError, match="no config.json"):
        vkattn.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["BertModel"], "model_type": "bert"}')
    with pytest.raises(vkattn.ConfigError, match="architecture 'BertModel'"):
        vkattn.from_pretrained(tmp_path)
    gpt2 = vkattn.from_pretrained(MODEL, device="cpu")
    with pytest.raises(vkattn.ShapeError, match="token id 600 .* outside the vocabulary"):
        gpt2([1, 600])
    with pytest.raises(vkattn.ShapeError, match="dtype float"):
        gpt2(np.array([1.5]))
    with pytest.raises(vkattn.ShapeError, match="need 129 positions; the model has 128"):
        gpt2.generate([1], max_new_tokens=128)
