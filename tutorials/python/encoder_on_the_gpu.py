#!/usr/bin/python3
"""Python lesson 2: a trained nn.TransformerEncoder, run by vkattn on the GPU, beside PyTorch.

The encoder is trained here, in a few seconds, on a task attention is made for: each position
must output the mean of the whole sequence (so every token has to look at every other). Then
vkattn.TransformerEncoder.from_torch copies its weights — PyTorch's own state_dict names, read
by the same code as `vkattn encode` — and runs the same forward as GLSL compute shaders on a
Vulkan device. Both answer the same input; the lesson prints the largest difference, the step
list of one forward, and each side's time per forward.

Run: PYTHONPATH=build/python /usr/bin/python3 tutorials/python/encoder_on_the_gpu.py [--device D]
"""
import argparse
import statistics
import time

import numpy as np
import torch
from torch import nn

import vkattn

D_MODEL, HEADS, FF, LAYERS, T = 32, 4, 64, 2, 12


def train(steps=150, seed=0):
    """A 2-layer encoder taught to output the sequence's mean at every position (MSE)."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=FF, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    optimiser = torch.optim.Adam(encoder.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, T, D_MODEL)
        loss = nn.functional.mse_loss(encoder(x), x.mean(dim=1, keepdim=True).expand_as(x))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return encoder.eval(), losses


def median_ms(forward, x, repeats=20):
    forward(x)  # the first forward builds pipelines and buffers: not timed
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward(x)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="a GPU index or name substring (vkattn.devices()); default: the best")
    args = parser.parse_args()
    print(__doc__.split("\n\n")[0] + "\n")

    start = time.perf_counter()
    encoder, losses = train()
    print(f"trained nn.TransformerEncoder({LAYERS} layers, d_model {D_MODEL}, nhead {HEADS}, "
          f"dim_feedforward {FF})\nfor {len(losses)} steps in {time.perf_counter() - start:.1f} s: "
          f"mean squared error {losses[0]:.3f} -> {losses[-1]:.3f}")

    ours = vkattn.TransformerEncoder.from_torch(encoder, device=args.device)
    print(f"vkattn runs it on {ours.device}\n")
    x = torch.randn(4, T, D_MODEL)
    with torch.no_grad():
        expected = encoder(x).numpy()
    got = ours(x)
    error = float(np.abs(got - expected).max())
    print(f"output (B, T, E) = {got.shape}; max |vkattn - PyTorch| = {error:.2e}")
    off = np.abs(expected - x.mean(1, keepdim=True).numpy()).mean()
    print(f"the task: each row should be the sequence's mean; PyTorch's rows are {off:.3f} off on\n"
          "average, and vkattn's the same\n")

    _, trace = ours.trace(x[:1], values=False)
    print(f"one forward is {len(trace.steps)} steps, each named by the torch module that computes it:")
    print(f"{'#':3} {'step':34} {'op':16} {'output':14} {'time (µs)':>10}")
    for s in trace.steps:
        print(f"{s.index:<3} {s.name:34} {s.op:16} {str(s.shape):14} {s.time_us:10.1f}")

    batch = torch.randn(64, T, D_MODEL)
    with torch.no_grad():
        torch_ms = median_ms(encoder, batch)
    vkattn_ms = median_ms(ours, batch)
    print(f"\none forward of (64, {T}, {D_MODEL}), median of 20 after one untimed:")
    print(f"  PyTorch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s): {torch_ms:8.2f} ms")
    print(f"  vkattn, {ours.device}: {vkattn_ms:8.2f} ms")
    print("  (vkattn's from Python: numpy in, upload, every step, download)")
    print("\nWhat to notice: the same weights give the same numbers on another device, through no code of\n"
          "PyTorch's; on a CPU-only machine the 'GPU' is lavapipe, which runs the shaders on the CPU, so\n"
          "PyTorch's own CPU kernels are faster there: the timing is honest, not flattering.")
    return 0 if error < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
