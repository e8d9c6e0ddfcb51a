"""vkattn.DeviceTensor: tensors kept on a device between forwards, as torch's CUDA tensors are —
sent there, taken by MultiheadAttention as they lie, its results left there, read back; a
pretrained model's outputs left there for the next module."""
import os

import numpy as np
import pytest
import torch

import vkattn
from conftest import MODELS, assert_close, definition, padded, read_safetensors


def torch_mha(embed_dim=16, num_heads=4, kdim=None, vdim=None, seed=0):
    torch.manual_seed(seed)
    return torch.nn.MultiheadAttention(embed_dim, num_heads, kdim=kdim, vdim=vdim, batch_first=True).eval()


def random(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_an_array_goes_to_the_device_and_comes_back_as_it_was(device):
    x = random(2, 5, 16)
    on = vkattn.to_device(x, device=device)
    assert isinstance(on, vkattn.DeviceTensor)
    assert on.shape == (2, 5, 16)
    assert on.device == vkattn.MultiheadAttention(16, 4, device=device).device
    assert repr(on) == f"vkattn.DeviceTensor(shape=(2, 5, 16)) on {on.device}"
    back = on.numpy()
    assert back.dtype == np.float32 and np.array_equal(back, x)
    assert np.array_equal(vkattn.to_device(torch.from_numpy(x).double(), device=device).numpy(), x)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_self_attention_on_device_tensors_is_torchs_forward(device, need_weights, average):
    t = torch_mha()
    mha = vkattn.MultiheadAttention.from_torch(t, device=device)
    x = random(3, 17, 16)
    mask = np.zeros((3, 17), dtype=bool)
    mask[1, 9:] = True
    xd = vkattn.to_device(x, device=device)
    out, weights = mha(xd, xd, xd, key_padding_mask=mask, need_weights=need_weights,
                       average_attn_weights=average)
    assert isinstance(out, vkattn.DeviceTensor) and out.shape == (3, 17, 16)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        expected, expected_weights = t(xt, xt, xt, key_padding_mask=torch.from_numpy(mask),
                                       need_weights=need_weights, average_attn_weights=average)
    assert_close(out.numpy(), expected)
    if need_weights:
        assert isinstance(weights, vkattn.DeviceTensor)
        assert_close(weights.numpy(), expected_weights)
    else:
        assert weights is None


def test_cross_attention_with_other_key_and_value_widths_on_device_tensors(device):
    t = torch_mha(kdim=6, vdim=10)
    mha = vkattn.MultiheadAttention.from_torch(t, device=device)
    q, k, v = random(2, 3, 16, seed=2), random(2, 113, 6, seed=3), random(2, 113, 10, seed=4)
    causal = np.triu(np.full((3, 113), -np.inf, dtype=np.float32), 1)
    out, _ = mha(*(vkattn.to_device(a, device=device) for a in (q, k, v)), attn_mask=causal, need_weights=False)
    with torch.no_grad():
        expected, _ = t(*(torch.from_numpy(a) for a in (q, k, v)), attn_mask=torch.from_numpy(causal),
                        need_weights=False)
    assert_close(out.numpy(), expected)


def test_unbatched_device_tensors_give_unbatched_results(device):
    t = torch_mha()
    mha = vkattn.MultiheadAttention.from_torch(t, device=device)
    x = random(7, 16)
    xd = vkattn.to_device(x, device=device)
    out, weights = mha(xd, xd, xd, key_padding_mask=np.array([False] * 6 + [True]), attn_mask=None)
    assert out.shape == (7, 16) and weights.shape == (7, 7)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        expected, expected_weights = t(xt, xt, xt, key_padding_mask=torch.tensor([False] * 6 + [True]))
    assert_close(out.numpy(), expected)
    assert_close(weights.numpy(), expected_weights)


def test_layers_chain_on_the_device_as_they_do_through_the_host(device):
    layers = [torch_mha(seed=s) for s in range(3)]
    mine = [vkattn.MultiheadAttention.from_torch(t, device=device) for t in layers]
    x = random(2, 9, 16)
    y = vkattn.to_device(x, device=device)
    for mha in mine:
        y, _ = mha(y, y, y, need_weights=False, is_causal=True)
    expected = torch.from_numpy(x)
    causal = torch.triu(torch.full((9, 9), float("-inf")), 1)
    with torch.no_grad():
        for t in layers:
            expected, _ = t(expected, expected, expected, attn_mask=causal, need_weights=False)
    assert_close(y.numpy(), expected, atol=1e-5, rtol=1e-4)


def test_device_tensors_meet_clear_errors():
    x = random(2, 5, 16)
    on_gpu, on_cpu = vkattn.to_device(x), vkattn.to_device(x, device="cpu")
    mha = vkattn.MultiheadAttention(16, 4, batch_first=True)
    with pytest.raises(vkattn.DeviceError, match=r"^query is on 'cpu: .*'; this module runs on 'gpu: .*"
                                                 r"vkattn.to_device\(array, device=...\)$"):
        mha(on_cpu, on_cpu, on_cpu)
    with pytest.raises(vkattn.ConfigError, match=r"^key and value must be vkattn.DeviceTensors too"):
        mha(on_gpu, x, x)
    with pytest.raises(vkattn.ConfigError, match=r"batch_first=False; make it with batch_first=True$"):
        vkattn.MultiheadAttention(16, 4)(on_gpu, on_gpu, on_gpu)
    with pytest.raises(vkattn.ShapeError, match=r"^forward: query \(2, 5, 16\), key \(5, 16\) and value "
                                                r"\(5, 16\) must all be batched"):
        flat = vkattn.to_device(x[0])
        mha(on_gpu, flat, flat)
    with pytest.raises(vkattn.ShapeError, match=r"out_proj|in_proj|q_proj|query"):
        wide = vkattn.to_device(random(2, 5, 8))
        mha(wide, wide, wide)
    with pytest.raises(vkattn.ConfigError, match=r"^query is a vkattn.DeviceTensor \(vkattn.DeviceTensor"
                                                 r"\(shape=\(2, 5, 16\)\) on gpu: .*\): only the attention "
                                                 r"modules' forwards"):
        mha.trace(on_gpu)


def torch_encoder(layers, norm_first=False, batch_first=True):
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=24, norm_first=norm_first,
                                             batch_first=batch_first)
    return (torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers else layer).eval()


