"""What goes in: any float dtype, any strides, torch tensors — and bad input, which raises the
engine's one-line error as the right class, never a crash; memory and threads."""
import re
import threading

import numpy as np
import pytest
import torch

import vkattn
from conftest import assert_close


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    return m, vkattn.MultiheadAttention.from_torch(m)


def test_dtypes_and_layouts_give_the_float32_answer(pair):
    m, v = pair
    x = torch.randn(2, 5, 8)
    expected, _ = v(x, x, x)
    for variant in (x.numpy().astype(np.float16).astype(np.float64),  # float64
                    x.numpy().astype(np.float64), x.double(),
                    np.asfortranarray(x.numpy()),                         # another memory order
                    torch.randn(5, 2, 8).transpose(0, 1)):               # a non-contiguous view
        a = variant.numpy() if isinstance(variant, torch.Tensor) else variant
        out, _ = v(variant, variant, variant)
        again, _ = v(np.ascontiguousarray(a, dtype=np.float32), np.ascontiguousarray(a, dtype=np.float32),
                     np.ascontiguousarray(a, dtype=np.float32))
        np.testing.assert_array_equal(out, again)
    half = x.half()
    out, _ = v(half, half, half)
    with torch.no_grad():
        ref, _ = m(half.float(), half.float(), half.float())
    assert_close(out, ref)
    out, _ = v(x.requires_grad_(), x, x)  # a tensor that requires grad is read, not refused
    np.testing.assert_array_equal(out, expected)


BAD = [
    (lambda x: dict(query=np.zeros((2, 5, 7), np.float32)), vkattn.ShapeError, "7 features"),
    (lambda x: dict(query=np.zeros((2, 5, 8), np.int64)), vkattn.ShapeError, "query: dtype int64 is not a float"),
    (lambda x: dict(query=np.where(np.arange(80).reshape(2, 5, 8) == 11, np.nan, 1.0)), vkattn.ShapeError,
     "query: nan at index (0, 1, 3)"),
    (lambda x: dict(attn_mask=np.zeros((4, 4), bool)), vkattn.ShapeError, "attn_mask"),
    (lambda x: dict(attn_mask=np.full((5, 5), np.nan)), vkattn.ShapeError, "attn_mask: nan at index (0, 0)"),
    (lambda x: dict(attn_mask=np.zeros((5, 5), np.int32)), vkattn.ShapeError, "attn_mask: dtype int32"),
    (lambda x: dict(key_padding_mask=np.zeros((3, 5), bool)), vkattn.ShapeError, "key_padding_mask"),
    (lambda x: dict(attention="fast"), vkattn.ConfigError, "fast"),
    (lambda x: dict(attention="fused", need_weights=True), vkattn.ConfigError, "need_weights"),
]


@pytest.mark.parametrize("make,error,fragment", BAD)
def test_bad_input_raises_the_engines_message(pair, make, error, fragment):
    _, v = pair
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    kw = dict(query=x, key=x, value=x)
    kw.update(make(x))
    if "query" in make(x):
        kw["key"] = kw["value"] = kw["query"]
    with pytest.raises(error) as caught:
        v(**kw)
    message = str(caught.value)
    assert fragment in message and "\n" not in message
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, vkattn.Error)


def test_bad_config_weights_and_devices():
    with pytest.raises(vkattn.ConfigError, match="divis"):
        vkattn.MultiheadAttention(10, 3)
    with pytest.raises(vkattn.ConfigError, match="device='nosuchgpu'|'nosuchgpu' matches no device"):
        vkattn.MultiheadAttention(8, 2, device="nosuchgpu")
    with pytest.raises(vkattn.ConfigError, match="device=1.5"):
        vkattn.MultiheadAttention(8, 2, device=1.5)
    v = vkattn.MultiheadAttention(8, 2)
    with pytest.raises(vkattn.FileError, match="out_proj.weight"):
        v.load_state_dict({"in_proj_weight": np.zeros((24, 8), np.float32)})
    m = torch.nn.MultiheadAttention(16, 2)
    with pytest.raises(vkattn.ConfigError, match="embed_dim=16.*embed_dim=8"):
        v.load_state_dict(m.state_dict())
    assert issubclass(vkattn.DeviceError, RuntimeError) and issubclass(vkattn.FileError, ValueError)


def rss_kib():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_a_thousand_forwards_keep_memory_flat(pair):
    _, v = pair
    x = np.random.default_rng(1).standard_normal((2, 9, 8)).astype(np.float32)
    for _ in range(100):  # buffers, pipelines and allocator pools settle
        v(x, x, x)
    before = rss_kib()
    for _ in range(1000):
        out, w = v(x, x, x)
    grown = rss_kib() - before
    assert grown < 2048, f"resident memory grew {grown} KiB over 1000 forwards"


def test_two_threads_with_their_own_modules():
    torch.manual_seed(2)
    modules = [torch.nn.MultiheadAttention(16, 4, batch_first=True).eval() for _ in range(2)]
    inputs = [torch.randn(2, 11, 16) for _ in range(2)]
    with torch.no_grad():
        expected = [m(x, x, x)[0].numpy() for m, x in zip(modules, inputs)]
    ours = [vkattn.MultiheadAttention.from_torch(m) for m in modules]
    failures = []

    def work(k):
        try:
            for _ in range(50):
                out, _ = ours[k](inputs[k], inputs[k], inputs[k])
                np.testing.assert_allclose(out, expected[k], atol=1e-5, rtol=1e-5)
        except Exception as e:  # noqa: BLE001 (reported below, in the main thread)
            failures.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not failures, failures
