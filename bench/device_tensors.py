#!/usr/bin/python3
"""Layers chained through the host against layers chained on the device: a stack of
MultiheadAttention layers (or, with --model transformer, nn.Transformer's halves: an encoder
layer after layer over the source, then decoder layers over the target attending to its output;
with --model bert, a checkpoint's BERT, then a MultiheadAttention over its last hidden state)
called on numpy arrays (each forward uploads its inputs and reads its output back) and on
vkattn.DeviceTensors (one upload each, one read back at the end), taking turns round after round,
on the same default device. Both results are checked against each other first.

  PYTHONPATH=build/python /usr/bin/python3 bench/device_tensors.py
      [--model attention|transformer|bert] [--folder models/tiny_bert]
      [--layers 4] [--rounds 5] [--iters 5] [--batch 4 --seq 64 --embed 512 --heads 8]
      [--device gpu|cpu|INDEX|NAME]
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
    parser.add_argument("--model", choices=("attention", "transformer", "bert"), default="attention")
    parser.add_argument("--folder", default="models/tiny_bert", help="--model bert's checkpoint folder")
    parser.add_argument("--device", default=None)
    a = parser.parse_args()
    device = int(a.device) if a.device and a.device.isdigit() else a.device
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.seq, a.embed)).astype(np.float32)
    if a.model == "attention":
        layers = [vkattn.MultiheadAttention.from_torch(
            torch.nn.MultiheadAttention(a.embed, a.heads, batch_first=True).eval(), device=device)
            for _ in range(a.layers)]
        what = f"{a.layers} MultiheadAttention layers on (B, T, E) = ({a.batch}, {a.seq}, {a.embed})"

        def run(y, _):
            for layer in layers:
                y, _ = layer(y, y, y, need_weights=False)
            return y
    elif a.model == "transformer":  # the target: a quarter of the source's positions, at least one
        target = rng.standard_normal((a.batch, max(a.seq // 4, 1), a.embed)).astype(np.float32)
        options = dict(dim_feedforward=4 * a.embed, batch_first=True)
        encoders = [vkattn.TransformerEncoderLayer.from_torch(
            torch.nn.TransformerEncoderLayer(a.embed, a.heads, **options).eval(), device=device)
            for _ in range(a.layers)]
        decoders = [vkattn.TransformerDecoderLayer.from_torch(
            torch.nn.TransformerDecoderLayer(a.embed, a.heads, **options).eval(), device=device)
            for _ in range(a.layers)]
        layers = encoders
        what = (f"{a.layers} encoder layers on (B, S, E) = ({a.batch}, {a.seq}, {a.embed}), then {a.layers} decoder "
                f"layers\n  on a target of T = {target.shape[1]} (causal)")

        def run(memory, y):
            for layer in encoders:
                memory = layer(memory)
            for layer in decoders:
                y = layer(y, memory, tgt_is_causal=True)
            return y

    if a.model == "bert":
        bert = vkattn.from_pretrained(a.folder, device=device)
        E, H = bert.config["hidden_size"], bert.config["num_attention_heads"]
        head = vkattn.MultiheadAttention.from_torch(torch.nn.MultiheadAttention(E, H, batch_first=True).eval(),
                                                    device=device)
        layers = [head]
        ids = rng.integers(0, bert.config["vocab_size"], (a.batch, a.seq))
        what = (f"{bert.config['architecture']} ({a.folder}) on ids (B, T) = ({a.batch}, {a.seq}), then a "
                f"MultiheadAttention\n  over its last hidden state (E {E})")
        a.heads = H

        def bert_then_head(to_host):
            hidden = bert(ids, to_host=to_host).last_hidden_state
            return head(hidden, hidden, hidden, need_weights=False)[0]

        def through_the_host():
            return bert_then_head(True)

        def on_the_device():
            return bert_then_head(False).numpy()
    else:
        inputs = (x, target if a.model == "transformer" else None)

        def through_the_host():
            return run(*inputs)

        def on_the_device():
            return run(*(None if i is None else vkattn.to_device(i, device=device) for i in inputs)).numpy()

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
    print(f"{what}, {a.heads} heads, on {layers[0].device}")
    print(f"  arrays through the host: {host:8.2f} ms a chain (median of {a.rounds} rounds)")
    print(f"  device tensors:          {resident:8.2f} ms a chain ({host / resident:.2f}x; outputs within "
          f"{difference:.1e})")


if __name__ == "__main__":
    main()
