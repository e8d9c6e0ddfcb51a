"""vkattn.from_pretrained on models/tiny_gpt2 and tiny_llama (GPT-2's and Llama's architectures,
saved as the hub saves them) against torch running the same weights from the models' definitions
(models/*/train.py), on both backends: text and ids in, every position's logits, greedy
generation, the trace's steps; and Qwen3's checkpoint as tiny_llama's weights with q/k norms,
Qwen2's with its window in some layers, Phi-3's packed, Gemma's."""
import json
import math
import os
import shutil

import numpy as np
import pytest
import torch
from torch import nn

import vkattn
from conftest import MODELS, assert_close, definition, gemma_folder, read_safetensors

MODEL = os.path.join(MODELS, "tiny_gpt2")


@pytest.fixture(scope="module", params=["tiny_gpt2", "tiny_llama"])
def models(request):
    """(its folder, torch's model of the same weights)"""
    folder = os.path.join(MODELS, request.param)
    with open(os.path.join(folder, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    train = definition(request.param)
    model = (train.GPT2LMHeadModel if request.param == "tiny_gpt2" else train.LlamaForCausalLM)(vocab_size)
    model.load_state_dict(read_safetensors(os.path.join(folder, "model.safetensors")))
    return folder, model.eval()


def test_every_positions_logits_match_torchs_for_text_and_ids(device, models):
    folder, torch_model = models
    model = vkattn.from_pretrained(folder, device=device)
    ids = model.encode("Alice was beginning to get very tired")
    assert model.decode(ids) == "Alice was beginning to get very tired"
    with torch.no_grad():
        expected = torch_model(torch.tensor([ids, ids[::-1]]))
    assert_close(model(np.array([ids, ids[::-1]])), expected, atol=1e-4, rtol=1e-4)
    assert_close(model("Alice was beginning to get very tired"), expected[:1], atol=1e-4, rtol=1e-4)
    assert_close(model(torch.tensor(ids)), expected[:1], atol=1e-4, rtol=1e-4)


def test_logits_to_keep_gives_the_last_positions_logits_as_hugging_faces(device, models):
    folder, torch_model = models
    model = vkattn.from_pretrained(folder, device=device)
    ids = model.encode("Alice was beginning to get very tired")
    with torch.no_grad():
        expected = torch_model(torch.tensor([ids, ids[::-1]]))  # (2, T, V)
    for n in (1, 3, len(ids), len(ids) + 5):  # as hidden_states[:, -n:, :]: n >= T keeps every position
        logits = model(np.array([ids, ids[::-1]]), logits_to_keep=n)
        assert logits.shape == (2, min(n, len(ids)), expected.shape[2])
        assert_close(logits, expected[:, -n:], atol=1e-4, rtol=1e-4)
    with pytest.raises(vkattn.ConfigError, match=r"logits_to_keep=-1 must be >= 0"):
        model(ids, logits_to_keep=-1)


def test_the_config_is_config_json_with_what_vkattn_read():
    gpt2 = vkattn.from_pretrained(MODEL)
    assert gpt2.config["architecture"] == "GPT2LMHeadModel" and gpt2.config["activation_function"] == "gelu_new"
    assert "gelu_tanh" in gpt2.config["model"] and gpt2.config["stored_dtype"] == "F32"
    llama = vkattn.from_pretrained(os.path.join(MODELS, "tiny_llama"))
    assert llama.config["num_key_value_heads"] == 2 and llama.config["stored_dtype"] == "BF16"


def test_a_sixteen_bit_checkpoints_matrices_take_two_bytes_each_on_a_gpu():
    """tiny_llama (BF16): on a Vulkan device its matrices stay 16-bit, so its weights take about
    the bytes of its file; the CPU reference widens all of them to float32."""
    for device in ("gpu", "cpu"):
        llama = vkattn.from_pretrained(os.path.join(MODELS, "tiny_llama"), device=device)
        assert llama.device_bytes == 0
        llama("Alice was")
        parameters, stored = llama.config["parameters"], llama.config["stored_bytes"]
        if llama.device.startswith("gpu"):
            assert stored < llama.device_bytes < 1.01 * stored  # the norms' few vectors as float32
        else:
            assert llama.device_bytes == 4 * parameters


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_weights_rounded_to_16_bits_take_half_the_bytes_and_give_their_rounded_copys_logits(device, dtype):
    """An F32 checkpoint with weights_dtype="bfloat16" or "float16": torch's model.to(dtype)
    weights, kept 16-bit on a GPU; the logits those rounded weights give in float32."""
    train = definition("tiny_gpt2")
    torch_model = train.GPT2LMHeadModel(513)
    torch_model.load_state_dict(read_safetensors(os.path.join(MODEL, "model.safetensors")))
    torch_model = torch_model.to(dtype).float().eval()
    gpt2 = vkattn.from_pretrained(MODEL, device=device, weights_dtype=dtype)
    ids = gpt2.encode("Alice was beginning")
    with torch.no_grad():
        expected = torch_model(torch.tensor([ids]))
    assert_close(gpt2(ids), expected, atol=1e-4, rtol=1e-4)
    as_stored = vkattn.from_pretrained(MODEL, device=device)
    as_stored(ids)
    if gpt2.device.startswith("gpu"):
        assert gpt2.device_bytes < 0.55 * as_stored.device_bytes
    else:
        assert gpt2.device_bytes == as_stored.device_bytes
    with pytest.raises(vkattn.ConfigError, match="weights_dtype 'int8' is not one vkattn rounds"):
        vkattn.from_pretrained(MODEL, device="cpu", weights_dtype="int8")


def test_transformerlens_hook_names_give_its_tensors():
    """Each hook against TransformerLens's definition of it, computed here from tiny_gpt2's torch
    modules: (batch, pos, head, d_head) for q, k, v and z, the masked scores, the pattern, the
    residual stream before, between and after the blocks."""
    train = definition("tiny_gpt2")
    torch_model = train.GPT2LMHeadModel(513)
    torch_model.load_state_dict(read_safetensors(os.path.join(MODEL, "model.safetensors")))
    gpt2 = vkattn.from_pretrained(MODEL, device="cpu")
    ids = gpt2.encode("Alice was beginning")
    _, trace = gpt2.trace(ids, attention="unfused")
    cache = trace.hooks()
    T, E, H = len(ids), 64, 4
    assert list(cache)[:4] == ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_resid_mid"]
    assert len(cache) == 2 + 2 * 15 + 1 and list(cache)[-1] == "ln_final.hook_normalized"
    t = torch_model.transformer
    expected = {}
    with torch.no_grad():
        expected["hook_embed"] = t.wte(torch.tensor([ids]))
        expected["hook_pos_embed"] = t.wpe(torch.arange(T))[None]
        resid = expected["hook_embed"] + expected["hook_pos_embed"]
        for i, block in enumerate(t.h):
            b = f"blocks.{i}."
            expected[b + "hook_resid_pre"] = resid
            expected[b + "ln1.hook_normalized"] = block.ln_1(resid)
            q, k, v = (a.view(1, T, H, E // H) for a in block.attn.c_attn(block.ln_1(resid)).split(E, dim=2))
            expected[b + "attn.hook_q"], expected[b + "attn.hook_k"], expected[b + "attn.hook_v"] = q, k, v
            scores = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2) / math.sqrt(E // H)
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            expected[b + "attn.hook_attn_scores"] = scores
            expected[b + "attn.hook_pattern"] = scores.softmax(-1)
            z = (scores.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2)
            expected[b + "attn.hook_z"] = z
            expected[b + "hook_attn_out"] = block.attn.c_proj(z.reshape(1, T, E))
            resid = expected[b + "hook_resid_mid"] = resid + expected[b + "hook_attn_out"]
            expected[b + "ln2.hook_normalized"] = block.ln_2(resid)
            expected[b + "mlp.hook_pre"] = block.mlp.c_fc(block.ln_2(resid))
            expected[b + "mlp.hook_post"] = train.gelu_new(expected[b + "mlp.hook_pre"])
            expected[b + "hook_mlp_out"] = block.mlp.c_proj(expected[b + "mlp.hook_post"])
            resid = expected[b + "hook_resid_post"] = resid + expected[b + "hook_mlp_out"]
        expected["ln_final.hook_normalized"] = t.ln_f(resid)
    assert set(cache) == set(expected)
    for name, want in expected.items():
        assert_close(cache[name], want, atol=1e-5, rtol=1e-4)
        np.testing.assert_array_equal(trace[name], cache[name])
    # a TransformerLens-style cache checked against the model: agreeing, then each mistake named
    report = vkattn.check(expected, gpt2, ids)
    assert report.ok and report.first_divergent is None, str(report)
    assert "check: 33 of 33 hooks of GPT2LMHeadModel compared" in str(report)
    wrong = dict(expected)
    wrong["blocks.1.attn.hook_pattern"] = expected["blocks.1.attn.hook_pattern"] * 1.01
    wrong["blocks.0.attn.hook_q"] = expected["blocks.0.attn.hook_q"].transpose(1, 2)  # (batch, head, pos, d)
    wrong["resid_pre"] = expected["hook_embed"]
    report = gpt2.check(wrong, ids)
    assert not report.ok and report.first_divergent["name"] == "blocks.0.attn.hook_q", str(report)
    assert "heads before positions" in str(report) and "not hooks vkattn knows: resid_pre" in str(report)
    assert [s["name"] for s in report.steps if s["verdict"] == "differs"] == [
        "blocks.0.attn.hook_q", "blocks.1.attn.hook_pattern"]
    assert max(len(line) for line in str(report).splitlines()) <= 100
    _, fused = gpt2.trace(ids)  # the pattern is not a step of the fused path
    with pytest.raises(KeyError, match="attention='unfused'"):
        fused["blocks.0.attn.hook_pattern"]
    assert_close(fused["blocks.1.attn.hook_z"], expected["blocks.1.attn.hook_z"], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    # Llama 3.1's kind, its bands moved to the tiny model's wavelengths (2π … 2π·10000^(7/8)):
    # pair 0 kept (6.3 < 32 / 4), pair 1 blended (19.9), the rest divided by 8 (> 32)
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 32}])
def test_rope_scaling_matches_hugging_faces_frequencies(tmp_path, device, scaling):
    folder = tmp_path / "scaled"
    shutil.copytree(os.path.join(MODELS, "tiny_llama"), folder, ignore=shutil.ignore_patterns("*.py"))
    config = json.loads((folder / "config.json").read_text())
    config["rope_scaling"] = scaling
    (folder / "config.json").write_text(json.dumps(config))
    train = definition("tiny_llama")
    D, theta = train.D, train.THETA
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    if scaling["rope_type"] == "linear":
        inv_freq = inv_freq / scaling["factor"]
    else:  # Hugging Face's _compute_llama3_parameters
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        inv_freq = torch.where(medium, smoothed, scaled)

    def rope(x, positions):  # train.py's, with these frequencies
        freqs = positions[:, None].float() * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos() + train.rotate_half(x) * emb.sin()

    train.rope = rope
    model = train.LlamaForCausalLM(config["vocab_size"])
    model.load_state_dict(read_safetensors(os.path.join(folder, "model.safetensors")))
    ids = list(range(3, 40))
    with torch.no_grad():
        expected = model.eval()(torch.tensor([ids]))
    got = vkattn.from_pretrained(folder, device=device)(ids)
    assert_close(got, expected, atol=1e-4, rtol=1e-4)
    plain = vkattn.from_pretrained(os.path.join(MODELS, "tiny_llama"), device=device)(ids)
    assert np.abs(plain - got).max() > 1e-2  # the scaling changed the numbers


def tiny_llama_as(tmp_path, repack, **settings):
    """models/tiny_llama saved in tmp_path/MODEL_TYPE as another architecture: `settings` over its
    config.json, its weights (name -> torch tensor) changed by `repack` before they are written.
    (its folder, its config, those weights)"""
    from article_safetensors import save_safetensors
    folder = tmp_path / settings["model_type"]
    shutil.copytree(os.path.join(MODELS, "tiny_llama"), folder, ignore=shutil.ignore_patterns("*.py"))
    config = {**json.loads((folder / "config.json").read_text()), **settings}
    (folder / "config.json").write_text(json.dumps(config))
    state = read_safetensors(folder / "model.safetensors")
    repack(state)
    save_safetensors(state, folder / "model.safetensors", {"format": "pt"})
    return folder, config, state


def held_to(model, folder, device, ids):
    """vkattn's model of `folder` and its logits for `ids`, held to torch's `model` (1e-4)."""
    with torch.no_grad():
        expected = model.eval()(torch.tensor([ids]))
    ours = vkattn.from_pretrained(folder, device=device)
    got = ours(ids)
    assert_close(got, expected, atol=1e-4, rtol=1e-4)
    return ours, got


def test_qwen3_normalises_each_heads_q_and_k_as_torch_does(tmp_path, device):
    """Qwen3ForCausalLM: tiny_llama's weights and, in each layer, q_norm and k_norm (RMSNorm over a
    head's d features, rms_norm_eps, before RoPE), against train.py's Llama with them added."""
    train = definition("tiny_llama")

    def add_norms(state):
        torch.manual_seed(0)
        for i in range(train.LAYERS):
            for which in ("q_norm", "k_norm"):  # about 1, as trained ones are; all ones would hide a swap
                state[f"model.layers.{i}.self_attn.{which}.weight"] = 1 + 0.5 * torch.rand(train.D)

    folder, config, state = tiny_llama_as(tmp_path, add_norms, architectures=["Qwen3ForCausalLM"], model_type="qwen3")

    def head_norm(x, weight):  # Qwen3RMSNorm on (B, heads, T, d)
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + train.EPS))

    def forward(self, x):  # train.py's Attention.forward with Qwen3's two lines
        return attention(train, self, x, qk_norm=lambda q, k: (head_norm(q, self.q_norm.weight),
                                                              head_norm(k, self.k_norm.weight)))

    train.Attention.forward = forward
    model = train.LlamaForCausalLM(config["vocab_size"])
    for layer in model.model.layers:
        layer.self_attn.q_norm, layer.self_attn.k_norm = torch.nn.Module(), torch.nn.Module()
        for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
            norm.weight = torch.nn.Parameter(torch.ones(train.D))
    model.load_state_dict(state)
    ids = list(range(3, 40))
    qwen3, got = held_to(model, folder, device, ids)
    assert qwen3.config["architectures"] == ["Qwen3ForCausalLM"]
    plain = vkattn.from_pretrained(os.path.join(MODELS, "tiny_llama"), device=device)(ids)
    assert np.abs(plain - got).max() > 1e-2  # the norms changed the numbers


