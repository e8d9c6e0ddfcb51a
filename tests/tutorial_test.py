#!/usr/bin/env python3
"""Runs one tutorial lesson and checks that it teaches what it says, and reads as a lesson.

Usage: tutorial_test.py LESSON_EXECUTABLE | LESSON.py. A Python lesson must exit 0 with every
line within 100 columns. A C++ lesson runs with --images into a scratch folder;
it must exit 0 with nothing on stderr (the validation layer is on), print its CPU/GPU agreement
line, the shapes and steps its lesson is about, no line wider than 100 columns, words above every
step's row and the untimed first run above every table; and write exactly the pictures listed
below, each a well-formed SVG (a heatmap with one cell per element of its plane, or a line plot
with its series). It runs as a newcomer's first run does: tuning on, an empty plan cache. Lesson 04 runs with the driver's shader cache off, so that its first run
compiles every pipeline: its table's GPU times must not include that. Exits non-zero with a
message on the first failure."""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

# "row:" strings are table rows, "index step-label inputs -> output" with single spaces; others
# are looked for in the text with every run of spaces and line breaks made one space.
# lesson -> (strings its output must contain, {heatmap file: (rows, cols)}, {plot file: series})
LESSONS = {
    "tutorial_01_batched_matmul": (
        ["row:0 scores_wrong_layout (attention_scores) (32, 128, 8, 64) (32, 128, 8, 64) -> (32, 128, 8, 8)",
         "row:3 attention_scores (32, 8, 128, 64) (32, 8, 128, 64) -> (32, 8, 128, 128)",
         "merge_heads gives (32, 128, 512) = (B, T, H·d)",
         "not the (B, T, H, T) = (32, 128, 8, 128) the article prints"],
        {"scores_wrong_layout_b0_t0.svg": (8, 8), "weights_b0_h0.svg": (128, 128)}, {}),
    "tutorial_02_scaled_dot_product": (
        ["row sums: 1.000000 1.000000 1.000000",
         "scaled: mean largest weight", "unscaled: mean largest weight",
         "Attention weights shape: (2, 1, 5, 5)",
         "Dividing by √512 = 22.6 brings the spread back to about 1."],
        {"weights_3_tokens_b0_h0.svg": (3, 3)}, {}),
    "tutorial_03_masks": (
        ["\n   0  . x x x x\n", "\n   4  . . . . .\n",
         "row:1 attention_mask (2, 1, 5, 5) (2, 5) -> (2, 1, 5, 5)",
         "\n   1    0.250   0.250   0.250   0.250\n",
         "\n   1    0.000   0.000   0.000   0.000\n"],
        {"causal_mask.svg": (5, 5), "causal_weights_b0_h0.svg": (5, 5),
         "padding_weights_b0_h0.svg": (5, 5), "padding_weights_b1_h0.svg": (5, 5)}, {}),
    "tutorial_04_multi_head_from_scratch": (
        ["row:1 split_heads_q (2, 10, 512) -> (2, 8, 10, 64)",
         "row:6 attention_scores (2, 8, 10, 64) (2, 8, 10, 64) -> (2, 8, 10, 10)",
         "scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
         "Output shape: (2, 10, 512)", "Attention weights shape (per head): (2, 8, 10, 10)",
         "Its table would repeat the one above",
         "output max |difference| 0, weights 0"],
        {f"heads_b0_h{h}.svg": (10, 10) for h in range(8)}, {}),
    "tutorial_05_pytorch_style_api": (
        ["batch_first=False: output (2, 5, 4), weights (5, 2, 2)",
         "batch_first=True: output (2, 5, 4), weights (2, 5, 5)",
         "row:2 k_proj (linear) (2, 7, 6) (4, 6) (4,) -> (2, 7, 4)",
         "query (2, 5, 8) has 8 features but embed_dim=4",
         "averaged (2, 5, 7), per head (2, 2, 5, 7); max |averaged - mean of the heads| = 0",
         "row:0 in_proj (linear) (2, 5, 8) (24, 8) (24,) -> (2, 5, 24)",
         "row:2 split_heads_k (2, 5, 24) -> (2, 2, 5, 4)"],
        {"weights_batch_first_b0.svg": (5, 5), "weights_batch_first_b1.svg": (5, 5),
         **{f"weights_per_head_b{b}_h{h}.svg": (5, 7) for b in range(2) for h in range(2)}}, {}),
    "tutorial_06_encoder_block": (
        ["row:11 residual_add1 (5, 2, 4) (5, 2, 4) -> (5, 2, 4)",
         "row:12 norm1 (layer_norm) (5, 2, 4) (4,) (4,) -> (5, 2, 4)",
         "Encoder Layer Output Shape: (5, 2, 4)",
         "\n   0   -0.502  -0.475  -0.447  -0.419  -0.392   2.235\n",
         "\n   0   -0.0040  -0.1587  -0.1543   0.0000   0.3457   0.8413   2.9960\n",
         "row:0 norm1 (layer_norm) (1, 3, 8) (8,) (8,) -> (1, 3, 8)",
         "2 layers, d_model 16, nhead 2, dim_feedforward 32: output (2, 6, 16); max |vkattn gpu - PyTorch| = "],
        {"layer_norm_before_after.svg": (2, 6)}, {}),
    "tutorial_07_fused_vs_unfused": (
        ["row:7 attention_mask (2, 4, 17, 17) (2, 17) -> (2, 4, 17, 17)",
         "row:18 flash_attention (2, 4, 17, 16) (2, 4, 17, 16) (2, 4, 17, 16) (2, 17) -> (2, 4, 17, 16)",
         "fused against unfused, on the GPU: max |difference|",
         "\n   1024      16.00 MiB"],
        {}, {"time_against_L.svg": ["unfused", "fused"], "memory_against_L.svg": ["unfused", "fused"]}),
    "tutorial_08_debugging_with_traces": (
        ["first divergent step: 9 merge_heads, 48 of 64 elements",
         "first at flat index 4 = (b=0, i=0, f=4)",
         "\n  8 attention_values (2, 2, 4, 4): max |broken - good| 0\n"],
        {"merge_heads_difference_b0.svg": (4, 8)}, {}),
    "tutorial_09_generating_with_a_kv_cache": (
        ["row:9 layers.0.self_attn.kv_cache_append_k (1, 4, 1, 16) -> (1, 4, 64, 16)",
         "row:11 layers.0.self_attn.flash_decoding (1, 4, 1, 16) (1, 4, 64, 16) (1, 4, 64, 16) -> (1, 4, 1, 1, 18)",
         "row:12 layers.0.self_attn.attention_combine (1, 4, 1, 1, 18) -> (1, 4, 1, 16)",
         "2 × 2 layers × 1 × 4 × 64 × 16 × 4 bytes = 65536 bytes",
         "the same 40 tokens both ways; and the same as torch's"],
        {}, {"time_per_token.svg": ["with the KV cache", "recomputing every position"]}),
    "tutorial_10_attention_since_2017": (
        ["row:3 split_heads_k (1, 6, 16) -> (1, 2, 6, 8)",
         "row:8 attention_scores (1, 4, 6, 8) (1, 2, 6, 8) -> (1, 4, 6, 6)",
         "GQA 2 (1, 2, 6, 8) 2 × 2 × 4096 × 8 × 4 bytes = 0.5 MiB",
         "MQA 1 (1, 1, 6, 8) 2 × 1 × 4096 × 8 × 4 bytes = 0.2 MiB",
         "q at 1002, k at 1000 (i - j = 2): score",
         "the wrong convention gives a model that runs and is wrong",
         "\n   3  x . . . x x x x\n"],
        {"rope_angles.svg": (16, 4), "window_mask.svg": (8, 8), "window_weights_b0_h0.svg": (8, 8)}, {}),
    "tutorial_11_a_real_model": (
        ["row:1 position_embedding (positional_encoding) (1, 7, 64) (7, 64) -> (1, 7, 64)",
         "row:9 layers.0.self_attn.attention_scores (1, 4, 7, 16) (1, 4, 7, 16) -> (1, 4, 7, 7)",
         "row:41 lm_head (linear) (1, 7, 64) (513, 64) -> (1, 7, 513)",
         "position 3: id 70 'g'",
         "+ layer 1's MLP",
         "p = 0.966 id 268 ' to'",
         "also picks ' to'"],
        {f"pattern_layer{layer}_h{h}.svg": (7, 7) for layer in range(2) for h in range(4)}, {}),
}

