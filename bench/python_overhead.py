#!/usr/bin/python3
"""The cost of the Python layer: one forward through vkattn's Python package against the same
forward timed by `vkattn bench`, taking turns round after round (a shared machine's drift falls
on both alike). Both run the same shape on the same default device with the same path (fused:
need_weights=False); Python's time includes everything a caller waits for — the conversion of the
torch tensor, the upload, the steps, the download and the numpy result.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--vkattn build/bin/vkattn]
      [--rounds 5] [--iters 5] [--batch 32 --seq 100 --embed 512 --heads 8]   (S1, the default)
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch

import vkattn


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vkattn", default=os.path.join(here, "..", "build", "bin", "vkattn"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=5, help="timed forwards per turn")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=100)
    parser.add_argument("--embed", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    a = parser.parse_args()

    torch.manual_seed(0)
    mha = vkattn.MultiheadAttention(a.embed, a.heads, batch_first=True)
    x = torch.randn(a.batch, a.seq, a.embed)
    mha(x, x, x, need_weights=False)  # pipelines and buffers: made once, not timed (bench's warm-up)
    command = [a.vkattn, "bench", "--batch", str(a.batch), "--seq", str(a.seq), "--embed", str(a.embed),
               "--heads", str(a.heads), "--iters", str(a.iters), "--warmup", "1", "--json"]
    python_ms, bench_ms = [], []
    for r in range(a.rounds):
        for _ in range(a.iters):
            start = time.perf_counter()
            mha(x, x, x, need_weights=False)
            python_ms.append((time.perf_counter() - start) * 1e3)
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        bench_ms.append(json.loads(done.stdout)["total_ms"])
        print(f"round {r + 1}/{a.rounds}", flush=True)
    p, b = statistics.median(python_ms), statistics.median(bench_ms)
    print(f"B {a.batch}, L {a.seq}, E {a.embed}, H {a.heads}, fused, on {mha.device}")
    print(f"  from Python (vkattn.MultiheadAttention):   {p:9.2f} ms  (median of {len(python_ms)})")
    print(f"  vkattn bench (C++):                        {b:9.2f} ms  (median of {len(bench_ms)} "
          f"turns' medians of {a.iters})")
    print(f"  the Python layer costs {100 * (p - b) / b:+.1f} %")


if __name__ == "__main__":
    main()
