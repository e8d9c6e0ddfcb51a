#!/usr/bin/python3
"""torch.matmul of two (n, n) fp32 matrices, TF32 off on CUDA: the bar for bench_gemm's plans.

  python3 bench/torch_gemm.py [--n 4096] [--device cpu|cuda]

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
    args = parser.parse_args()
    n, device = args.n, args.device
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as vkattn's
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
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
    print(f"torch {torch.__version__} matmul ({n}, {n}) · ({n}, {n}) fp32 (TF32 off) on {where}: "
          f"{median * 1e3:.2f} ms, {2 * n ** 3 / median / 1e12:.2f} TFLOP/s (median of 10)")


if __name__ == "__main__":
    main()