@pytest.mark.parametrize("layers,norm_first", [(0, False), (2, True)])
def test_encoders_on_device_tensors_are_torchs(device, layers, norm_first):
    t = torch_encoder(layers, norm_first)
    mine = (vkattn.TransformerEncoder if layers else vkattn.TransformerEncoderLayer).from_torch(t, device=device)
    x = random(3, 17, 16, seed=6)
    padding = np.zeros((3, 17), dtype=bool)
    padding[2, 11:] = True
    y = mine(vkattn.to_device(x, device=device), src_key_padding_mask=padding)
    assert isinstance(y, vkattn.DeviceTensor) and y.shape == (3, 17, 16)
    with torch.no_grad():
        expected = t(torch.from_numpy(x), src_key_padding_mask=torch.from_numpy(padding))
    assert_close(y.numpy(), expected, atol=1e-5, rtol=1e-4)
    flat = mine(vkattn.to_device(x[0], device=device), mask=np.triu(np.ones((17, 17), dtype=bool), 1))
    with torch.no_grad():
        expected = t(torch.from_numpy(x[:1]), torch.triu(torch.ones(17, 17, dtype=torch.bool), 1))[0]  # the mask
    assert flat.shape == (17, 16)
    assert_close(flat.numpy(), expected, atol=1e-5, rtol=1e-4)


