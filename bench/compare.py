#!/usr/bin/python3
"""vkattn against PyTorch on the same machine, in one run.

For each shape, torch.nn.MultiheadAttention (eval, no_grad, need_weights=False, batch_first,
OMP threads = cores) and `vkattn bench --json` take turns, round after round, so that a shared
machine's drift falls on both alike. Prints each path's median forward, GFLOP/s and peak device
memory, and the ratio torch_ms / vkattn_ms (above 1: vkattn is faster).

  python3 bench/compare.py [--vkattn build/bin/vkattn] [--rounds 3] [--iters 3] [--shapes S1,S2,S3,S4]
      [--json results.json] [--torch-device cpu|cuda] [--rules] [--copies]
      [--resident]

It first prints where it runs (Debian release, CPU, Mesa and LLVM, torch and its BLAS), so that
figures from different machines are never mixed, and runs `vkattn tune` on the shapes, so that
the timed forwards use the plans measured on this device (and no forward pays for measuring).
--rules also times each vkattn path under the fixed rules (VKATTN_TUNE=off), in the same turns;
--copies with split_heads and merge_heads run as copies (vkattn bench --copy-layout-steps) instead
of folded into the projections; --resident on tensors and weights kept on the device (vkattn bench
--resident), as torch's are: like with like where torch runs on a GPU.
Last, S1's projection GEMM alone: torch's sgemm against the plan vkattn's tuning chose.

With --torch-device cuda (a machine with an NVIDIA GPU and torch built for CUDA) torch runs there,
each forward timed to its end (torch.cuda.synchronize), against vkattn on the same GPU.

Shapes (the performance issue's): S1 (B 32, L 100, E 512, H 8), the seed article's benchmark;
S2 (1, 1024, 512, 8, causal); S3 (4, 256, 768, 12); S4 (1, 4096, 512, 8, causal, fused only:
the unfused path's (B, H, L, L) scores would need 512 MiB). S1 also runs the fused path with
--pack-in-proj ("packed"): q, k and v projected by one GEMM, as torch itself does for self-attention.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time

CORES = os.cpu_count() or 1
os.environ.setdefault("OMP_NUM_THREADS", str(CORES))  # before torch is imported

import torch  # noqa: E402  (Debian's python3-torch)

SHAPES = {
    "S1": dict(batch=32, seq=100, embed=512, heads=8, causal=False, paths=("unfused", "fused", "packed")),
    "S2": dict(batch=1, seq=1024, embed=512, heads=8, causal=True, paths=("unfused", "fused")),
    "S3": dict(batch=4, seq=256, embed=768, heads=12, causal=False, paths=("unfused", "fused")),
    "S4": dict(batch=1, seq=4096, embed=512, heads=8, causal=True, paths=("fused",)),
}


def flops(s):
    """The projections, Q·Kᵀ and P·V, as vkattn bench counts them (masks and softmax excluded)."""
    B, L, E = s["batch"], s["seq"], s["embed"]
    return 2 * B * 4 * L * E * E + 2 * 2 * B * L * L * E


def torch_times(s, iters, device):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(s["embed"], s["heads"], batch_first=True).eval().to(device)
    x = torch.randn(s["batch"], s["seq"], s["embed"], device=device)
    mask = torch.ones(s["seq"], s["seq"], dtype=torch.bool, device=device).triu(1) if s["causal"] else None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    with torch.no_grad():
        mha(x, x, x, attn_mask=mask, need_weights=False)  # warm-up
        sync()
        for _ in range(iters):
            start = time.perf_counter()
            mha(x, x, x, attn_mask=mask, need_weights=False)
            sync()
            times.append((time.perf_counter() - start) * 1e3)
    return times


# A path of SHAPES -> vkattn bench's flags for it
PATH_FLAGS = {"unfused": ["--attention", "unfused"], "fused": ["--attention", "fused"],
              "packed": ["--attention", "fused", "--pack-in-proj"]}


def vkattn_run(binary, s, path, iters, variant=""):
    """One turn of vkattn bench; variant "rules" (VKATTN_TUNE=off), "copies" (layout steps copied)
    or "resident" (input and weights on the device, output left there)."""
    cmd = [binary, "bench", "--batch", str(s["batch"]), "--seq", str(s["seq"]), "--embed", str(s["embed"]),
           "--heads", str(s["heads"]), *PATH_FLAGS[path], "--iters", str(iters), "--warmup", "1", "--json"]
    if s["causal"]:
        cmd.append("--causal")
    if variant == "copies":
        cmd.append("--copy-layout-steps")
    if variant == "resident":
        cmd.append("--resident")
    env = dict(os.environ, VKATTN_TUNE="off" if variant == "rules" else "on")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def say(text):
    """A line of words at most 100 columns wide: the rest wraps, indented (long paths and names)."""
    print(textwrap.fill(text, 100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def environment(binary, torch_device):
    """What the figures depend on: the release, the CPU, the Vulkan driver (Mesa, LLVM), torch's BLAS."""
    release = next((line.split("=", 1)[1].strip().strip('"') for line in read("/etc/os-release").splitlines()
                    if line.startswith("PRETTY_NAME=")), "unknown")
    debian = read("/etc/debian_version").strip()
    cpu = next((line.split(":", 1)[1].strip() for line in read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in read("/proc/cpuinfo").splitlines()
                      if line.startswith("flags")), []))
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    devices = subprocess.run([binary, "devices"], capture_output=True, text=True).stdout
    chosen = [line for line in devices.splitlines() if line.startswith("* ")]
    driver = ""
    lines = devices.splitlines()
    if chosen:
        at = lines.index(chosen[0])
        driver = next((line.split("driver:", 1)[1].strip() for line in lines[at:at + 3] if "driver:" in line), "")
    # Debian's torch calls libblas.so.3, which the alternatives system points at one BLAS
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    blas_info = next((part.split("=", 1)[1] for part in torch.__config__.show().replace("\n", ",").split(",")
                      if part.strip().startswith("BLAS_INFO=")), "unknown")
    say(f"machine: {release} (debian_version {debian}), {cpu}, {CORES} cores, {vector}")
    say(f"vkattn device: {chosen[0][2:].strip() if chosen else 'none'}; driver: {driver}")
    say(f"torch {torch.__version__} on {torch_device}; BLAS: {os.path.relpath(blas, '/usr/lib/x86_64-linux-gnu')} "
        f"(torch's BLAS_INFO={blas_info})")


