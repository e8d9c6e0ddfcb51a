"""vkattn.MultiheadAttention and the encoders against torch.nn, on the GPU and the reference."""
import itertools

import numpy as np
import pytest
import torch

import vkattn
from conftest import assert_close

torch.manual_seed(0)


def torch_pair(device, **kwargs):
    m = torch.nn.MultiheadAttention(**kwargs).eval()
    return m, vkattn.MultiheadAttention.from_torch(m, device=device)


MASKS = ["none", "bool_2d", "float_2d", "bool_3d", "padding_bool", "padding_float", "causal"]


def masks(kind, B, H, L, S):
    g = torch.Generator().manual_seed(1)
    blocked = torch.rand(L, S, generator=g) < 0.3
    blocked[:, 0] = False  # no fully masked row: torch gives NaN there, vkattn zeros (DESIGN.md)
    if kind == "bool_2d":
        return dict(attn_mask=blocked)
    if kind == "float_2d":
        return dict(attn_mask=torch.randn(L, S, generator=g))
    if kind == "bool_3d":
        m = torch.rand(B * H, L, S, generator=g) < 0.3
        m[..., 0] = False
        return dict(attn_mask=m)
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[:, -2:] = True
    if kind == "padding_bool":
        return dict(key_padding_mask=pad)
    if kind == "padding_float":
        return dict(key_padding_mask=torch.where(pad, -1e4, 0.0))
    if kind == "causal":
        return dict(attn_mask=torch.ones(L, S, dtype=torch.bool).triu(1))
    return {}


@pytest.mark.parametrize("kind,combined", [(k, False) for k in MASKS] + [("bool_2d", True), ("float_2d", True)])
def test_masks_match_torch(device, kind, combined):
    B, L, E, H = 2, 5, 16, 4
    m, v = torch_pair(device, embed_dim=E, num_heads=H, batch_first=True)
    x = torch.randn(B, L, E)
    kw = masks(kind, B, H, L, L)
    if combined:
        kw.update(masks("padding_bool", B, H, L, L))
    with torch.no_grad():
        out, w = m(x, x, x, **kw)
    vout, vw = v(x, x, x, **kw)
    assert_close(vout, out)
    assert_close(vw, w)


@pytest.mark.parametrize("batch_first,average", itertools.product([True, False], [True, False]))
def test_cross_attention_kdim_vdim_weights(device, batch_first, average):
    B, L, S, E, H = 3, 4, 7, 12, 3
    m, v = torch_pair(device, embed_dim=E, num_heads=H, kdim=5, vdim=9, batch_first=batch_first)
    shape = (lambda T, F: (B, T, F)) if batch_first else (lambda T, F: (T, B, F))
    q, k, val = torch.randn(*shape(L, E)), torch.randn(*shape(S, 5)), torch.randn(*shape(S, 9))
    with torch.no_grad():
        out, w = m(q, k, val, average_attn_weights=average)
    vout, vw = v(q, k, val, average_attn_weights=average)
    assert_close(vout, out)
    assert_close(vw, w)
    assert vw.shape == ((B, L, S) if average else (B, H, L, S))


@pytest.mark.parametrize("bias_kv,zero_attn", [(True, False), (False, True), (True, True)])
def test_bias_kv_and_zero_attn(device, bias_kv, zero_attn):
    m, v = torch_pair(device, embed_dim=8, num_heads=2, add_bias_kv=bias_kv, add_zero_attn=zero_attn)
    x = torch.randn(5, 2, 8)  # (L, B, E)
    with torch.no_grad():
        out, w = m(x, x, x)
    vout, vw = v(x, x, x)
    assert_close(vout, out)
    assert_close(vw, w)


def test_unbatched_without_weights_and_no_bias(device):
    m, v = torch_pair(device, embed_dim=8, num_heads=4, bias=False)
    x = torch.randn(6, 8)
    with torch.no_grad():
        out, _ = m(x, x, x, need_weights=False)
    vout, vw = v(x, x, x, need_weights=False)
    assert vw is None
    assert_close(vout, out)