def attention(train, self, x, qk_norm=None, window=0, qkv=None, rope=None):
    """train.py's Attention.forward, with Qwen3's q and k norms before RoPE where `qk_norm` is
    given, each query seeing only the `window` keys up to its own where it is not 0 (Hugging
    Face's sliding-window mask: key j is seen from query i when i - window < j <= i), q, k and v
    (B, T, ·) from `qkv(x)` and RoPE by `rope` where they are given."""
    B, T, _ = x.shape
    q, k, v = qkv(x) if qkv else (self.q_proj(x), self.k_proj(x), self.v_proj(x))
    q = q.view(B, T, train.HEADS, train.D).transpose(1, 2)
    k = k.view(B, T, train.KV_HEADS, train.D).transpose(1, 2)
    v = v.view(B, T, train.KV_HEADS, train.D).transpose(1, 2)
    if qk_norm:
        q, k = qk_norm(q, k)
    positions = torch.arange(T)
    rope = rope or train.rope
    q, k = rope(q, positions), rope(k, positions)
    k, v = (t.repeat_interleave(train.HEADS // train.KV_HEADS, dim=1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(train.D)
    hidden = torch.ones(T, T, dtype=torch.bool).triu(1)
    if window:
        hidden |= torch.ones(T, T, dtype=torch.bool).tril(-window)
    scores = scores.masked_fill(hidden, float("-inf"))
    return self.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, train.HEADS * train.D))


