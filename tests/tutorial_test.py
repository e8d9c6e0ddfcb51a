#!/usr/bin/env python3
"""Runs one tutorial lesson and checks that it teaches what it says.

Usage: tutorial_test.py LESSON_EXECUTABLE. The lesson runs with --images into a scratch folder;
it must exit 0 with nothing on stderr (the validation layer is on), print its CPU/GPU agreement line and the shapes its lesson is about, and write
exactly the heatmaps listed below, each a well-formed SVG with one cell per element of its
plane. Exits non-zero with a message on the first failure."""
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

# lesson -> (strings its output must contain, {image file: (rows, cols)})
LESSONS = {
    "tutorial_01_batched_matmul": (
        ["scores_wrong_layout  attention_scores  (32, 128, 8, 64) (32, 128, 8, 64) -> (32, 128, 8, 8)",
         "(32, 8, 128, 64) (32, 8, 128, 64) -> (32, 8, 128, 128)",
         "merge_heads gives (32, 128, 512) = (B, T, H·d)",
         "not the (B, T, H, T) = (32, 128, 8, 128) the article prints"],
        {"scores_wrong_layout_b0_t0.svg": (8, 8), "weights_b0_h0.svg": (128, 128)}),
    "tutorial_02_scaled_dot_product": (
        ["row sums: 1.000000 1.000000 1.000000",
         "scaled:   mean largest weight", "unscaled: mean largest weight",
         "Attention weights shape: (2, 1, 5, 5)"],
        {"weights_3_tokens_b0_h0.svg": (3, 3)}),
    "tutorial_03_masks": (
        ["   0  . x x x x", "   4  . . . . .",
         "(2, 1, 5, 5) (2, 5) -> (2, 1, 5, 5)",
         "   1    0.250   0.250   0.250   0.250",
         "   1    0.000   0.000   0.000   0.000"],
        {"causal_mask.svg": (5, 5), "causal_weights_b0_h0.svg": (5, 5),
         "padding_weights_b0_h0.svg": (5, 5), "padding_weights_b1_h0.svg": (5, 5)}),
    "tutorial_04_multi_head_from_scratch": (
        ["(2, 10, 512) -> (2, 8, 10, 64)", "(2, 8, 10, 64) (2, 8, 10, 64) -> (2, 8, 10, 10)",
         "Output shape: (2, 10, 512)", "Attention weights shape (per head): (2, 8, 10, 10)",
         "output max |difference| 0, weights 0"],
        {f"heads_b0_h{h}.svg": (10, 10) for h in range(8)}),
    "tutorial_05_pytorch_style_api": (
        ["batch_first=False: output (2, 5, 4), weights (5, 2, 2)",
         "batch_first=True:  output (2, 5, 4), weights (2, 5, 5)",
         "(2, 7, 6) (4, 6) (4,) -> (2, 7, 4)",
         "query (2, 5, 8) has 8 features but embed_dim=4",
         "averaged (2, 5, 7), per head (2, 2, 5, 7); max |averaged - mean of the heads| = 0",
         "0   in_proj             linear            (2, 5, 8) (24, 8) (24,) -> (2, 5, 24)",
         "split_heads_k       split_heads       (2, 5, 24) -> (2, 2, 5, 4)"],
        {"weights_batch_first_b0.svg": (5, 5), "weights_batch_first_b1.svg": (5, 5),
         **{f"weights_per_head_b{b}_h{h}.svg": (5, 7) for b in range(2) for h in range(2)}}),
    "tutorial_06_encoder_block": (
        ["11  residual_add1               residual_add      (5, 2, 4) (5, 2, 4) -> (5, 2, 4)",
         "12  norm1                       layer_norm        (5, 2, 4) (4,) (4,) -> (5, 2, 4)",
         "Encoder Layer Output Shape: (5, 2, 4)",
         "   0   -0.502  -0.475  -0.447  -0.419  -0.392   2.235",
         "   0   -0.0040  -0.1587  -0.1543   0.0000   0.3457   0.8413   2.9960",
         "0   norm1                       layer_norm        (1, 3, 8) (8,) (8,) -> (1, 3, 8)",
         "38  norm                                 layer_norm",
         "2 layers, d_model 16, nhead 2, dim_feedforward 32: output (2, 6, 16); max |vkattn gpu - PyTorch| = "],
        {}),
    "tutorial_07_fused_vs_unfused": (
        ["7   attention_mask      attention_mask    (2, 4, 17, 17) (2, 17) -> (2, 4, 17, 17)",
         "18  flash_attention     flash_attention   (2, 4, 17, 16) (2, 4, 17, 16) (2, 4, 17, 16) (2, 17) -> (2, 4, 17, 16)",
         "fused against unfused, on the GPU: max |difference|",
         "   1024      16.00 MiB"],
        {}),
    "tutorial_08_debugging_with_traces": (
        ["first divergent step: 9 merge_heads, 48 of 64 elements",
         "first at flat index 4 = (b=0, i=0, f=4)",
         "  8 attention_values (2, 2, 4, 4): max |broken - good| 0\n"],
        {}),
}


