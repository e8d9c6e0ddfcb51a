"""The trace explorer (vkattn report, --report) in a real browser: the page lists every step with
its shapes, draws a known cell in the expected colour, reads the value and index under the
pointer, follows the head selector, opens a corrupted dump at the corrupted step and element,
marks agreeing dumps as agreeing, opens lesson 08's report at merge_heads, looks like its
committed screenshot, makes no network request and writes nothing to the console (conftest)."""
import json
import math
import os
import shutil

import numpy as np
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from conftest import WINDOW, pixels_of_png, run

VKATTN = os.environ["VKATTN_CLI"]
LESSON_08 = os.environ["VKATTN_LESSON_08"]
GOLDEN = os.environ["VKATTN_GOLDEN_DIR"]
SCREENSHOT = os.environ["VKATTN_REPORT_SCREENSHOT"]  # docs/images/report_lesson_08.png

WHITE, BLUE, GREY, RED = np.array([255, 255, 255]), np.array([8, 48, 107]), [85, 85, 85], [165, 15, 21]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """key_padding_mask's golden attention on the GPU and the CPU, unfused, dumped with values:
    DIR/gpu and DIR/cpu (12 steps; attention_mask blocks the padded keys)."""
    root = tmp_path_factory.mktemp("dumps")
    fixture = os.path.join(GOLDEN, "key_padding_mask")
    inputs = [f"--{name.replace('_', '-')}={os.path.join(fixture, name)}.npy"
              for name in ("query", "key", "value", "key_padding_mask")]
    run(VKATTN, "run", "--weights", os.path.join(fixture, "weights.safetensors"), *inputs, "--attention", "unfused",
        "--side-by-side", "--trace", root, "--trace-values")
    return root


def report(*arguments):
    run(VKATTN, "report", *arguments)
    return arguments[arguments.index("-o") + 1]


def steps_of(dump):
    with open(os.path.join(dump, "trace.json")) as f:
        return json.load(f)["steps"]


def values_of(dump, name):
    step = next(s for s in steps_of(dump) if s["name"] == name)
    return np.load(os.path.join(dump, step["output"]["file"]))


def open_step(driver, name):
    driver.find_element(By.CSS_SELECTOR, f'#steps li[data-name="{name}"]').click()


def choose(driver, axis, value):
    Select(driver.find_element(By.CSS_SELECTOR, f'select.axis[data-axis="{axis}"]')).select_by_value(str(value))


def heatmap(driver, which="a"):
    return driver.find_element(By.CSS_SELECTOR, f'canvas.heatmap[data-which="{which}"]')


def pixel(driver, canvas, i, j):
    """The colour the page drew for sample cell (i, j): one canvas pixel per cell."""
    return driver.execute_script(
        "return Array.from(arguments[0].getContext('2d').getImageData(arguments[2], arguments[1], 1, 1).data)",
        canvas, int(i), int(j))[:3]


def expected_colour(value, lo, hi):
    return list(np.rint(WHITE + (BLUE - WHITE) * (value - lo) / (hi - lo)).astype(int))


def point_at(driver, canvas, i, j):
    """Moves the pointer to the centre of sample cell (i, j) (Selenium 4: offsets from the centre)."""
    width, height = int(canvas.get_attribute("width")), int(canvas.get_attribute("height"))
    size = canvas.size
    x = math.floor((j + 0.5) * size["width"] / width) - size["width"] // 2
    y = math.floor((i + 0.5) * size["height"] / height) - size["height"] // 2
    ActionChains(driver).move_to_element_with_offset(canvas, x, y).perform()
    return driver.find_element(By.ID, "readout").text


def test_every_step_is_listed_with_its_shapes(dumps, tmp_path, page):
    driver = page(report(dumps / "gpu", "-o", tmp_path / "gpu.html"))
    items = driver.find_elements(By.CSS_SELECTOR, "#steps li")
    steps = steps_of(dumps / "gpu")
    assert [li.get_attribute("data-name") for li in items] == [s["name"] for s in steps]
    for li, step in zip(items, steps):
        shape = "(" + ", ".join(map(str, step["output"]["shape"])) + ")"
        assert f"→ {shape}" in li.text, li.text
        for given in step["inputs"]:
            assert given["name"] in li.text
    assert "gpu on" in driver.find_element(By.ID, "passes").text
    assert "unfused attention" in driver.find_element(By.ID, "passes").text
    assert len(driver.find_elements(By.CSS_SELECTOR, "#timeline rect.step")) == len(steps)


