#!/usr/bin/python3
"""A token's time, vkattn against PyTorch on the CPU, in one run.

The model of bench_decoding (random weights: E 512, 8 heads, 4 pre-norm GELU layers, feed-forward
2048, vocab 256, B = 1) in torch, at contexts 256, 1024 and 4096, two ways:
  - recompute: the model's own forward over the whole context, as a model without a cache runs
    (nn.TransformerEncoderLayer with a causal src_mask, eval, no_grad);
  - cached: a decode step written here in torch from the layers' weights (each layer's keys and
    values kept in preallocated (1, H, capacity, d) tensors, the new token's row appended), the
    same work as vkattn's decode.
Then build/bin/bench_decoding runs in the same process's turn, and the table puts them side by
side (tokens per second = 1000 / ms per token).

  /usr/bin/python3 bench/decoding_torch.py [--bench build/bin/bench_decoding] [--contexts 256,1024,4096]
"""
import argparse
import os
import statistics
import subprocess
import time

os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))  # before torch is imported
import pathlib  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "models" / "tiny_char"))
from train import CausalLM  # noqa: E402  the model vkattn generate ships, at another size

E, H, FF, LAYERS, V = 512, 8, 2048, 4, 256


def decode(model, token, position, caches):
    """One token (1, 1) at `position` through `model`, its caches filled before it -> logits (1, 1, V)."""
    x = model.token_embedding(token) + model.position_embedding.weight[position]
    d = E // H
    for layer, (k_cache, v_cache) in zip(model.layers, caches):
        h = layer.norm1(x)
        q, k, v = F.linear(h, layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias).chunk(3, -1)
        q, k, v = (t.view(1, 1, H, d).transpose(1, 2) for t in (q, k, v))  # (1, H, 1, d)
        k_cache[:, :, position] = k[:, :, 0]
        v_cache[:, :, position] = v[:, :, 0]
        scores = q @ k_cache[:, :, :position + 1].transpose(-1, -2) / d ** 0.5  # (1, H, 1, S)
        heads = scores.softmax(-1) @ v_cache[:, :, :position + 1]  # (1, H, 1, d)
        x = x + layer.self_attn.out_proj(heads.transpose(1, 2).reshape(1, 1, E))
        x = x + layer.linear2(F.gelu(layer.linear1(layer.norm2(x))))
    return model.lm_head(model.norm(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default="build/bin/bench_decoding")
    parser.add_argument("--contexts", default="256,1024,4096")
    parser.add_argument("--tokens", type=int, default=9)
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    torch.manual_seed(0)
    model = CausalLM(V, E, H, FF, LAYERS, max(contexts) + args.tokens).eval()
    torch_ms = {}
    with torch.no_grad():
        # the decode step written here equals the model's own forward, position by position
        ids = torch.randint(0, V, (1, 8))
        caches = [(torch.zeros(1, H, 8, E // H), torch.zeros(1, H, 8, E // H)) for _ in range(LAYERS)]
        steps = torch.cat([decode(model, ids[:, t:t + 1], t, caches) for t in range(8)], dim=1)
        assert torch.allclose(steps, model(ids), atol=1e-4), "decode() differs from the model's forward"
        for context in contexts:
            ids = torch.randint(0, V, (1, context))
            runs = []
            for _ in range(2):
                start = time.perf_counter()
                model(ids)
                runs.append((time.perf_counter() - start) * 1000)
            caches = [(torch.zeros(1, H, context + args.tokens, E // H), torch.zeros(1, H, context + args.tokens, E // H))
                      for _ in range(LAYERS)]
            steps = []
            for t in range(args.tokens):
                start = time.perf_counter()
                decode(model, torch.randint(0, V, (1, 1)), context - 1 + t, caches)
                steps.append((time.perf_counter() - start) * 1000)
            torch_ms[context] = (statistics.median(steps[1:]), min(runs))
    out = subprocess.run([args.bench, "--contexts", args.contexts, "--tokens", str(args.tokens)], check=True,
                         capture_output=True, text=True).stdout
    # the table's rows: context, parts ("32*": the backend's choice), lanes, cached, recompute, …
    vkattn_ms = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            vkattn_ms[int(cells[0])] = (float(cells[3]), float(cells[4]))
    missing = [c for c in contexts if c not in vkattn_ms]
    if missing:
        sys.exit(f"decoding_torch.py: no row for contexts {missing} in {args.bench}'s table:\n{out}")
    print(f"torch {torch.__version__} on the CPU ({os.environ['OMP_NUM_THREADS']} threads) against vkattn: "
          f"{next(line for line in out.splitlines() if line.startswith('on '))[3:]}")
    print("ms per token (tokens/s)       cached                       recompute")
    print("context            torch          vkattn           torch            vkattn")
    for context in contexts:
        (tc, tr), (vc, vr) = torch_ms[context], vkattn_ms[context]
        cell = lambda ms: f"{ms:8.2f} ({1000 / ms:6.1f})"  # noqa: E731
        print(f"{context:7d}  {cell(tc)}  {cell(vc)}  {cell(tr)}  {cell(vr)}")


if __name__ == "__main__":
    main()