@pytest.mark.parametrize("layers", [{"max_window_layers": 1},
                                    {"layer_types": ["sliding_attention", "full_attention"]}],
                         ids=["max_window_layers", "layer_types"])
def test_qwen2s_window_is_in_the_layers_its_config_names_as_in_hugging_faces(tmp_path, device, layers):
    """Qwen2ForCausalLM with use_sliding_window: a window of 4 keys only in the layers from
    max_window_layers on, or in those layer_types calls sliding_attention (Qwen2Config's rule),
    the others attending to every key; against train.py's Llama with the window in those layers
    (Qwen2's q/k/v biases zero), every position's logits and the greedy tokens through the cache."""
    train = definition("tiny_llama")

    def add_biases(state):
        for i in range(train.LAYERS):
            for proj, size in (("q_proj", train.HEADS * train.D), ("k_proj", train.KV_HEADS * train.D),
                               ("v_proj", train.KV_HEADS * train.D)):
                state[f"model.layers.{i}.self_attn.{proj}.bias"] = torch.zeros(size)

    folder, config, _ = tiny_llama_as(tmp_path, add_biases, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                                      use_sliding_window=True, sliding_window=4, **layers)
    windowed = [1] if "max_window_layers" in layers else [0]
    model = train.LlamaForCausalLM(config["vocab_size"])
    model.load_state_dict(read_safetensors(os.path.join(MODELS, "tiny_llama", "model.safetensors")))

    def window_in(layers_windowed):  # torch's model with the window of 4 in those layers alone
        for i, layer in enumerate(model.model.layers):
            window = 4 if i in layers_windowed else 0
            layer.self_attn.forward = lambda x, a=layer.self_attn, w=window: attention(train, a, x, window=w)
        return model.eval()

    ids = list(range(3, 40))
    with torch.no_grad():
        expected = window_in(windowed)(torch.tensor([ids]))
        elsewhere = [window_in(other)(torch.tensor([ids])) for other in ([0, 1], [])]  # every layer, none
    qwen2 = vkattn.from_pretrained(folder, device=device)
    assert f"window 4 in layer {windowed[0]}" in qwen2.config["model"]
    got = qwen2(ids)
    assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert all(np.abs(other.numpy() - got).max() > 1e-2 for other in elsewhere)
    assert qwen2.generate(ids[:8], max_new_tokens=6) == expected_tokens(window_in(windowed), ids[:8], 6)


