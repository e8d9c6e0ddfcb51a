#!/usr/bin/python3
"""torch.matmul of two (n, n) fp32 matrices, TF32 off on CUDA: the bar for bench_gemm's plans.

  python3 bench/torch_gemm.py [--n 4096] [--device cpu|cuda] [--dtype float32|float16]

--dtype float16: float16 matrices, the bar for bench_gemm's float16 products on cooperative
matrices.

Prints the median of 10 products after 3 untimed ones, each timed to its end
(torch.cuda.synchronize on CUDA), and its TFLOP/s (2·n³ operations).
"""
import argparse
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    args = parser.parse_args()
    n, device, dtype = args.n, args.device, getattr(torch, args.dtype)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as vkattn's
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    try:
        torch.matmul(a, b)
    except RuntimeError as e:  # torch 1.13's CPU matmul has no float16
        parser.error(f"torch {torch.__version__} cannot multiply {args.dtype} on {device}: {str(e).splitlines()[0]}")
    for _ in range(3):
        torch.matmul(a, b)
    sync()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        torch.matmul(a, b)
        sync()
        times.append(time.perf_counter() - start)
    median = sorted(times)[len(times) // 2]
    where = torch.cuda.get_device_name() if device == "cuda" else f"the CPU ({torch.get_num_threads()} threads)"
    kind = "fp32 (TF32 off)" if dtype == torch.float32 else "fp16"
    print(f"torch {torch.__version__} matmul ({n}, {n}) · ({n}, {n}) {kind} on {where}: "
          f"{median * 1e3:.2f} ms, {2 * n ** 3 / median / 1e12:.2f} TFLOP/s (median of 10)")


if __name__ == "__main__":
    main()