def tune(binary, names):
    """vkattn tune on the shapes: plans measured once, here, not inside a timed forward."""
    start = time.perf_counter()
    done = subprocess.run([binary, "tune", "--shapes", ",".join(names)], capture_output=True, text=True,
                          env=dict(os.environ, VKATTN_TUNE="on"))
    if done.returncode != 0:
        sys.exit(f"compare.py: vkattn tune failed ({done.returncode}): {done.stderr.strip()}")
    classes = next((line for line in done.stdout.splitlines() if "shape classes in" in line), "")
    say(f"vkattn tune --shapes {','.join(names)}: {classes} ({time.perf_counter() - start:.1f} s with start-up)")


def blas_warning():
    """Debian's torch calls whatever libblas.so.3 is installed: netlib's reference BLAS is ~40x slower
    than OpenBLAS, which would flatter vkattn."""
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if os.path.exists(blas) and "openblas" not in blas:
        print(f"warning: torch's BLAS is {blas}, not OpenBLAS; apt install libopenblas0-pthread for a fair "
              "comparison", file=sys.stderr)


def projection_gemm(vkattn_binary, rounds, device):
    """S1's projection, x (3200, 512) · Wᵀ (512, 512): torch's sgemm (F.linear; on CUDA with TF32
    off, fp32 as vkattn's) against the plan vkattn's tuning chose (bench_gemm's `t` line), taking
    turns."""
    m, n, k = 3200, 512, 512
    bench_gemm = os.path.join(os.path.dirname(vkattn_binary), "bench_gemm")
    x, w = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    torch_gflops, vkattn_gflops = [], []
    for _ in range(rounds):
        with torch.no_grad():
            torch.nn.functional.linear(x, w)
            sync()
            start = time.perf_counter()
            for _ in range(8):
                torch.nn.functional.linear(x, w)
            sync()
            torch_gflops.append(2 * m * n * k * 8 / (time.perf_counter() - start) / 1e9)
        done = subprocess.run([bench_gemm, "--m", str(m), "--n", str(n), "--k", str(k), "--rounds", "1",
                               "--skip-shared"], capture_output=True, text=True, env=dict(os.environ, VKATTN_TUNE="on"))
        tuned = [line for line in done.stdout.splitlines() if line[:3] in ("t  ", "tr ")]  # the marks
        if done.returncode != 0 or not tuned:
            sys.exit(f"compare.py: bench_gemm failed ({done.returncode}): {done.stderr.strip()}")
        vkattn_gflops.append(float(tuned[0].split("ms")[1].split()[0]))
    t, v = statistics.median(torch_gflops), statistics.median(vkattn_gflops)
    say(f"projection GEMM ({m}, {k}) · ({n}, {k})ᵀ: torch (sgemm) {t:.1f} GFLOP/s, vkattn's tuned plan "
        f"{v:.1f} GFLOP/s: {v / t:.2f}x (median of {rounds} turns)")