def test_encoders_refuse_device_tensors_they_cannot_take():
    x = vkattn.to_device(random(2, 5, 16))
    with pytest.raises(vkattn.ConfigError, match=r"^src: device tensors are batch-first"):
        vkattn.TransformerEncoderLayer.from_torch(torch_encoder(0, batch_first=False))(x)
    encoder = vkattn.TransformerEncoderLayer.from_torch(torch_encoder(0))
    with pytest.raises(vkattn.ShapeError, match=r"^TransformerEncoderLayer.forward: src \(2, 5, 8\) on the "
                                                r"backend must be float32, \(B, L, E\) batch-first or \(L, E\) "
                                                r"unbatched, with E = d_model = 16$"):
        encoder(vkattn.to_device(random(2, 5, 8)))
    with pytest.raises(vkattn.ShapeError, match=r"^TransformerEncoderLayer.forward: src_key_padding_mask"):
        encoder(x, src_key_padding_mask=np.zeros((2, 4), dtype=bool))
    with pytest.raises(vkattn.DeviceError, match=r"^src is on 'cpu: "):
        encoder(vkattn.to_device(random(2, 5, 16), device="cpu"))


def torch_decoder(layers, norm_first=False, batch_first=True):
    torch.manual_seed(7)
    layer = torch.nn.TransformerDecoderLayer(16, 4, dim_feedforward=24, norm_first=norm_first,
                                             batch_first=batch_first)
    return (torch.nn.TransformerDecoder(layer, layers) if layers else layer).eval()


@pytest.mark.parametrize("layers,norm_first", [(0, False), (2, True)])
def test_decoders_take_an_encoders_output_on_the_device_as_torchs_transformer_does(device, layers, norm_first):
    encoder, decoder = torch_encoder(1, norm_first), torch_decoder(layers, norm_first)
    mine_encoder = vkattn.TransformerEncoder.from_torch(encoder, device=device)
    mine = (vkattn.TransformerDecoder if layers else vkattn.TransformerDecoderLayer).from_torch(decoder, device=device)
    src, tgt = random(3, 17, 16, seed=8), random(3, 5, 16, seed=9)
    padding = np.zeros((3, 17), dtype=bool)
    padding[1, 12:] = True
    memory = mine_encoder(vkattn.to_device(src, device=device), src_key_padding_mask=padding)
    y = mine(vkattn.to_device(tgt, device=device), memory, memory_key_padding_mask=padding, tgt_is_causal=True,
             tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(5))
    assert isinstance(y, vkattn.DeviceTensor) and y.shape == (3, 5, 16)
    with torch.no_grad():
        kept = encoder(torch.from_numpy(src), src_key_padding_mask=torch.from_numpy(padding))
        expected = decoder(torch.from_numpy(tgt), kept, memory_key_padding_mask=torch.from_numpy(padding),
                           tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(5))
    assert_close(y.numpy(), expected, atol=1e-5, rtol=1e-4)
    memory_mask = np.triu(np.ones((5, 17), dtype=bool), 9)
    flat = mine(vkattn.to_device(tgt[0], device=device), vkattn.to_device(src[0], device=device),
                memory_mask=memory_mask)
    with torch.no_grad():
        expected = decoder(torch.from_numpy(tgt[:1]), torch.from_numpy(src[:1]),
                           memory_mask=torch.from_numpy(memory_mask))[0]
    assert flat.shape == (5, 16)
    assert_close(flat.numpy(), expected, atol=1e-5, rtol=1e-4)


def test_decoders_refuse_device_tensors_they_cannot_take():
    tgt, memory = vkattn.to_device(random(2, 5, 16)), vkattn.to_device(random(2, 7, 16))
    with pytest.raises(vkattn.ConfigError, match=r"^tgt: device tensors are batch-first"):
        vkattn.TransformerDecoderLayer.from_torch(torch_decoder(0, batch_first=False))(tgt, memory)
    decoder = vkattn.TransformerDecoderLayer.from_torch(torch_decoder(0))
    with pytest.raises(vkattn.ConfigError, match=r"^memory must be a vkattn.DeviceTensor too: give tgt and "
                                                 r"memory both as arrays or both as device tensors$"):
        decoder(tgt, random(2, 7, 16))
    with pytest.raises(vkattn.ShapeError, match=r"^TransformerDecoderLayer.forward: memory \(2, 7, 8\) has 8 "
                                                r"features but d_model=16$"):
        decoder(tgt, vkattn.to_device(random(2, 7, 8)))
    with pytest.raises(vkattn.ShapeError, match=r"^TransformerDecoderLayer.forward: tgt \(2, 5, 16\) and memory "
                                                r"\(3, 7, 16\) must share the batch size$"):
        decoder(tgt, vkattn.to_device(random(3, 7, 16)))
    with pytest.raises(vkattn.DeviceError, match=r"^memory is on 'cpu: "):
        decoder(tgt, vkattn.to_device(random(2, 7, 16), device="cpu"))


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_llama"])
def test_a_language_models_logits_stay_on_its_device_when_asked(device, name):
    model = vkattn.from_pretrained(os.path.join(MODELS, name), device=device)
    ids = model.encode("Alice was beginning to get very tired")
    for n in (0, 1):
        logits = model(ids, logits_to_keep=n, to_host=False)
        assert isinstance(logits, vkattn.DeviceTensor) and logits.device == model.device
        assert logits.shape == (1, n or len(ids), model.config["vocab_size"])
        np.testing.assert_array_equal(logits.numpy(), model(ids, logits_to_keep=n))


