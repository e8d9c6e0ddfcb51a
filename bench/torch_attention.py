#!/usr/bin/python3
"""torch's fused attention, scaled_dot_product_attention on (B, H, L, d) fp32: the bar for bench_flash.

  python3 bench/torch_attention.py [--batch 1] [--heads 8] [--seq 4096] [--head-dim 64]
                                   [--causal] [--device cpu|cuda] [--dtype float32|float16]

--dtype float16: q, k and v in float16, the bar for bench_flash's float16 products on
cooperative matrices.

Prints the median of 10 calls after 3 untimed ones, each timed to its end (torch.cuda.synchronize
on CUDA), with TF32 off, and its GFLOP/s counted as bench_flash counts them (QKᵀ and P·V over
the keys each row sees). torch before 2.0 has no scaled_dot_product_attention: there it is its
definition, softmax(q·kᵀ/√d, masked) · v.
"""
import argparse
import math
import time

import torch


def attention(q, k, v, causal):
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=causal)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    args = parser.parse_args()
    B, H, L, d, device = args.batch, args.heads, args.seq, args.head_dim, args.device
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as vkattn's
        torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(B, H, L, d, device=device, dtype=dtype) for _ in range(3))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        try:
            attention(q, k, v, args.causal)
        except RuntimeError as e:  # torch 1.13's CPU matmul has no float16
            parser.error(f"torch {torch.__version__} cannot attend in {args.dtype} on {device}: "
                         f"{str(e).splitlines()[0]}")
        for _ in range(3):
            attention(q, k, v, args.causal)
        sync()
        times = []
        for _ in range(10):
            start = time.perf_counter()
            attention(q, k, v, args.causal)
            sync()
            times.append(time.perf_counter() - start)
    median = sorted(times)[len(times) // 2]
    keys_seen = L * (L + 1) / 2 if args.causal else L * L
    gflop = 4 * B * H * keys_seen * d / 1e9
    where = torch.cuda.get_device_name() if device == "cuda" else f"the CPU ({torch.get_num_threads()} threads)"
    kind = "fp32" if dtype == torch.float32 else "fp16"
    print(f"torch {torch.__version__} attention B {B}, H {H}, L {L}, d {d}{', causal' if args.causal else ''} "
          f"{kind} on {where}: {median * 1e3:.3f} ms, {gflop / median:.0f} GFLOP/s (median of 10)")


if __name__ == "__main__":
    main()
