#!/usr/bin/env python3
"""Benchmark (not a test): training throughput in headless Chromium with the live views open
against closed (issue 10: the views may cost at most 5%).

    flock /tmp/wgt-browser.lock .venv/bin/python benchmarks/live_views.py --steps 240

One page (the real server, Chromium with WebGPU) trains SeedNet (Adam, batch 64, seed 0, from
scratch) for --steps steps. The worker reports progress every 10 steps; at each report the page
switches to the next of three states, in turn: ``closed`` (the Dashboard tab: no view asks the
worker for anything), ``model`` (Inside the model: filters, feature maps and norms every few
seconds, web/views.js) and ``try`` (Try it with a drawn digit, classified again every few
seconds, web/tryit.js). A segment's ms/step is the wall time between its two reports over its
10 steps; the states alternate every segment, so a slow drift of the machine (other processes)
falls on all three alike. The first cycle is warm-up (compilation, the first probe's plan).
Prints each state's mean and median ms/step and its overhead against ``closed``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench import CHROMIUM, CHROMIUM_ARGS, STATE_JS, Server, adapter_name  # noqa: E402

STATES = {"closed": "dashboard", "model": "model", "try": "try"}
TARGET = 5.0  # percent


def _configure(page, steps: int, batch: int) -> None:
    page.evaluate("document.querySelector('#advanced').open = true")
    page.select_option("#model", "seednet")
    page.select_option("#optimizer", "adam")
    page.fill("#lr", "0.001")
    page.fill("#batch-size", str(batch))
    page.fill("#epochs", "1")
    page.fill("#seed", "0")
    page.check("#init-scratch")
    page.fill("#max-steps", str(steps))
    page.fill("#eval-images", str(batch))


def _draw(page) -> None:
    """A stroke on Try it's canvas (so that it has a digit to classify again)."""
    page.click("#tab-try")
    box = page.locator("#try-canvas").bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] * 0.2
    page.mouse.move(x, y)
    page.mouse.down()
    for k in range(1, 13):
        page.mouse.move(x + k, y + k * box["height"] * 0.05)
    page.mouse.up()


def _run(page, steps: int, timeout: float) -> list:
    """One run of ``steps`` steps switching state at every report: ``[(state, ms/step, steps,
    inspect answers)]`` per segment."""
    names = list(STATES)
    page.click("#tab-dashboard")
    page.click("#start")
    page.wait_for_function("window.appState.phase === 'training'", timeout=60_000)
    t_start, last, k, segs = time.monotonic(), None, 0, []
    views = page.evaluate("window.viewsState.requests")
    while True:
        st = page.evaluate(STATE_JS)
        now = time.monotonic()
        step = (st["progress"] or {}).get("step") or 0
        if st["n"] and (last is None or step > last[1]):
            if last is not None:
                seen = page.evaluate("window.viewsState.requests")
                segs.append((names[k % 3], 1000 * (now - last[0]) / (step - last[1]),
                             step - last[1], seen - views))
                views, k = seen, k + 1
            page.click(f"#tab-{STATES[names[k % 3]]}")
            last = (time.monotonic(), step)
        if st["phase"] == "error":
            raise RuntimeError(f"training failed: {st['error']}")
        if st["phase"] == "done":
            return segs, adapter_name(st["adapter"])
        if now - t_start > timeout:
            raise RuntimeError(f"run not done within {timeout:.0f} s")
        time.sleep(0.05)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=240, help="steps of the run (default 240)")
    ap.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds for the run (1500)")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with Server() as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(server.url)
            page.wait_for_function("window.appState && window.appState.workerReady && "
                                   "document.querySelector('#model').value", timeout=180_000)
            _configure(page, args.steps, args.batch)
            _draw(page)  # Try it gets a digit to classify again
            segs, adapter = _run(page, args.steps, args.timeout)
        finally:
            browser.close()
    for i, (name, ms, n, answers) in enumerate(segs):
        print(f"segment {i + 1:2d} {name:7s} {ms:8.1f} ms/step ({n} steps, {answers} inspect "
              f"requests){'  warm-up' if i < len(STATES) else ''}", flush=True)
    segs = segs[len(STATES):]
    mean = {n: statistics.mean(ms for s, ms, *_ in segs if s == n) for n in STATES}
    median = {n: statistics.median(ms for s, ms, *_ in segs if s == n) for n in STATES}
    print(f"\nSeedNet, Adam, batch {args.batch}, {args.steps} steps, {adapter}; "
          f"{len(segs) // len(STATES)} segments per state after warm-up")
    print(f"{'views':8s} {'mean ms/step':>12s} {'images/s':>9s} {'overhead':>9s} "
          f"{'median':>9s} {'overhead':>9s}")
    for n in STATES:
        over = 100 * (mean[n] / mean["closed"] - 1)
        over_m = 100 * (median[n] / median["closed"] - 1)
        print(f"{n:8s} {mean[n]:12.1f} {1000 * args.batch / mean[n]:9.1f} "
              f"{'' if n == 'closed' else f'{over:+8.1f}%':>9s} {median[n]:9.1f} "
              f"{'' if n == 'closed' else f'{over_m:+8.1f}%':>9s}")
    worst = max(100 * (mean[n] / mean["closed"] - 1) for n in STATES if n != "closed")
    print(f"\nworst overhead (means) {worst:+.1f}% (target <= {TARGET:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
