#!/usr/bin/env python3
"""numpy itself reads what vkattn writes, and vkattn reads what numpy writes.

Usage: numpy_interop.py VKATTN GOLDEN_DIR. Runs `vkattn run --side-by-side --trace --trace-values`
on a golden fixture whose query numpy re-saves as float64, then numpy.load()s every step dump of
both backends (shape and dtype as trace.json says, GPU equal to CPU) and the output (equal to
PyTorch's). Exits non-zero with a message on the first failure."""
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np


def main(vkattn, golden):
    fixture = pathlib.Path(golden) / "key_padding_mask"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        query = tmp / "query_f64.npy"
        np.save(query, np.load(fixture / "query.npy").astype(np.float64))  # '<f8': vkattn converts
        subprocess.run([vkattn, "run", "--weights", fixture / "weights.safetensors", "--query", query,
                        "--key", fixture / "key.npy", "--value", fixture / "value.npy",
                        "--key-padding-mask", fixture / "key_padding_mask.npy", "--side-by-side",
                        "--trace", tmp / "dump", "--trace-values", "--out", tmp / "out.npy"],
                       check=True, stdout=subprocess.DEVNULL)
        steps = {}
        for backend in ("gpu", "cpu"):
            trace = json.loads((tmp / "dump" / backend / "trace.json").read_text())
            assert trace["backend"] == backend, trace["backend"]
            for step in trace["steps"]:
                out = step["output"]
                values = np.load(tmp / "dump" / backend / out["file"])
                assert values.dtype == np.float32, (backend, step["name"], values.dtype)
                assert list(values.shape) == out["shape"], (backend, step["name"], values.shape, out["shape"])
                steps.setdefault(step["name"], []).append(values)
        for name, (gpu, cpu) in steps.items():
            assert np.allclose(gpu, cpu, atol=1e-5, rtol=1e-5), f"{name}: gpu and cpu differ by {np.abs(gpu - cpu).max()}"
        output = np.load(tmp / "out.npy")
        expected = np.load(fixture / "expected_output.npy")
        error = np.abs(output - expected).max()
        assert error <= 1e-4, f"output differs from PyTorch's by {error}"
    print(f"numpy read {2 * len(steps)} step dumps and the output; max |output - torch| = {error:.2e}")


if __name__ == "__main__":
    main(*sys.argv[1:])
