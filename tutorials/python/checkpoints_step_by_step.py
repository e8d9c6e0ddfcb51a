#!/usr/bin/python3
"""Python lesson 3: GPT-2, Llama and BERT checkpoints from the Hugging Face hub, tensor by tensor.

A checkpoint folder is what the hub serves: config.json, model.safetensors, the tokenizer's files.
vkattn.from_pretrained reads one as vkattn's steps: the three models shipped in models/ — a
GPT-2, a Llama and a BERT, trained in a minute on the opening of Alice and saved exactly as the
hub saves them — are traced step by step here, and each step that differs between the recipes is
checked by hand from the trace's own tensors: GPT-2's fused c_attn split into q, k and v;
Llama's RMSNorm, its key/value heads shared by two query heads each, and its SwiGLU; BERT's token
types, its norms after each residual, its padding and its pooler. Each gives torch's numbers
(models/*/train.py defines each model in torch), and the two language models torch's greedy text.

Run: PYTHONPATH=build/python /usr/bin/python3 tutorials/python/checkpoints_step_by_step.py
     [--device D]
"""
import argparse
import importlib.util
import json
import pathlib

import numpy as np
import torch

import vkattn

MODELS = pathlib.Path(__file__).resolve().parents[2] / "models"
PROMPT = "Alice was beginning"


