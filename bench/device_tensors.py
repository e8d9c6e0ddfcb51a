#!/usr/bin/python3
"""Layers chained through the host against layers chained on the device: a stack of
MultiheadAttention layers called on numpy arrays (each forward uploads its input and reads its
output back) and on vkattn.DeviceTensors (one upload, one read back at the end), taking turns round
after round, on the same default device. Both results are checked against each other first.

  PYTHONPATH=build/python /usr/bin/python3 bench/device_tensors.py [--layers 4] [--rounds 5]
      [--iters 5] [--batch 4 --seq 64 --embed 512 --heads 8] [--device gpu|cpu|INDEX|NAME]
"""
import argparse
import statistics
import time

import numpy as np
import torch

import vkattn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("layers", 4), ("rounds", 5), ("iters", 5), ("batch", 4), ("seq", 64), ("embed", 512),
                          ("heads", 8)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--device", default=None)
    a = parser.parse_args()
    device = int(a.device) if a.device and a.device.isdigit() else a.device
    torch.manual_seed(0)
    layers = [vkattn.MultiheadAttention.from_torch(torch.nn.MultiheadAttention(a.embed, a.heads, batch_first=True)
                                                   .eval(), device=device) for _ in range(a.layers)]
    x = np.random.default_rng(0).standard_normal((a.batch, a.seq, a.embed)).astype(np.float32)

    def through_the_host():
        y = x
        for layer in layers:
            y, _ = layer(y, y, y, need_weights=False)
        return y

    def on_the_device():
        y = vkattn.to_device(x, device=device)
        for layer in layers:
            y, _ = layer(y, y, y, need_weights=False)
        return y.numpy()

    difference = float(np.abs(through_the_host() - on_the_device()).max())
    if difference > 1e-4:
        raise SystemExit(f"the two chains differ by {difference:.3g}")
    times = {through_the_host: [], on_the_device: []}
    for _ in range(a.rounds):
        for chain, taken in times.items():
            start = time.perf_counter()
            for _ in range(a.iters):
                chain()
            taken.append((time.perf_counter() - start) / a.iters * 1000)
    host, resident = (statistics.median(t) for t in times.values())
    print(f"{a.layers} MultiheadAttention layers, (B, T, E) = ({a.batch}, {a.seq}, {a.embed}), {a.heads} heads, "
          f"on {layers[0].device}")
    print(f"  arrays through the host: {host:8.2f} ms a chain (median of {a.rounds} rounds)")
    print(f"  device tensors:          {resident:8.2f} ms a chain ({host / resident:.2f}x; outputs within "
          f"{difference:.1e})")


if __name__ == "__main__":
    main()