def test_weights_stay_on_the_device_and_load_state_dict_replaces_them(device):
    # the first forward leaves the weights on the device; the new ones must go there, not the kept
    m, v = torch_pair(device, embed_dim=8, num_heads=2, batch_first=True)
    other = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        want, _ = m(x, x, x, need_weights=False)
        want_other, _ = other(x, x, x, need_weights=False)
    for _ in range(2):
        assert_close(v(x, x, x, need_weights=False)[0], want)
    v.load_state_dict(other.state_dict())
    assert_close(v(x, x, x, need_weights=False)[0], want_other)


@pytest.mark.parametrize("attention", ["auto", "unfused", "fused"])
def test_paths_and_is_causal(device, attention):
    m, v = torch_pair(device, embed_dim=16, num_heads=2, batch_first=True)
    x = torch.randn(2, 17, 16)
    causal = torch.ones(17, 17, dtype=torch.bool).triu(1)
    with torch.no_grad():
        out, _ = m(x, x, x, attn_mask=causal, need_weights=False)
    vout, _ = v(x, x, x, is_causal=True, need_weights=False, attention=attention)
    assert_close(vout, out)


def test_state_dict_round_trip_and_from_state_dict(device):
    m = torch.nn.MultiheadAttention(8, 2, add_bias_kv=True).eval()
    v = vkattn.MultiheadAttention.from_state_dict(m.state_dict(), num_heads=2, device=device)
    assert (v.embed_dim, v.num_heads, v.add_bias_kv, v.bias) == (8, 2, True, True)
    sd = v.state_dict()
    assert sorted(sd) == sorted(m.state_dict())
    for name, t in m.state_dict().items():
        np.testing.assert_array_equal(sd[name], t.numpy())


def test_encoder_layer_and_encoder_from_torch(device):
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, activation="gelu", norm_first=True,
                                             batch_first=True).eval()
    encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=24), 2,
                                          norm=torch.nn.LayerNorm(16), enable_nested_tensor=False).eval()
    x = torch.randn(2, 7, 16)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, -3:] = True
    with torch.no_grad():
        expected_layer = layer(x, src_key_padding_mask=pad)
        expected = encoder(x.transpose(0, 1))
    got_layer = vkattn.TransformerEncoderLayer.from_torch(layer, device=device)(x, src_key_padding_mask=pad)
    got = vkattn.TransformerEncoder.from_torch(encoder, device=device)(x.transpose(0, 1))
    assert_close(got_layer, expected_layer, atol=2e-5, rtol=2e-5)
    assert_close(got, expected, atol=2e-5, rtol=2e-5)


def test_an_encoder_layer_with_the_tanh_gelu_runs_gelu_tanh(device):
    # torch marks nn.GELU(approximate='tanh') as a gelu (activation_relu_or_gelu == 2), and its
    # fast path (eval, no grad) then runs the exact gelu; the layer's own definition, which the
    # path with grad runs, is the tanh one (outputs ~1e-4 apart)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True,
                                             activation=torch.nn.GELU(approximate="tanh")).eval()
    x = 3 * torch.randn(2, 5, 16)
    expected = layer(x).detach()
    assert_close(vkattn.TransformerEncoderLayer.from_torch(layer, device=device)(x), expected,
                 atol=2e-5, rtol=2e-5)


def test_devices_and_device_choice():
    listed = vkattn.devices()
    assert listed and any(d.chosen for d in listed)
    chosen = next(d for d in listed if d.chosen)
    by_index = vkattn.MultiheadAttention(8, 2, device=chosen.index)
    by_name = vkattn.MultiheadAttention(8, 2, device=chosen.name[:6])
    assert by_index.device == by_name.device == "gpu: " + chosen.name
    assert vkattn.MultiheadAttention(8, 2, device="cpu").device.startswith("cpu: reference")
