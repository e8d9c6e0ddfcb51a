#!/usr/bin/python3
"""How large the trace explorer's page is, and how long a browser takes to open it, for a real
trace: S1 (B 32, L 100, E 512, H 8, the seed article's shape), unfused, every step traced with
its values on the CPU reference — and the same against the GPU's pass, side by side.

  PYTHONPATH=build/python python3 bench/report_open.py [--vkattn build/bin/vkattn] [--rounds 3]

Prints the dump's size on disk, `vkattn report`'s time and the page's size, then the median time
headless Chromium takes to open the page (navigation to the end of its script: the data parsed
and the first step drawn) and to open the largest step (softmax, 256 planes).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

import vkattn


def megabytes(n):
    return f"{n / 1e6:.1f} MB"


def size_of(directory):
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vkattn", default="build/bin/vkattn")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(512, 8, batch_first=True).eval()
    x = torch.randn(32, 100, 512)
    module = vkattn.MultiheadAttention.from_state_dict(mha.state_dict(), 8, batch_first=True)
    _, trace = module.trace(x, attention="unfused", side_by_side=True)
    work = tempfile.mkdtemp(prefix="vkattn_report_open_")
    trace.reference.dump(os.path.join(work, "cpu"))
    trace.dump(os.path.join(work, "gpu"))
    print(f"S1 (B 32, L 100, E 512, H 8), unfused, {len(trace.steps)} steps traced with values: "
          f"{megabytes(size_of(os.path.join(work, 'cpu')))} of .npy a pass")

    pages = {}
    for name, extra in (("one pass", []), ("gpu against cpu", ["--against", os.path.join(work, "cpu")])):
        page = os.path.join(work, name.replace(" ", "_") + ".html")
        start = time.perf_counter()
        subprocess.run([args.vkattn, "report", os.path.join(work, "gpu"), *extra, "-o", page], check=True,
                       capture_output=True)
        pages[name] = page
        print(f"{name:16} vkattn report {time.perf_counter() - start:5.2f} s, page {megabytes(os.path.getsize(page))}")

    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        for name, page in pages.items():
            opens, steps = [], []
            for _ in range(args.rounds):
                start = time.perf_counter()
                driver.get("file://" + page)  # returns after the load event: the inline script has run
                opens.append(time.perf_counter() - start)
                start = time.perf_counter()
                driver.find_element(By.CSS_SELECTOR, '#steps li[data-name="softmax"]').click()
                driver.execute_script("return document.querySelector('canvas.heatmap').width")
                steps.append(time.perf_counter() - start)
            print(f"{name:16} opens in {statistics.median(opens) * 1e3:6.0f} ms (median of {args.rounds}), "
                  f"softmax (32, 8, 100, 100) drawn in {statistics.median(steps) * 1e3:4.0f} ms")
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
