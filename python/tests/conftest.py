"""Shared by the tests: both backends, torch's reference, the tolerances of the golden tests, the
shipped models' torch definitions and weights."""
import importlib.util
import json
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # article_safetensors
# The lessons' hand-written attention (check_your_attention.ArticleAttention) is tested too.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tutorials", "python"))

ATOL, RTOL = 1e-5, 1e-5  # tests/golden's: vkattn against PyTorch in float32


@pytest.fixture(params=["gpu", "cpu"])
def device(request):
    """The default Vulkan device (lavapipe in CI) and the C++ reference."""
    return None if request.param == "gpu" else "cpu"


def assert_close(actual, expected, atol=ATOL, rtol=RTOL):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert isinstance(actual, np.ndarray) and actual.dtype == np.float32
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol)


MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "models")


def definition(name):
    """models/NAME/train.py, which defines the model in torch."""
    spec = importlib.util.spec_from_file_location(f"{name}_train", os.path.join(MODELS, name, "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_safetensors(path):
    """The F32, F16 and BF16 tensors of a safetensors file, as float32 torch tensors."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    tensors = {}
    for name, e in header.items():
        raw = data[e["data_offsets"][0]:e["data_offsets"][1]]
        if e["dtype"] == "BF16":  # the high 16 bits of a float32
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        else:
            a = np.frombuffer(raw, "<f4")
        tensors[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return tensors


def padded(model, texts, left=False):
    """An encoder's texts as its tokenizer pads them for Hugging Face's model: ids (B, T) padded with
    the model's pad token to the longest, on the right (or the left), and attention_mask (B, T)."""
    rows = [model.encode(t) for t in texts]
    pad, T = model.config["pad_token_id"], max(len(r) for r in rows)
    fill = [[pad] * (T - len(r)) for r in rows]
    ids = [f + r if left else r + f for r, f in zip(rows, fill)]
    mask = [[0] * len(f) + [1] * len(r) if left else [1] * len(r) + [0] * len(f) for r, f in zip(rows, fill)]
    return torch.tensor(ids), torch.tensor(mask)