def torch_model(name, config):
    """models/NAME/train.py's torch definition, with the checkpoint's own weights."""
    spec = importlib.util.spec_from_file_location(f"{name}_train", MODELS / name / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    classes = {"tiny_gpt2": "GPT2LMHeadModel", "tiny_llama": "LlamaForCausalLM", "tiny_bert": "BertForMaskedLM"}
    model = getattr(train, classes[name])(config["vocab_size"])
    raw = (MODELS / name / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    header.pop("__metadata__", None)
    state = {}
    for key, e in header.items():
        chunk = data[e["data_offsets"][0]:e["data_offsets"][1]]
        if e["dtype"] == "BF16":  # bfloat16 is a float32's high half
            a = (np.frombuffer(chunk, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(chunk, "<f2").astype(np.float32)
        else:
            a = np.frombuffer(chunk, "<f4")
        state[key] = torch.from_numpy(a.reshape(e["shape"]).copy())
    model.load_state_dict(state)
    return model.eval(), state


def show_tokens(model, text):
    ids = model.encode(text)
    pieces = " | ".join(repr(model.decode([i])) for i in ids)
    print(f"{text!r} is {len(ids)} tokens {ids}:\n  {pieces}")
    return ids


def show_layer(trace, layer):
    print(f"{'#':3} {'step':38} {'op':19} output")
    for s in trace.steps:
        if s.name.startswith(f"layers.{layer}.") or not s.name.startswith("layers."):
            print(f"{s.index:<3} {s.name:38} {s.op:19} {s.shape}")
    print("    (and the same for every other layer)")


def agree(what, mine, theirs, worst):
    error = float(np.abs(np.asarray(mine) - np.asarray(theirs)).max())
    print(f"  {what}: max |difference| {error:.1e}")
    return max(worst, error)


def bert_part(device, worst):
    """tiny_bert: an encoder, on two texts of different lengths padded into one batch."""
    bert = vkattn.from_pretrained(MODELS / "tiny_bert", device=device)
    c = bert.config
    print(f"\nmodels/tiny_bert: {c['architectures'][0]}, hidden_size {c['hidden_size']}, "
          f"{c['num_attention_heads']} heads, {c['num_hidden_layers']} layers,\n"
          f"{c['parameters']} parameters stored {c['stored_dtype']}, a WordPiece vocabulary of "
          f"{c['vocab_size']}\non {bert.device}")
    texts = ["Alice was beginning to get very tired.", "The Rabbit ran!"]
    for text in texts:
        show_tokens(bert, text)
    out, trace = bert.trace(texts)
    print(f"\nthe two texts padded to one length with [PAD] (id {c['pad_token_id']}); "
          f"one forward is {len(trace.steps)} steps:")
    show_layer(trace, 0)
    _, state = torch_model("tiny_bert", c)
    print("\nWhat the BERT recipe does differently, checked from the trace:")
    types = state["bert.embeddings.token_type_embeddings.weight"].numpy()
    worst = agree("add_token_types = word + token_type_embeddings[0] (sentence A)",
                  trace["embeddings.word_embeddings"] + types[0], trace["embeddings.add_token_types"], worst)
    x, attended = trace["embeddings.LayerNorm"], trace["layers.0.self_attn.out_proj"]
    s = x + attended
    norm1 = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + c["layer_norm_eps"])
    norm1 = norm1 * state["bert.encoder.layer.0.attention.output.LayerNorm.weight"].numpy() + \
        state["bert.encoder.layer.0.attention.output.LayerNorm.bias"].numpy()
    worst = agree("norm1 = LayerNorm(x + attention(x)), after the residual",
                  norm1, trace["layers.0.norm1"], worst)
    n = len(bert.encode(texts[1]))
    alone = bert(texts[1]).last_hidden_state
    worst = agree(f"the short text padded and alone: its {n} positions (no query sees [PAD])",
                  out.last_hidden_state[1, :n], alone[0], worst)
    w, b = state["bert.pooler.dense.weight"].numpy(), state["bert.pooler.dense.bias"].numpy()
    worst = agree("pooler.tanh = tanh(dense(x[:, 0])), the [CLS] row",
                  np.tanh(out.last_hidden_state[:, 0] @ w.T + b), out.pooler_output, worst)
    reference, _ = torch_model("tiny_bert", c)
    ids = [bert.encode(t) for t in texts]
    T = len(ids[0])
    padded = torch.tensor([r + [c["pad_token_id"]] * (T - len(r)) for r in ids])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in ids])
    with torch.no_grad():
        hidden, pooled = reference.bert(padded, torch.zeros_like(padded), mask)
    worst = agree(f"tiny_bert's last_hidden_state {out.last_hidden_state.shape} against torch's",
                  out.last_hidden_state, hidden.numpy(), worst)
    return agree(f"tiny_bert's pooler_output {out.pooler_output.shape} against torch's", out.pooler_output,
                 pooled.numpy(), worst)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="a GPU index or name substring (vkattn.devices()); default: the best")
    args = parser.parse_args()
    print(__doc__.split("\n\n")[0] + "\n")
    worst = 0.0

    # ---- GPT-2 ----------------------------------------------------------------------------
    gpt2 = vkattn.from_pretrained(MODELS / "tiny_gpt2", device=args.device)
    c = gpt2.config
    print(f"models/tiny_gpt2: {c['architectures'][0]}, n_embd {c['n_embd']}, n_head {c['n_head']}, "
          f"n_layer {c['n_layer']}, activation_function {c['activation_function']},\n"
          f"{c['parameters']} parameters stored {c['stored_dtype']}\non {gpt2.device}")
    ids = show_tokens(gpt2, PROMPT)
    logits, trace = gpt2.trace(PROMPT)
    print(f"\none forward is {len(trace.steps)} steps; the first layer's, with what is around it:")
    show_layer(trace, 0)
    E = c["n_embd"]
    _, state = torch_model("tiny_gpt2", c)
    w, b = state["transformer.h.0.attn.c_attn.weight"].numpy(), state["transformer.h.0.attn.c_attn.bias"].numpy()
    print(f"\nGPT-2 stores its attention's projection as one Conv1D, c_attn.weight {tuple(w.shape)} = (in, 3·E):"
          f"\nx · W, not torch.nn.Linear's x · Wᵀ. Its columns 0…{E - 1} are q, {E}…{2 * E - 1} k, "
          f"{2 * E}…{3 * E - 1} v; vkattn\ntransposes each third into q_proj, k_proj, v_proj. From the trace:")
    x = trace["layers.0.norm1"]
    for i, name in enumerate(["q_proj", "k_proj", "v_proj"]):
        worst = agree(f"norm1 · c_attn.weight[:, {i * E}:{(i + 1) * E}] + bias against {name}",
                      x @ w[:, i * E:(i + 1) * E] + b[i * E:(i + 1) * E], trace[f"layers.0.self_attn.{name}"],
                      worst)
    worst = agree("gelu_tanh = x/2 · (1 + tanh(√(2/π)(x + 0.044715x³))), gelu_new",
                  torch.nn.functional.gelu(torch.from_numpy(trace["layers.0.linear1"]), approximate="tanh"),
                  trace["layers.0.gelu_tanh"], worst)
    print("  lm_head is wte itself (tied): no tensor of its own in the file")

    # ---- Llama ----------------------------------------------------------------------------
    llama = vkattn.from_pretrained(MODELS / "tiny_llama", device=args.device)
    c = llama.config
    H, H_kv, d = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"]
    print(f"\nmodels/tiny_llama: {c['architectures'][0]}, hidden_size {c['hidden_size']}, "
          f"{H} query heads, {H_kv} key/value heads,\nintermediate_size {c['intermediate_size']}, "
          f"{c['parameters']} parameters stored {c['stored_dtype']} (2 bytes each)\non {llama.device}")
    show_tokens(llama, PROMPT)
    logits_llama, trace = llama.trace(PROMPT)
    print(f"\none forward is {len(trace.steps)} steps; the first layer's:")
    show_layer(trace, 0)
    print(f"its weights take {llama.device_bytes / 1024:.1f} KiB on the device: "
          + ("its matrices stay 16-bit,\nwidened to fp32 as each step reads them"
             if llama.device_bytes < 2 * c["stored_bytes"] else "all widened to float32"))
    _, state = torch_model("tiny_llama", c)
    print("\nWhat the Llama recipe does differently, checked from the trace:")
    x = trace["embed_tokens"]
    g = state["model.layers.0.input_layernorm.weight"].numpy()
    worst = agree("input_layernorm = x / √(mean(x²) + eps) · weight (no mean, no bias)",
                  x / np.sqrt((x ** 2).mean(-1, keepdims=True) + c["rms_norm_eps"]) * g,
                  trace["layers.0.input_layernorm"], worst)
    k = trace["layers.0.self_attn.rotary_embedding_k"]
    q = trace["layers.0.self_attn.rotary_embedding_q"]
    print(f"  q {q.shape} has {H} heads, k {k.shape} {H_kv}: query heads 0 and 1 read key head 0, "
          f"2 and 3\n  key head 1, without k being copied")
    gate, up = trace["layers.0.mlp.gate_proj"], trace["layers.0.mlp.up_proj"]
    worst = agree("mlp.multiply = silu(gate_proj) · up_proj (SwiGLU)", gate / (1 + np.exp(-gate)) * up,
                  trace["layers.0.mlp.multiply"], worst)

    # ---- against torch ---------------------------------------------------------------------
    print("\nEach against torch running the same weights (models/*/train.py's definitions):")
    for name, model, got in [("tiny_gpt2", gpt2, logits), ("tiny_llama", llama, logits_llama)]:
        reference, _ = torch_model(name, model.config)
        with torch.no_grad():
            expected = reference(torch.tensor([ids])).numpy()
        worst = agree(f"{name} logits {got.shape}", got, expected, worst)
        expected_json = json.loads((MODELS / name / "expected.json").read_text())
        text = model.generate(PROMPT, max_new_tokens=12)
        same = text == expected_json["text"][:len(text)]
        print(f"  {name} continues {PROMPT!r} with\n    {text!r}: torch's greedy text: {same}")
        worst = worst if same else float("inf")

    worst = bert_part(args.device, worst)

    print("\nWhat to notice: a checkpoint is a recipe's weights under its authors' names; vkattn reads\n"
          "each name into one of its steps, so a GPT-2, a Llama and a BERT are traced as the 2017\n"
          "block is. GPT-2 differs in layout (Conv1D's (in, out)) and activation; Llama in its norm,\n"
          "its positions (RoPE on q and k, nothing added to x), its shared key/value heads and its\n"
          "SwiGLU; BERT reads the whole text at once (no causal mask), adds token types, normalises\n"
          "after each residual, and pools its [CLS] row.")
    print(f"\nlargest difference from the hand-made or torch values: {worst:.1e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
