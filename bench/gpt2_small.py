#!/usr/bin/python3
"""Tokens per second of a GPT-2-small-shaped model with the KV cache: vkattn against PyTorch on the
CPU, in one run, the prompt and the decoding apart.

The model is GPT-2 small's shape — 12 layers, E 768, 12 heads, 1024 positions — with random
weights (models/tiny_gpt2/train.py's definition at that size, GPT-2's initialisation), written to a
temporary folder as the hub lays out GPT-2 (model.safetensors F32, or with --dtype BF16 its weights
rounded to bfloat16 and stored so, as Llama-family checkpoints are; config.json, vocab.json and
merges.txt). Its vocabulary is GPT-2's first --vocab tokens (its 256 bytes, then a token a merge,
in merge order, and <|endoftext|> last) with their merges: with all 50,257 (124 M parameters) the
F32 embedding is 147 MiB, over the 128 MiB one buffer may hold on lavapipe
(maxStorageBufferRange), and vkattn refuses it there by name; as BF16, kept 16-bit on the device,
it is 74 MiB and runs. The default 32,768 makes 111 M parameters. Then:
  - torch (eval, no_grad, float32 from the same rounded weights): the prompt's forward filling a
    KV cache written here from the same
    weights (each layer's keys and values in preallocated (1, H, capacity, d) tensors), then one
    token at a time, greedy;
  - vkattn: `vkattn generate --model FOLDER --json` twice — the first run makes the pipelines and
    measures its plans (remembered in the plan cache), the second is reported.
Both continue the same prompt's ids for the same number of tokens; the table says how many of
vkattn's greedy tokens are torch's (random weights leave small margins between the top two).

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/gpt2_small.py \\
      [--vkattn build/bin/vkattn] [--new-tokens 32] [--vocab 32768] [--backend gpu|cpu] [--dtype F32|BF16]
      [--torch-device cpu|cuda]

On a machine with a GPU, --torch-device cuda runs torch there (float32, TF32 off), the same weights
and cache, each step's time taken after torch.cuda.synchronize() (scripts/gpu run does).
"""
import argparse
import importlib.util
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "golden"))
from compare import blas_warning, environment  # noqa: E402  sets OMP_NUM_THREADS before torch
from generate import save_safetensors  # noqa: E402

import torch  # noqa: E402

PROMPT = ("Alice was beginning to get very tired of sitting by her sister on the bank, and of having "
          "nothing to do: once or twice she had peeped into the book her sister was reading")


def gpt2_definition():
    """models/tiny_gpt2/train.py at GPT-2 small's size (its classes read the sizes when built)."""
    spec = importlib.util.spec_from_file_location("tiny_gpt2_train", ROOT / "models" / "tiny_gpt2" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    train.E, train.HEADS, train.LAYERS, train.POSITIONS = 768, 12, 12, 1024
    return train


def gpt2_tokenizer(size):
    """GPT-2's first `size` tokens, <|endoftext|> last, and the merges that make them."""
    data = ROOT / "tests" / "data" / "gpt2_tokenizer"
    full = json.loads((data / "vocab.json").read_text())
    vocab = {token: i for token, i in full.items() if i < size - 1}
    vocab["<|endoftext|>"] = size - 1
    merges = [tuple(line.split()) for line in (data / "merges.txt").read_text().splitlines()[1:] if line]
    return vocab, merges[:size - 1 - 256]


def write_folder(folder, model, vocab, merges, dtype, layers=12):
    vocab_size = len(vocab)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "bos_token_id": vocab_size - 1, "eos_token_id": vocab_size - 1, "layer_norm_epsilon": 1e-05, "n_ctx": 1024,
              "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": layers, "n_positions": 1024,
              "vocab_size": vocab_size, "torch_dtype": "bfloat16" if dtype == "BF16" else "float32"}
    (folder / "config.json").write_text(json.dumps(config))
    save_safetensors(model.state_dict(), folder / "model.safetensors", {"format": "pt"}, dtype)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


class CachedGPT2:
    """GPT-2's forward over the positions after those its cache holds, from the model's weights."""

    def __init__(self, model, capacity, heads):
        self.t = model.transformer
        self.E = self.t.wte.weight.shape[1]
        self.H, self.d = heads, self.E // heads
        device = self.t.wte.weight.device
        self.k = [torch.zeros(1, self.H, capacity, self.d, device=device) for _ in self.t.h]
        self.v = [torch.zeros(1, self.H, capacity, self.d, device=device) for _ in self.t.h]
        self.length = 0

    def __call__(self, ids):  # ids (1, T) -> the last position's logits (V,)
        T, p = ids.shape[1], self.length
        x = self.t.wte(ids) + self.t.wpe.weight[p:p + T]
        for block, k_cache, v_cache in zip(self.t.h, self.k, self.v):
            q, k, v = block.attn.c_attn(block.ln_1(x)).split(self.E, dim=2)
            q, k, v = (a.view(1, T, self.H, self.d).transpose(1, 2) for a in (q, k, v))
            k_cache[:, :, p:p + T], v_cache[:, :, p:p + T] = k, v
            scores = q @ k_cache[:, :, :p + T].transpose(-1, -2) / math.sqrt(self.d)
            if T > 1:  # the prompt: each position sees those up to it
                blocked = torch.ones(T, p + T, dtype=torch.bool, device=x.device).triu(p + 1)
                scores = scores.masked_fill(blocked, float("-inf"))
            y = (scores.softmax(-1) @ v_cache[:, :, :p + T]).transpose(1, 2).reshape(1, T, self.E)
            x = x + block.attn.c_proj(y)
            x = x + block.mlp(block.ln_2(x))
        self.length += T
        return (self.t.ln_f(x[:, -1]) @ self.t.wte.weight.T)[0]