def test_a_known_cell_has_its_colour_and_blocked_cells_are_grey(dumps, tmp_path, page):
    driver = page(report(dumps / "gpu", "-o", tmp_path / "gpu.html"))
    weights = values_of(dumps / "gpu", "softmax")  # (B, H, L, S) = (3, 2, 4, 5)
    open_step(driver, "softmax")
    choose(driver, "b", 2), choose(driver, "h", 1)
    lo, hi = weights.min(), weights.max()
    assert pixel(driver, heatmap(driver), 1, 3) == expected_colour(weights[2, 1, 1, 3], lo, hi)

    masked = values_of(dumps / "gpu", "attention_mask")
    blocked = np.argwhere(np.isneginf(masked))
    assert len(blocked) > 0
    b, h, i, j = blocked[-1]
    open_step(driver, "attention_mask")
    choose(driver, "b", b), choose(driver, "h", h)
    assert pixel(driver, heatmap(driver), i, j) == GREY


def test_the_pointer_reads_the_value_and_its_index(dumps, tmp_path, page):
    driver = page(report(dumps / "gpu", "-o", tmp_path / "gpu.html"))
    weights = values_of(dumps / "gpu", "softmax")
    open_step(driver, "softmax")
    choose(driver, "b", 1), choose(driver, "h", 0)
    readout = point_at(driver, heatmap(driver), 2, 4)
    assert "softmax(b=1, h=0, i=2, j=4)" in readout
    shown = float(readout.split("gpu = ")[1].split()[0].rstrip(","))
    assert shown == pytest.approx(weights[1, 0, 2, 4], rel=1e-6)


def test_the_head_selector_changes_the_picture(dumps, tmp_path, page):
    driver = page(report(dumps / "gpu", "-o", tmp_path / "gpu.html"))
    scores = values_of(dumps / "gpu", "attention_scores")  # (3, 2, 4, 5)
    open_step(driver, "attention_scores")
    lo, hi = scores.min(), scores.max()
    for h in (0, 1):
        choose(driver, "h", h)
        drawn = [[pixel(driver, heatmap(driver), i, j) for j in range(5)] for i in range(4)]
        assert drawn == [[expected_colour(scores[0, h, i, j], lo, hi) for j in range(5)] for i in range(4)]
        if h == 0:
            head_0 = drawn
    assert drawn != head_0


def test_a_corrupted_dump_opens_at_its_step_and_element(dumps, tmp_path, page):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(dumps / "cpu", corrupt)
    step = next(s for s in steps_of(corrupt) if s["name"] == "attention_scores")
    scores = np.load(corrupt / step["output"]["file"])
    scores[2, 1, 3, 1] += 0.5
    np.save(corrupt / step["output"]["file"], scores)

    driver = page(report(corrupt, "--against", dumps / "gpu", "-o", tmp_path / "corrupt.html"))
    assert driver.find_element(By.CSS_SELECTOR, "#steps li.selected").get_attribute("data-name") == "attention_scores"
    assert "first divergent step: 6 attention_scores" in driver.find_element(By.ID, "verdict").text
    flat = np.ravel_multi_index((2, 1, 3, 1), scores.shape)
    assert f"first at flat index {flat} = (b=2, h=1, i=3, j=1)" in driver.find_element(By.ID, "step-diff").text
    assert "attention_scores(b=2, h=1, i=3, j=1)" in driver.find_element(By.ID, "readout").text
    for axis, value in (("b", "2"), ("h", "1")):
        selector = driver.find_element(By.CSS_SELECTOR, f'select.axis[data-axis="{axis}"]')
        assert Select(selector).first_selected_option.get_attribute("value") == value
    assert pixel(driver, heatmap(driver, "diff"), 3, 1) == RED  # the largest difference, and only it
    assert pixel(driver, heatmap(driver, "diff"), 3, 2) == list(WHITE)
    assert len(driver.find_elements(By.CSS_SELECTOR, ".map .focus")) == 3  # outlined in a, b and |a - b|
    statuses = [li.get_attribute("class") for li in driver.find_elements(By.CSS_SELECTOR, "#steps li")]
    assert [("diverges" in c) for c in statuses] == [s["name"] == "attention_scores" for s in steps_of(corrupt)]


def test_agreeing_dumps_mark_every_step_as_agreeing(dumps, tmp_path, page):
    driver = page(report(dumps / "gpu", "--against", dumps / "cpu", "-o", tmp_path / "both.html"))
    items = driver.find_elements(By.CSS_SELECTOR, "#steps li")
    assert items and all("agrees" in li.get_attribute("class").split() for li in items)
    assert driver.find_element(By.ID, "verdict").text.startswith(f"all {len(items)} compared steps agree")