COLUMNS = 100
ROW = re.compile(r"^(\d+) +(\S+(?: \(\w+\))?) +(\(.*?)  +([\d.]+|-) +([\d.]+|-)  (.*)$")
CONTINUED = re.compile(r"^ {3,}(\(.*|->.*)$")


def tables(out):
    """Every side-by-side table: [(line number of its header, [(index, label, shapes, gpu µs)])]."""
    found, lines = [], out.split("\n")
    for n, line in enumerate(lines):
        if re.match(r"^# +step +inputs -> output", line):
            found.append((n, []))
        elif found and (m := ROW.match(line)):
            found[-1][1].append([m[1], m[2], m[3].strip(), m[4]])
        elif found and found[-1][1] and (m := CONTINUED.match(line)):
            found[-1][1][-1][2] += " " + m[1].strip()
    return found


def check_text(name, out, expected):
    lines = out.split("\n")
    wide = [(n + 1, len(line)) for n, line in enumerate(lines) if len(line) > COLUMNS]
    assert not wide, f"{name}: lines wider than {COLUMNS} columns (line, width): {wide[:5]}"
    found = tables(out)
    assert found, f"{name}: no side-by-side table"
    for header, rows in found:
        assert rows, f"{name}: the table at line {header + 1} has no rows"
        above = "\n".join(lines[max(0, header - 4):header])
        assert "gpu µs: the steps' second run. The first, untimed, took" in above, \
            f"{name}: the table at line {header + 1} does not say what its GPU times are"
    rows = {f"row:{i} {label} {shapes}" for _, table in found for i, label, shapes, _ in table}
    squashed = " ".join(out.split())
    for text in expected:
        if text.startswith("row:"):
            assert text in rows, f"{name}: no table row {text[4:]!r}; rows: {sorted(rows)}"
        elif "\n" in text:
            assert text in out, f"{name}: the output lacks {text!r}"
        else:
            assert text in squashed, f"{name}: the output lacks {text!r}"
    return found