def test_phi3_reads_its_packed_projections_as_torch_does(tmp_path, device):
    """Phi3ForCausalLM: tiny_llama's weights packed as Phi-3 packs them (qkv_proj: q_proj's rows,
    then k_proj's, then v_proj's; gate_up_proj: gate_proj's then up_proj's) with RoPE on half of
    each head (partial_rotary_factor 0.5), against train.py's Llama with Phi3Attention's split of
    qkv_proj's output, Phi3MLP's chunks and Phi-3's partial rotation: logits and greedy tokens."""
    train = definition("tiny_llama")
    H, H_kv, D = train.HEADS, train.KV_HEADS, train.D

    def pack(state):
        for i in range(train.LAYERS):
            n = f"model.layers.{i}."
            packed = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                      "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
            for name, parts in packed.items():
                state[n + name + ".weight"] = torch.cat([state.pop(n + p + ".weight") for p in parts])

    folder, config, state = tiny_llama_as(tmp_path, pack, architectures=["Phi3ForCausalLM"], model_type="phi3",
                                          partial_rotary_factor=0.5)

    turned = D // 2

    def rope(x, positions):  # Phi-3's apply_rotary_pos_emb: the first `turned` features of a head
        inv_freq = 1.0 / (train.THETA ** (torch.arange(0, turned, 2, dtype=torch.float32) / turned))
        freqs = positions[:, None].float() * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        x_rot, x_pass = x[..., :turned], x[..., turned:]
        halves = torch.cat((-x_rot[..., turned // 2:], x_rot[..., :turned // 2]), dim=-1)
        return torch.cat((x_rot * emb.cos() + halves * emb.sin(), x_pass), dim=-1)

    def split(self, x):  # Phi3Attention.forward: qkv_proj's output cut at H·d and (H + H_kv)·d
        qkv = self.qkv_proj(x)
        return qkv[..., :H * D], qkv[..., H * D:(H + H_kv) * D], qkv[..., (H + H_kv) * D:]

    def mlp(self, x):  # Phi3MLP.forward
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * nn.functional.silu(gate))

    model = train.LlamaForCausalLM(config["vocab_size"])
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        del a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj
        a.qkv_proj = nn.Linear(train.E, (H + 2 * H_kv) * D, bias=False)
        m.gate_up_proj = nn.Linear(train.E, 2 * train.FF, bias=False)
        a.forward = lambda x, a=a: attention(train, a, x, qkv=lambda y: split(a, y), rope=rope)
        m.forward = lambda x, m=m: mlp(m, x)
    model.load_state_dict(state)
    ids = list(range(3, 40))
    phi3, _ = held_to(model, folder, device, ids)
    assert phi3.config["architectures"] == ["Phi3ForCausalLM"]
    assert "RoPE θ=10000,\n    RoPE on 8 of each head's 16 features," in phi3.config["model"]
    assert phi3.generate(ids[:5], max_new_tokens=4) == expected_tokens(model, ids[:5], 4)


def test_gemma_scales_its_embeddings_and_norms_and_gates_with_gelu_as_torch_does(tmp_path, device):
    """GemmaForCausalLM: tiny_llama's weights saved as Gemma's (lm_head tied to embed_tokens, as
    Gemma's), against train.py's Llama with Gemma's four lines: the embeddings times √E, each
    RMSNorm times 1 + weight, gelu's tanh approximation in the MLP's gate, the tied head."""
    folder = gemma_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    train = definition("tiny_llama")
    state = read_safetensors(folder / "model.safetensors")
    train.RMSNorm.forward = lambda self, x: (1.0 + self.weight) * (
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + train.EPS))
    train.MLP.forward = lambda self, x: self.down_proj(
        nn.functional.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))
    embed = train.LlamaModel.forward
    normalizer = torch.tensor(train.E ** 0.5, dtype=torch.float32)

    def forward(self, ids):  # GemmaModel's: the embeddings times √E before the first layer
        self.embed_tokens.forward = lambda i: nn.functional.embedding(i, self.embed_tokens.weight) * normalizer
        return embed(self, ids)

    train.LlamaModel.forward = forward
    model = train.LlamaForCausalLM(config["vocab_size"])
    model.lm_head.weight = model.model.embed_tokens.weight  # tied: the file has no lm_head
    model.load_state_dict({**state, "lm_head.weight": state["model.embed_tokens.weight"]})
    ids = list(range(3, 40))
    with torch.no_grad():
        expected = model.eval()(torch.tensor([ids]))
    gemma = vkattn.from_pretrained(folder, device=device)
    assert_close(gemma(ids), expected, atol=1e-4, rtol=1e-4)
    assert "GeGLU (tanh)" in gemma.config["model"] and "embeddings times 8" in gemma.config["model"]
    assert gemma.generate(ids[:5], max_new_tokens=4) == expected_tokens(model, ids[:5], 4)


