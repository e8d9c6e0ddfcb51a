"""A headless Chromium (Debian's chromium and chromium-driver) driven by Selenium, for the trace
explorer's pages: each test opens a page with `page(path)`, and every page it opened is checked
afterwards for network requests (none but the page itself) and console messages (none)."""
import base64
import json
import os
import subprocess

import numpy as np
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

WINDOW = (1400, 900)  # the screenshot's size, in CSS pixels at a device scale of 1


@pytest.fixture(scope="session")
def browser():
    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--force-device-scale-factor=1", "--hide-scrollbars", "--font-render-hinting=none",
                     f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser):
    """page(path) opens a file in the browser and returns the driver; after the test, the page
    must have made no request but for itself and written nothing to the console."""
    opened, messages, performance = [], [], []

    def collect():
        messages.extend(browser.get_log("browser"))
        performance.extend(browser.get_log("performance"))

    def open_page(path):
        collect()
        url = "file://" + os.path.abspath(path)
        browser.get(url)
        opened.append(url)
        return browser

    browser.get_log("browser"), browser.get_log("performance")  # the previous test's are checked
    yield open_page
    if not opened:
        return
    collect()
    assert messages == [], f"console messages: {messages}"
    requests = []
    for entry in performance:
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if not url.startswith("data:"):  # a test's own decoding of a PNG, not a request
                requests.append(url)
    assert requests and set(requests) <= set(opened), f"requests beyond the pages: {requests}"


def run(*command, env=None):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=env)
    assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return result.stdout


def pixels_of_png(browser, png):
    """An RGBA array of a PNG, decoded by the browser (no image library needed)."""
    script = """
      const done = arguments[arguments.length - 1];
      const image = new Image();
      image.onload = () => {
        const canvas = document.createElement("canvas");
        canvas.width = image.width; canvas.height = image.height;
        const context = canvas.getContext("2d");
        context.drawImage(image, 0, 0);
        const bytes = context.getImageData(0, 0, image.width, image.height).data;
        let text = "";
        for (let k = 0; k < bytes.length; k += 8192) text += String.fromCharCode(...bytes.subarray(k, k + 8192));
        done([image.width, image.height, btoa(text)]);
      };
      image.src = "data:image/png;base64," + arguments[0];
    """
    width, height, data = browser.execute_async_script(script, base64.b64encode(png).decode())
    return np.frombuffer(base64.b64decode(data), np.uint8).reshape(height, width, 4)