def check_first_run(name, out, found):
    """With nothing cached, the first run compiles the pipelines; the table's times must not."""
    first = re.search(r"The first, untimed, took ([\d.]+) (ms|s):", out)
    first_us = float(first[1]) * (1e3 if first[2] == "ms" else 1e6)
    slowest = max(float(t) for _, _, _, t in found[0][1] if t != "-")
    assert slowest * 2 < first_us, \
        f"{name}: a GPU step took {slowest} µs, the untimed first run {first_us} µs: the table holds compilation"
    return first_us, slowest


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


def check_plot(path, series):
    root = ElementTree.parse(path).getroot()
    assert root.tag.endswith("svg"), f"{path.name}: root is {root.tag}"
    lines = [e for e in root.iter() if e.tag.endswith("polyline")]
    assert len(lines) == len(series), f"{path.name}: {len(lines)} lines for series {series}"
    texts = {e.text for e in root.iter() if e.tag.endswith("text")}
    assert set(series) <= texts, f"{path.name}: the legend lacks {set(series) - texts}"


def main_python(script):
    """A Python lesson: it exits 0 and every line fits; its own asserts check its numbers."""
    name = pathlib.Path(script).name
    run = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert run.returncode == 0, f"{name} exited {run.returncode}: {run.stderr.strip()[-2000:]}"
    lines = run.stdout.split("\n")
    wide = [(n + 1, len(line)) for n, line in enumerate(lines) if len(line) > COLUMNS]
    assert not wide, f"{name}: lines wider than {COLUMNS} columns (line, width): {wide[:5]}"
    print(f"{name}: exit 0, {len(lines)} lines within {COLUMNS} columns")


