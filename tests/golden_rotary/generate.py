#!/usr/bin/python3
"""Writes the PyTorch fixtures of the rotary_embedding step (RoPE), which tests/ops/test_rotary.cpp
checks on both backends. Run it with Debian's python3-torch (1.13 or 2.x) and python3-numpy:
    /usr/bin/python3 tests/golden_rotary/generate.py

Each convention is written out from its definition in torch, in a few lines, as the models that
use it compute it (inv_freq, the angles and their cos/sin in float32):
  half  — GPT-NeoX and Hugging Face's Llama: x·cos + rotate_half(x)·sin, rotate_half(x) = (−x2, x1)
          for the halves x1, x2 of the rotated features;
  pairs — GPT-J and Meta's original Llama code: features (2i, 2i + 1) as one complex number,
          multiplied by e^(iφ) (torch.view_as_complex · torch.polar).
A fixture is tests/golden_rotary/<name>/ with x.npy (B, H, T, d) float32, expected.npy, and
config.json {convention, theta, offset, rotary_dims}. The two conventions on the same x are also
checked here to differ: loading a checkpoint with the wrong one is a real bug, not rounding.
"""
import json
import pathlib
import shutil

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent


def angles(T, r, theta, offset):
    inv_freq = 1.0 / (theta ** (torch.arange(0, r, 2).float() / r))  # (r/2,)
    positions = torch.arange(offset, offset + T).float()
    return torch.outer(positions, inv_freq)  # (T, r/2), float32


def rope_half(x, theta, offset, r):
    phi = angles(x.shape[-2], r, theta, offset)
    cos, sin = torch.cat([phi, phi], -1).cos(), torch.cat([phi, phi], -1).sin()  # (T, r)
    rot, rest = x[..., :r], x[..., r:]
    x1, x2 = rot[..., : r // 2], rot[..., r // 2:]
    rotate_half = torch.cat([-x2, x1], -1)
    return torch.cat([rot * cos + rotate_half * sin, rest], -1)


def rope_pairs(x, theta, offset, r):
    phi = angles(x.shape[-2], r, theta, offset)
    rot, rest = x[..., :r], x[..., r:]
    z = torch.view_as_complex(rot.reshape(*rot.shape[:-1], r // 2, 2).contiguous())
    rotated = torch.view_as_real(z * torch.polar(torch.ones_like(phi), phi)).flatten(-2)
    return torch.cat([rotated, rest], -1)


def fixture(name, *, shape, convention, theta=10000.0, offset=0, rotary_dims=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    r = rotary_dims or shape[-1]
    out = (rope_half if convention == "half" else rope_pairs)(x, theta, offset, r)
    other = (rope_pairs if convention == "half" else rope_half)(x, theta, offset, r)
    if offset + shape[-2] > 1:
        assert (out - other).abs().max() > 0.1, f"{name}: the two conventions agree"
    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    np.save(folder / "x.npy", x.numpy().astype("<f4"))
    np.save(folder / "expected.npy", out.numpy().astype("<f4"))
    config = {"convention": convention, "theta": theta, "offset": offset, "rotary_dims": rotary_dims}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def main():
    fixture("half_llama", shape=(2, 3, 17, 16), convention="half")
    fixture("pairs_llama", shape=(2, 3, 17, 16), convention="pairs")
    fixture("half_theta500k_offset", shape=(1, 2, 5, 64), convention="half", theta=500000.0, offset=1000, seed=1)
    fixture("pairs_offset", shape=(1, 4, 3, 8), convention="pairs", offset=113, seed=2)
    fixture("half_partial", shape=(2, 1, 9, 12), convention="half", rotary_dims=4, seed=3)
    fixture("pairs_partial", shape=(1, 2, 7, 10), convention="pairs", rotary_dims=6, seed=4)
    print(f"wrote the rotary fixtures to {HERE} with torch {torch.__version__}")


if __name__ == "__main__":
    main()