def test_berts_outputs_on_its_device_feed_a_module_there_as_torchs_would(device):
    """Attention pooling over BERT's tokens, the head a user trains on top: BERT's hidden states
    left on the device go into a MultiheadAttention there, against torch's BertModel and its
    nn.MultiheadAttention on the same weights."""
    folder = os.path.join(MODELS, "tiny_bert")
    bert = vkattn.from_pretrained(folder, device=device)
    train = definition("tiny_bert")
    weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    torch_bert = train.BertForMaskedLM(weights["bert.embeddings.word_embeddings.weight"].shape[0])
    torch_bert.load_state_dict(weights)
    t = torch_mha(embed_dim=64, num_heads=4)
    head = vkattn.MultiheadAttention.from_torch(t, device=device)
    texts = ["Alice was beginning to get very tired of sitting by her sister.", "The White Rabbit ran!"]
    ids, mask = padded(bert, texts)
    out = bert(texts, to_host=False)
    assert all(isinstance(x, vkattn.DeviceTensor) for x in out)
    assert out.last_hidden_state.shape == (2, ids.shape[1], 64) and out.pooler_output.shape == (2, 64)
    host = bert(texts)
    np.testing.assert_array_equal(out.last_hidden_state.numpy(), host.last_hidden_state)
    np.testing.assert_array_equal(out.pooler_output.numpy(), host.pooler_output)
    x = out.last_hidden_state
    pooled, _ = head(x, x, x, key_padding_mask=(mask == 0).numpy(), need_weights=False)
    assert isinstance(pooled, vkattn.DeviceTensor)
    with torch.no_grad():
        hidden, _ = torch_bert.bert.eval()(ids, torch.zeros_like(ids), mask)
        expected, _ = t(hidden, hidden, hidden, key_padding_mask=mask == 0, need_weights=False)
    assert_close(pooled.numpy(), expected, atol=1e-4, rtol=1e-4)


def test_a_models_device_tensors_go_to_modules_on_its_device_only():
    bert = vkattn.from_pretrained(os.path.join(MODELS, "tiny_bert"), device="cpu")
    hidden = bert("The White Rabbit ran!", to_host=False).last_hidden_state
    head = vkattn.MultiheadAttention(64, 4, batch_first=True)  # on the default GPU
    with pytest.raises(vkattn.DeviceError, match=r"query is on 'cpu: reference \(C\+\+ loops\)'; this module runs on "
                                                 r"'gpu: .*': send the array there with vkattn.to_device"):
        head(hidden, hidden, hidden)
    gpt2 = vkattn.from_pretrained(os.path.join(MODELS, "tiny_gpt2"), device="cpu")
    ids = vkattn.to_device(np.zeros((1, 3), dtype=np.float32), device="cpu")
    with pytest.raises(vkattn.ShapeError, match=r"^token ids: vkattn.DeviceTensor\(shape=\(1, 3\)\) on cpu: .* is a "
                                                r"vkattn.DeviceTensor; give ids as ints on the host"):
        gpt2(ids)
    with pytest.raises(vkattn.ConfigError, match=r"^CausalLM.forward_on_device: logits_to_keep=-1 must be >= 0"):
        gpt2("Alice", logits_to_keep=-1, to_host=False)
