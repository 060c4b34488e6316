"""The live view in a real browser: headless Chromium opens /dashboard while requests run and
the page's DOM shows engine steps being drawn. Leaves a screenshot in the temp folder, or where
BRAID_DASHBOARD_SCREENSHOT says (BRAID_DASHBOARD_SCREENSHOT=docs/dashboard.png renews the
README's picture); a test run never writes into the checkout by itself."""

import concurrent.futures as cf
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
import requests
from playwright.sync_api import sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def load(url: str, stop: threading.Event):
    """Four decoders and two long prompts, so the picture shows slices between decodes."""

    def decoder(i):
        while not stop.is_set():
            requests.post(url + "/v1/completions", json={"prompt": f"Story {i}: once upon a time", "max_tokens": 120, "ignore_eos": True}, timeout=120)

    def long_prompt(i):
        words = " ".join(f"word{j % 97}" for j in range(900 + i))
        while not stop.is_set():
            requests.post(url + "/v1/completions", json={"prompt": words, "max_tokens": 4}, timeout=120)

    with cf.ThreadPoolExecutor(6) as pool:
        for i in range(4):
            pool.submit(decoder, i)
        for i in range(2):
            pool.submit(long_prompt, i)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is installed by scripts/install-test-tools.sh")
def test_dashboard_draws_steps_in_headless_chromium(server):
    stop = threading.Event()
    loader = threading.Thread(target=load, args=(server.url, stop), daemon=True)
    loader.start()
    try:
        with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
            browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=FLAGS, headless=True, viewport={"width": 1280, "height": 900})
            page = browser.new_page()
            page.goto(server.url + "/dashboard")
            page.wait_for_function("Number(document.body.dataset.stepsDrawn || 0) >= 60", timeout=60_000)
            page.wait_for_timeout(3000)
            drawn = int(page.get_attribute("body", "data-steps-drawn"))
            assert drawn >= 60
            assert page.inner_text("#status") == "live"
            assert page.inner_text("#running") not in ("–", "")
            # The cost model's error over the steps drawn, p50 / p99: "+4% / +31%".
            assert re.fullmatch(r"[+-]\d+% / [+-]\d+%", page.inner_text("#prediction")), page.inner_text("#prediction")
            # The canvas has pixels of both colours: decode bars and prompt slices.
            colours = page.evaluate(
                """() => {
                  const c = document.getElementById('tokens');
                  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                  let decode = 0, prefill = 0;
                  for (let i = 0; i < d.length; i += 4) {
                    if (d[i] === 0x3a && d[i+1] === 0x7b && d[i+2] === 0xe0) decode++;
                    if (d[i] === 0xe0 && d[i+1] === 0x80 && d[i+2] === 0x3a) prefill++;
                  }
                  return {decode, prefill};
                }"""
            )
            assert colours["decode"] > 0 and colours["prefill"] > 0, colours
            shot = os.environ.get("BRAID_DASHBOARD_SCREENSHOT") or str(Path(tempfile.gettempdir()) / "braid-dashboard.png")
            page.screenshot(path=shot, full_page=True)
            browser.close()
    finally:
        stop.set()