def test_a_large_tensor_is_sampled_and_says_so(tmp_path, page):
    """A (2, 1500, 900) step: the page embeds a sample, says which, and reads exact values."""
    dump = tmp_path / "large"
    dump.mkdir()
    big = np.random.default_rng(0).standard_normal((2, 1500, 900)).astype(np.float32)
    np.save(dump / "000_attention_scores.npy", big)
    trace = {"format": "vkattn-trace", "version": 1, "pass": "large", "backend": "cpu", "device": "reference",
             "config": {}, "steps": [{"index": 0, "name": "attention_scores", "op": "attention_scores",
                                      "inputs": [], "output": {"name": "attention_scores", "shape": [2, 1500, 900],
                                                               "dtype": "float32", "dims": ["h", "i", "j"],
                                                               "file": "000_attention_scores.npy"}}]}
    (dump / "trace.json").write_text(json.dumps(trace))
    path = report(dump, "-o", tmp_path / "large.html")
    assert os.path.getsize(path) < 2 * 1024 * 1024  # 2^18 cells of float32 as base64, and the page
    driver = page(path)
    note = driver.find_element(By.ID, "sample-note").text
    assert note.startswith("showing 375 × 300 of 1500 × 900, every 4th row and every 3rd column."), note
    choose(driver, "h", 1)
    canvas = heatmap(driver)
    rows, cols = int(canvas.get_attribute("height")), int(canvas.get_attribute("width"))
    assert 2 * rows * cols <= 2 ** 18
    readout = point_at(driver, canvas, rows - 1, cols - 1)
    index = readout.split("(")[1].split(")")[0]  # h=1, i=…, j=…
    h, i, j = (int(part.split("=")[1]) for part in index.split(", "))
    assert h == 1 and i >= 1500 - 1500 // rows - 1 and j >= 900 - 900 // cols - 1
    assert float(readout.split("large = ")[1].split()[0]) == pytest.approx(big[h, i, j], rel=1e-6)


def test_lesson_08_opens_at_merge_heads_and_looks_like_its_screenshot(tmp_path, page):
    """The README's picture: lesson 08's report, at its broken merge_heads. Text (the times) may
    differ a little between runs and machines; the page must not."""
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the lesson's dumps, away from another run's
    run(LESSON_08, "--report", tmp_path / "lesson_08.html", env=env)
    driver = page(tmp_path / "lesson_08.html")
    assert driver.find_element(By.CSS_SELECTOR, "#steps li.selected").get_attribute("data-name") == "merge_heads"
    assert "merge_heads(b=0, i=0, f=4)" in driver.find_element(By.ID, "readout").text
    assert "broken = -0.005689442" in driver.find_element(By.ID, "readout").text
    assert len(Select(driver.find_element(By.ID, "section-select")).options) == 3

    # the same from the lesson's dumps, with vkattn report, and the page the lesson wrote beside them
    dumps = tmp_path / "vkattn_tutorial_08"
    for path in (report(dumps / "broken", "--against", dumps / "good", "-o", tmp_path / "dumps.html"),
                 dumps / "broken_against_good.html"):
        driver = page(path)
        assert driver.find_element(By.CSS_SELECTOR, "#steps li.selected").get_attribute("data-name") == "merge_heads"
        assert "merge_heads(b=0, i=0, f=4)" in driver.find_element(By.ID, "readout").text

    driver = page(tmp_path / "lesson_08.html")
    driver.set_window_size(*WINDOW)
    shot = driver.get_screenshot_as_png()
    if os.environ.get("VKATTN_UPDATE_SCREENSHOT"):
        with open(SCREENSHOT, "wb") as f:
            f.write(shot)
    now = pixels_of_png(driver, shot)[..., :3].astype(int)
    with open(SCREENSHOT, "rb") as f:
        reference = pixels_of_png(driver, f.read())[..., :3].astype(int)
    failed = tmp_path / "lesson_08_screenshot.png"
    if now.shape != reference.shape:
        failed.write_bytes(shot)
        pytest.fail(f"the screenshot is {now.shape}, the reference {reference.shape}; this one: {failed}")
    differing = float((np.abs(now - reference).max(axis=2) > 48).mean())
    if differing > 0.02:
        failed.write_bytes(shot)
    assert differing <= 0.02, f"{differing:.1%} of the pixels differ from {SCREENSHOT}; this one: {failed}"


def test_a_trace_in_a_notebook_shows_the_same_page(tmp_path, page):
    """Trace._repr_html_ (the Python package): the page in a frame, as Jupyter would show it."""
    import torch
    import vkattn
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    module = vkattn.MultiheadAttention.from_state_dict(mha.state_dict(), 2, batch_first=True, device="cpu")
    _, trace = module.trace(torch.randn(1, 3, 8))
    notebook = tmp_path / "notebook.html"
    notebook.write_text(f"<!DOCTYPE html><html><body><h1>a notebook</h1>{trace._repr_html_()}</body></html>")
    driver = page(notebook)
    driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
    names = [li.get_attribute("data-name") for li in driver.find_elements(By.CSS_SELECTOR, "#steps li")]
    assert names == [s.name for s in trace.steps]
    assert heatmap(driver).get_attribute("width") == "8"  # q_proj (1, 3, 8): the first step with values
    driver.switch_to.default_content()
