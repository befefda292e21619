#!/usr/bin/env python3
"""Benchmark (not a test): training throughput in headless Chromium with the live views open
against closed (issue 10: the views may cost at most 5%).

    flock /tmp/wgt-browser.lock .venv/bin/python benchmarks/live_views.py --steps 40 --rounds 2

One page (the real server, Chromium with WebGPU) trains SeedNet (Adam, batch 64, seed 0, from
scratch, --steps steps) once to warm up, then --rounds rounds of three runs of the same config:
``closed`` (the Dashboard tab: no view asks the worker for anything), ``model`` (Inside the
model: filters, feature maps and norms every few seconds, web/views.js) and ``try`` (Try it
with a drawn digit, classified again every few seconds, web/tryit.js). ms/step is the wall time
between the first and the last progress report of a run divided by the steps between them
(the worker reports every 10 steps; set-up, compilation and the final evaluation are outside).
Prints a table and each open state's overhead against ``closed`` (the mean over the rounds).
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


def _run(page, tab: str, steps: int, timeout: float) -> dict:
    """One training run with ``tab`` shown; ms/step between the first and the last report."""
    page.click(f"#tab-{tab}")
    before = page.evaluate("[window.viewsState.requests, window.tryState.step]")
    page.click("#start")
    # Start checks the settings with the server first; then the page resets its steps
    page.wait_for_function("window.appState.phase !== 'done'", timeout=60_000)
    t_start, seen = time.monotonic(), []
    while True:
        st = page.evaluate(STATE_JS)
        now = time.monotonic()
        prog = st["progress"] or {}
        if st["n"] and (not seen or prog["step"] > seen[-1][1]):
            seen.append((now, prog["step"]))
        if st["phase"] == "error":
            raise RuntimeError(f"training failed: {st['error']}")
        if st["phase"] == "done":
            break
        if now - t_start > timeout:
            raise RuntimeError(f"run with tab {tab} not done within {timeout:.0f} s")
        time.sleep(0.1)
    if len(seen) < 2:
        raise RuntimeError(f"fewer than two progress reports ({seen}): use more --steps")
    (t0, s0), (t1, s1) = seen[0], seen[-1]
    inspects = page.evaluate("window.viewsState.requests") - before[0]
    return {"tab": tab, "steps": s1 - s0, "ms_per_step": 1000 * (t1 - t0) / (s1 - s0),
            "inspects": inspects, "adapter": adapter_name(st["adapter"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps per run (default 40)")
    ap.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of closed/model/try (2)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run (900)")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    rows = []
    with Server() as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(server.url)
            page.wait_for_function("window.appState && window.appState.workerReady && "
                                   "document.querySelector('#model').value", timeout=180_000)
            _configure(page, args.steps, args.batch)
            warm = _run(page, "dashboard", args.steps, args.timeout)
            print(f"warm-up: {warm['ms_per_step']:.0f} ms/step on {warm['adapter']}", flush=True)
            _draw(page)
            for r in range(args.rounds):
                for name, tab in STATES.items():
                    row = {"round": r + 1, "state": name, **_run(page, tab, args.steps,
                                                                 args.timeout)}
                    rows.append(row)
                    print(f"round {row['round']}  {name:7s} {row['ms_per_step']:8.1f} ms/step  "
                          f"({row['steps']} steps, {row['inspects']} inspect answers)",
                          flush=True)
        finally:
            browser.close()
    mean = {name: statistics.mean(r["ms_per_step"] for r in rows if r["state"] == name)
            for name in STATES}
    print(f"\nSeedNet, Adam, batch {args.batch}, {args.steps} steps per run, "
          f"{args.rounds} round(s), {rows[0]['adapter']}")
    print(f"{'views':10s} {'ms/step':>9s} {'images/s':>9s} {'overhead':>9s}")
    for name in STATES:
        over = 100 * (mean[name] / mean["closed"] - 1)
        print(f"{name:10s} {mean[name]:9.1f} {1000 * args.batch / mean[name]:9.1f} "
              f"{'' if name == 'closed' else f'{over:+8.1f}%':>9s}")
    worst = max(100 * (mean[n] / mean["closed"] - 1) for n in STATES if n != "closed")
    print(f"\nworst overhead {worst:+.1f}% (target <= {TARGET:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
