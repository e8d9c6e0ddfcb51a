#!/usr/bin/python3
"""A prompt's pass through a GPT-2-small-shaped checkpoint with every position's logits against the
last position's alone (logits_to_keep=1, what generation asks for), both ways in one process.

The checkpoint is bench/gpt2_small.py's (GPT-2 small's shape, random weights, GPT-2's vocabulary,
written as the hub lays it out; BF16 by default, whose 50,257-token embedding fits lavapipe's
128 MiB buffers). For each prompt length, random ids: both passes once untimed (pipelines, plans),
then --turns of the two alternating, from Python (`model(ids, logits_to_keep=n)`), each to its
numpy logits; the medians, the extremes and their ratio.

  /usr/bin/python3 bench/logits_to_keep.py [--vkattn-python build/python] [--lengths 38,100,256,600]
      [--turns 15] [--layers 12] [--vocab 50257] [--dtype BF16|F32] [--device NAME]
"""
import argparse
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from gpt2_small import gpt2_definition, gpt2_tokenizer, write_folder  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vkattn-python", default=str(ROOT / "build" / "python"))
    parser.add_argument("--lengths", default="38,100,256,600", help="prompt lengths, in tokens")
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257, help="GPT-2's first tokens, 257 … 50257")
    parser.add_argument("--dtype", default="BF16", choices=["F32", "BF16"])
    parser.add_argument("--device", default=None, help="a GPU's index or name substring (default: the best)")
    args = parser.parse_args()
    sys.path.insert(0, args.vkattn_python)
    import vkattn

    torch.manual_seed(0)
    train = gpt2_definition()
    train.LAYERS = args.layers
    vocab, merges = gpt2_tokenizer(args.vocab)
    model = train.GPT2LMHeadModel(len(vocab)).eval()
    with tempfile.TemporaryDirectory() as scratch:
        folder = pathlib.Path(scratch)
        write_folder(folder, model, vocab, merges, args.dtype, layers=args.layers)
        gpt2 = vkattn.from_pretrained(folder, device=args.device)
    layers = f"{args.layers} layer{'s' if args.layers != 1 else ''}"
    print(f"{gpt2.device}; GPT-2 small's shape, {layers}, {len(vocab)} tokens, {args.dtype}")
    print("a prompt's pass, ms: every position's logits, the last position's alone (logits_to_keep=1)")
    print(f"{'tokens':>7}{'every':>10}{'(range)':>18}{'the last':>10}{'(range)':>18}{'faster':>8}")
    rng = np.random.default_rng(0)
    for T in [int(t) for t in args.lengths.split(",")]:
        ids = rng.integers(0, len(vocab), size=(1, T))
        times = {0: [], 1: []}
        for keep in times:  # pipelines made and plans measured: not timed
            gpt2(ids, logits_to_keep=keep)
        for _ in range(args.turns):
            for keep in times:
                start = time.perf_counter()
                gpt2(ids, logits_to_keep=keep)
                times[keep].append(1e3 * (time.perf_counter() - start))
        every, last = statistics.median(times[0]), statistics.median(times[1])
        spans = [f"({min(times[k]):.1f}–{max(times[k]):.1f})" for k in times]
        print(f"{T:7d}{every:10.1f}{spans[0]:>18}{last:10.1f}{spans[1]:>18}{every / last:7.2f}×")


if __name__ == "__main__":
    main()