def main():
    blas_warning()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vkattn", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "vkattn"))
    parser.add_argument("--rounds", type=int, default=3, help="turns each side takes per shape and path")
    parser.add_argument("--iters", type=int, default=3, help="timed forwards per turn")
    parser.add_argument("--shapes", default="S1,S2,S3,S4")
    parser.add_argument("--json", help="also write every measurement here")
    parser.add_argument("--torch-device", default="cpu", choices=("cpu", "cuda"), help="where torch runs")
    parser.add_argument("--rules", action="store_true", help="also time vkattn under the fixed rules (VKATTN_TUNE=off)")
    parser.add_argument("--copies", action="store_true",
                        help="also time vkattn with split_heads and merge_heads as copies, not folded")
    parser.add_argument("--resident", action="store_true",
                        help="also time vkattn's forwards on tensors and weights kept on the device, as torch's")
    args = parser.parse_args()
    torch.set_num_threads(CORES)
    names = args.shapes.split(",")
    for n in names:
        if n not in SHAPES:
            sys.exit(f"compare.py: unknown shape {n!r}; choose from {', '.join(SHAPES)}")

    environment(args.vkattn, args.torch_device)
    tune(args.vkattn, names)
    variants = ([""] + (["rules"] if args.rules else []) + (["copies"] if args.copies else []) +
                (["resident"] if args.resident else []))
    runs = [(p, v) for v in variants for p in ("unfused", "fused", "packed")]
    label = lambda p, variant: p + ("/" + variant if variant else "")  # noqa: E731
    paths = {n: [label(p, r) for p, r in runs if p in SHAPES[n]["paths"]] for n in names}
    results = {n: {"torch": [], **{p: [] for p in paths[n]}} for n in names}
    memory = {}
    steps_ms = {(n, p): [] for n in names for p in paths[n]}  # the device's time of the steps alone
    host_ms = {(n, p): [] for n in names for p in paths[n]}  # /resident: the host's share
    for r in range(args.rounds):
        for n in names:  # torch, then each vkattn path, shape by shape, round after round
            s = SHAPES[n]
            results[n]["torch"] += torch_times(s, args.iters, args.torch_device)
            for p, variant in runs:
                if p not in s["paths"]:
                    continue
                out = vkattn_run(args.vkattn, s, p, args.iters, variant)
                results[n][label(p, variant)].append(out["total_ms"])
                steps_ms[(n, label(p, variant))].append(
                    sum(step["time_us"] or 0 for step in out["steps"]) / 1e3)
                memory[(n, label(p, variant))] = out["peak_device_bytes"]
                if out.get("host_ms") is not None:
                    host_ms[(n, label(p, variant))].append(out["host_ms"])
            print(f"round {r + 1}/{args.rounds}: {n} done", file=sys.stderr, flush=True)

    where = torch.cuda.get_device_name() if args.torch_device == "cuda" else f"{CORES} threads"
    say(f"torch {torch.__version__} on {where} against vkattn bench (median of {args.rounds} "
        f"turns of {args.iters} forwards each; ratio = torch_ms / vkattn_ms)")
    print("vkattn ms: a forward from the host (input and weights uploaded, output read back), or with")
    print("/resident on tensors and weights kept on the device, its output left there, as torch's;")
    print("steps ms: its steps' own time on the device (timestamps), without the transfers;")
    print("host ms (/resident): the part of vkattn ms before anything is submitted (checks, sizing,")
    print("recording)")
    print(f"{'shape':6} {'path':16} {'torch ms':>9} {'vkattn ms':>10} {'GFLOP/s':>8} {'peak MiB':>9} {'ratio':>7} "
          f"{'steps ms':>9} {'ratio':>7} {'host ms':>8}")
    table = []
    for n in names:
        s = SHAPES[n]
        t = statistics.median(results[n]["torch"])
        for p in paths[n]:
            v = statistics.median(results[n][p])
            d = statistics.median(steps_ms[(n, p)])
            h = statistics.median(host_ms[(n, p)]) if host_ms[(n, p)] else None
            row = dict(shape=n, path=p, torch_ms=t, vkattn_ms=v, gflops=flops(s) / (v * 1e6),
                       peak_device_bytes=memory[(n, p)], ratio=t / v, steps_ms=d, steps_ratio=t / d if d else None,
                       host_ms=h)
            table.append(row)
            print(f"{n:6} {p:16} {t:9.2f} {v:10.2f} {row['gflops']:8.2f} {row['peak_device_bytes'] / 2**20:9.1f} "
                  f"{row['ratio']:7.3f} {d:9.2f} {(t / d if d else float('nan')):7.3f} "
                  f"{'-' if h is None else f'{h:.2f}':>8}")
        for variant in ("", "resident"):
            unfused, fused = label("unfused", variant), label("fused", variant)
            if unfused in results[n] and fused in results[n]:
                u, f = statistics.median(results[n][unfused]), statistics.median(results[n][fused])
                print(f"{n:6} {fused} is {u / f:.2f}x {unfused}'s speed")
    projection_gemm(args.vkattn, args.rounds, args.torch_device)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": table, "raw": results}, f, indent=1)


if __name__ == "__main__":
    main()