def torch_generate(model, prompt_ids, new_tokens, device, heads=12):
    """(prompt ms, ms per new token: the median, the tokens), torch on `device`"""
    cached = CachedGPT2(model.to(device), len(prompt_ids) + new_tokens, heads)

    def timed(ids):  # (logits, ms): the step's work done before the clock stops
        start = time.perf_counter()
        logits = cached(torch.tensor(ids, device=device))
        if device == "cuda":
            torch.cuda.synchronize()
        return logits, 1e3 * (time.perf_counter() - start)

    with torch.no_grad():
        timed([prompt_ids[:1]])  # a first call makes CUDA's kernels and handles: not timed
        cached.length = 0
        logits, prompt_ms = timed([prompt_ids])
        tokens, times = [int(logits.argmax())], []
        for _ in range(new_tokens - 1):
            logits, ms = timed([[tokens[-1]]])
            times.append(ms)
            tokens.append(int(logits.argmax()))
    return prompt_ms, statistics.median(times), tokens


def vkattn_generate(binary, folder, new_tokens, backend):
    done = subprocess.run([binary, "generate", "--model", str(folder), "--prompt", PROMPT, "--max-new-tokens",
                           str(new_tokens), "--backend", backend, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"gpt2_small.py: vkattn generate failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vkattn", default=str(ROOT / "build" / "bin" / "vkattn"))
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=32768, help="GPT-2's first tokens, 257 … 50257")
    parser.add_argument("--backend", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--torch-device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="F32", choices=["F32", "BF16"],
                        help="the weights as stored: BF16 keeps vkattn's matrices 16-bit on the device")
    args = parser.parse_args()
    blas_warning()
    environment(args.vkattn, args.torch_device)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 as vkattn computes it
    torch.manual_seed(0)
    train = gpt2_definition()
    vocab, merges = gpt2_tokenizer(args.vocab)
    model = train.GPT2LMHeadModel(len(vocab)).eval()
    parameters = sum(p.numel() for p in model.parameters())
    if args.dtype == "BF16":  # torch computes in float32 from the numbers the file holds
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    with tempfile.TemporaryDirectory() as scratch:
        folder = pathlib.Path(scratch)
        write_folder(folder, model, vocab, merges, args.dtype)
        print(f"model: GPT-2 small's shape with {len(vocab)} tokens, {parameters / 1e6:.1f} M parameters "
              f"(random weights), {(folder / 'model.safetensors').stat().st_size / 2 ** 20:.0f} MiB "
              f"as {args.dtype}")
        first = vkattn_generate(args.vkattn, folder, args.new_tokens, args.backend)
        ours = vkattn_generate(args.vkattn, folder, args.new_tokens, args.backend)
    # the prompt's ids by train.py's GPT-2 BPE (ASCII: the same as vkattn's tokenizer)
    ids = train.encode(PROMPT, vocab, {pair: rank for rank, pair in enumerate(merges)})
    assert len(ids) == ours["prompt_tokens"], (len(ids), ours["prompt_tokens"])
    torch_prompt_ms, torch_token_ms, torch_tokens = torch_generate(model, ids, args.new_tokens, args.torch_device)
    same = sum(a == b for a, b in zip(ours["tokens"], torch_tokens))
    print(f"prompt: {len(ids)} tokens; then {args.new_tokens} new tokens, greedy, with the KV cache "
          f"({same} of vkattn's {len(ours['tokens'])} tokens are torch's)")
    print(f"{'':26}{'prompt ms':>10}{'warm':>8}{'ms/token':>10}{'tokens/s':>10}")
    rows = [(f"torch {torch.__version__} ({args.torch_device})", torch_prompt_ms, None, torch_token_ms),
            (f"vkattn ({args.backend}, 2nd run)", ours["prompt_ms"], ours["warm_prompt_ms"], ours["ms_per_token"]),
            (f"vkattn ({args.backend}, 1st run)", first["prompt_ms"], first["warm_prompt_ms"],
             first["ms_per_token"])]
    for name, prompt_ms, warm_ms, token_ms in rows:
        warm = f"{warm_ms:8.1f}" if warm_ms is not None else f"{'':8}"
        print(f"{name:26}{prompt_ms:10.1f}{warm}{token_ms:10.2f}{1000 / token_ms:10.1f}")
    print(f"vkattn / torch, decoding: {torch_token_ms / ours['ms_per_token']:.2f}x torch's tokens/s; "
          f"prompt: {torch_prompt_ms / ours['warm_prompt_ms']:.2f}x its speed (warm, as torch's)")
    print("(prompt ms: vkattn's first forward, which makes the pipelines and uploads the weights; warm:\n"
          " the same prompt again in that process, as torch's is timed after a first call. The 1st run\n"
          " also measures the plans of each new shape class, once)")


if __name__ == "__main__":
    main()