def expected_tokens(model, ids, n):
    """torch's greedy continuation of ids, n tokens, computed over the whole sequence each time."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[-n:]


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_llama"])
def test_generate_continues_as_torchs_greedy_choice(device, name):
    with open(os.path.join(MODELS, name, "expected.json")) as f:
        expected = json.load(f)
    model = vkattn.from_pretrained(os.path.join(MODELS, name), device=device)
    assert model.generate(expected["prompt"], max_new_tokens=expected["new_tokens"]) == expected["text"]
    assert model.generate(expected["prompt_ids"], max_new_tokens=5) == expected["tokens"][:5]


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_llama"])
@pytest.mark.parametrize("cache_dtype", [torch.float16, "bfloat16"], ids=["float16", "bfloat16"])
def test_a_sixteen_bit_cache_still_gives_torchs_greedy_tokens(device, name, cache_dtype):
    # torch's tokens from a float32 cache: the cache's rounding (test_decoding: logits within 1e-3
    # with float16, 1e-2 with bfloat16) changes no greedy choice of these (Llama's: 4 query heads
    # reading 2 cached key/value heads)
    with open(os.path.join(MODELS, name, "expected.json")) as f:
        expected = json.load(f)
    model = vkattn.from_pretrained(os.path.join(MODELS, name), device=device)
    tokens = model.generate(expected["prompt_ids"], max_new_tokens=len(expected["tokens"]), cache_dtype=cache_dtype)
    assert tokens == expected["tokens"]
    with pytest.raises(vkattn.ConfigError, match="cache_dtype 'int8' is not one a KV cache keeps"):
        model.generate("Alice", 3, cache_dtype="int8")


def test_sampling_is_the_same_for_the_same_seed_and_top_k_1_is_greedy():
    gpt2 = vkattn.from_pretrained(MODEL)
    sample = lambda seed: gpt2.generate("Alice", max_new_tokens=30, temperature=1.5, top_k=10, seed=seed)
    assert sample(1) == sample(1) != sample(2)
    assert gpt2.generate("Alice", 30, temperature=5.0, top_k=1, seed=3) == gpt2.generate("Alice", 30)
    with pytest.raises(vkattn.ConfigError, match="temperature=-1"):
        gpt2.generate("Alice", 3, temperature=-1)


def test_the_trace_holds_every_step_of_every_layer():
    gpt2 = vkattn.from_pretrained(MODEL)
    logits, trace = gpt2.trace("Alice was")
    names = [s.name for s in trace.steps]
    assert names[:3] == ["token_embedding", "position_embedding", "layers.0.norm1"]
    assert "layers.1.gelu_tanh" in names and names[-1] == "lm_head"
    np.testing.assert_array_equal(trace["lm_head"], logits)
    # unfused: each layer's pattern is a step, its rows summing to 1, the same logits
    unfused, steps = gpt2.trace("Alice was", attention="unfused")
    pattern = steps["layers.1.self_attn.softmax"]
    assert pattern.shape == (1, 4, 2, 2) and "layers.1.self_attn.flash_attention" not in [s.name for s in steps.steps]
    np.testing.assert_allclose(pattern.sum(-1), 1, atol=1e-6)
    assert_close(unfused, logits, atol=1e-5, rtol=1e-5)


def test_bad_folders_and_ids_are_one_line_errors(tmp_path):
    with pytest.raises(vkattn.FileError, match="no config.json"):
        vkattn.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["T5Model"], "model_type": "t5"}')
    with pytest.raises(vkattn.ConfigError, match="architecture 'T5Model'"):
        vkattn.from_pretrained(tmp_path)
    gpt2 = vkattn.from_pretrained(MODEL, device="cpu")
    with pytest.raises(vkattn.ShapeError, match="token id 600 .* outside the vocabulary"):
        gpt2([1, 600])
    with pytest.raises(vkattn.ShapeError, match="token id 9223372036854775807 at index 1"):
        gpt2([1, 2 ** 63 - 1])  # past float's exact integers: refused before it becomes one
    with pytest.raises(vkattn.ShapeError, match="dtype float"):
        gpt2(np.array([1.5]))
    with pytest.raises(vkattn.ShapeError, match="need 129 positions; the model has 128"):
        gpt2.generate([1], max_new_tokens=128)