def keep_shader_cache(env):
    """Mesa keeps compiled shaders under XDG_CACHE_HOME too: point it where it was, so that a
    lesson's empty plan cache does not also recompile every pipeline the suite has compiled
    (lesson 09 under the sanitizers: 328 s with its own shader cache in the suite, 103 s sharing it)."""
    if "MESA_SHADER_CACHE_DIR" not in env:
        home = env.get("XDG_CACHE_HOME", "")
        if not home.startswith("/") and env.get("HOME"):
            home = os.path.join(env["HOME"], ".cache")
        if home.startswith("/"):
            env["MESA_SHADER_CACHE_DIR"] = home


def main(executable):
    if executable.endswith(".py"):
        return main_python(executable)
    name = pathlib.Path(executable).name
    expected, images, plots = LESSONS[name]
    env = dict(os.environ)
    if name == "tutorial_04_multi_head_from_scratch":
        env["MESA_SHADER_CACHE_DISABLE"] = "true"  # a cold start: every pipeline compiled here
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as cache:
        # as a newcomer runs it: tuning on, no plan remembered yet (the suite's tests run with
        # tuning off); a plan the device cannot measure must not fail it or print on stderr
        env["VKATTN_TUNE"] = "on"
        keep_shader_cache(env)
        env["XDG_CACHE_HOME"] = cache
        run = subprocess.run([executable, "--images", tmp], capture_output=True, text=True, env=env)
        assert run.returncode == 0, f"{name} exited {run.returncode}: {run.stderr.strip()}"
        assert run.stderr == "", f"{name} printed on stderr (validation layer on): {run.stderr.strip()}"
        out = run.stdout
        assert re.search(r"CPU and GPU agree at every step of (\d+) of \1 parts", out), f"{name}: no agreement line"
        found = check_text(name, out, expected)
        if name == "tutorial_04_multi_head_from_scratch":
            first_us, slowest = check_first_run(name, out, found)
            print(f"{name}: cold first run {first_us / 1e3:.0f} ms, slowest step in the table {slowest:.0f} µs")
        written = sorted(p.name for p in pathlib.Path(tmp).iterdir())
        assert written == sorted([*images, *plots]), f"{name}: wrote {written}, expected {sorted([*images, *plots])}"
        for image, (rows, cols) in images.items():
            check_image(pathlib.Path(tmp) / image, rows, cols)
        for plot, series in plots.items():
            check_plot(pathlib.Path(tmp) / plot, series)
    if name == "tutorial_07_fused_vs_unfused":
        # L, scores MiB, unfused ms, fused ms, unfused MiB, fused MiB: memory O(L) fused, O(L²) unfused
        rows = {int(m[0]): [float(v) for v in m[1:]] for m in
                re.findall(r"^ +(\d+) +([\d.]+) MiB +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)}
        assert sorted(rows) == [128, 256, 512, 1024], f"{name}: table rows {sorted(rows)}"
        unfused_growth, fused_growth = rows[1024][3] / rows[128][3], rows[1024][4] / rows[128][4]
        assert fused_growth <= 8.5 and unfused_growth >= 24, f"{name}: memory grew x{fused_growth} fused, x{unfused_growth} unfused"
    if name in ("tutorial_05_pytorch_style_api", "tutorial_06_encoder_block"):
        error = float(re.search(r"max \|vkattn gpu - PyTorch\| = ([\d.e+-]+)", " ".join(out.split())).group(1))
        assert error <= 1e-4, f"{name}: {error} from PyTorch"
    if name == "tutorial_05_pytorch_style_api":
        error = float(re.search(r"max \|packed - PyTorch\| = ([\d.e+-]+)", " ".join(out.split())).group(1))
        assert error <= 1e-4, f"{name}: the packed in_proj is {error} from PyTorch"
    print(f"{name}: exit 0, {len(expected)} expected lines, {len(found)} tables, "
          f"{len(images) + len(plots)} pictures checked")


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except AssertionError as failure:
        sys.exit(f"FAIL {failure}")