def check_image(path, rows, cols):
    root = ElementTree.parse(path).getroot()
    assert root.tag.endswith("svg"), f"{path.name}: root is {root.tag}"
    width, height = int(root.get("width")), int(root.get("height"))
    cells = [e for e in root.iter() if e.get("class") == "cell"]
    assert (int(root.get("data-rows")), int(root.get("data-cols"))) == (rows, cols), f"{path.name}: wrong plane size"
    assert len(cells) == rows * cols, f"{path.name}: {len(cells)} cells for a {rows} x {cols} plane"
    right = max(int(c.get("x")) + int(c.get("width")) for c in cells)
    bottom = max(int(c.get("y")) + int(c.get("height")) for c in cells)
    assert right <= width and bottom <= height, f"{path.name}: cells outside the {width} x {height} image"


def main(executable):
    name = pathlib.Path(executable).name
    expected, images = LESSONS[name]
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([executable, "--images", tmp], capture_output=True, text=True)
        assert run.returncode == 0, f"{name} exited {run.returncode}: {run.stderr.strip()}"
        assert run.stderr == "", f"{name} printed on stderr (validation layer on): {run.stderr.strip()}"
        out = run.stdout
        assert re.search(r"CPU and GPU agree at every step of (\d+) of \1 parts", out), f"{name}: no agreement line"
        for text in expected:
            assert text in out, f"{name}: the output lacks {text!r}"
        written = sorted(p.name for p in pathlib.Path(tmp).iterdir())
        assert written == sorted(images), f"{name}: wrote {written}, expected {sorted(images)}"
        for image, (rows, cols) in images.items():
            check_image(pathlib.Path(tmp) / image, rows, cols)
    if name == "tutorial_07_fused_vs_unfused":
        # L, scores MiB, unfused ms, fused ms, unfused MiB, fused MiB: memory O(L) fused, O(L²) unfused
        rows = {int(m[0]): [float(v) for v in m[1:]] for m in
                re.findall(r"^ +(\d+) +([\d.]+) MiB +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)}
        assert sorted(rows) == [128, 256, 512, 1024], f"{name}: table rows {sorted(rows)}"
        unfused_growth, fused_growth = rows[1024][3] / rows[128][3], rows[1024][4] / rows[128][4]
        assert fused_growth <= 8.5 and unfused_growth >= 24, f"{name}: memory grew x{fused_growth} fused, x{unfused_growth} unfused"
    if name in ("tutorial_05_pytorch_style_api", "tutorial_06_encoder_block"):
        error = float(re.search(r"max \|vkattn gpu - PyTorch\| = (\S+)", out).group(1))
        assert error <= 1e-4, f"{name}: {error} from PyTorch"
    if name == "tutorial_05_pytorch_style_api":
        error = float(re.search(r"max \|packed - PyTorch\| = (\S+)", out).group(1))
        assert error <= 1e-4, f"{name}: the packed in_proj is {error} from PyTorch"
    print(f"{name}: exit 0, {len(expected)} expected lines, {len(images)} images checked")


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except AssertionError as failure:
        sys.exit(f"FAIL {failure}")
