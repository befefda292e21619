#!/usr/bin/env python3
"""Load test of classroom mode on loopback only (not a test: prints a report).

Starts ``webgpu-trainer classroom`` (HTTPS, a temporary state folder) on 127.0.0.1, then
simulates a class: N students (default 60), each with its own connection pool like a browser,
downloads the page, the engine wheel, the Pyodide assets and every MNIST shard once, then
revalidates them all (If-None-Match -> 304) and checks one Range request; joins the session
and posts a metrics batch every 2 s for the duration (default 300 s), then its final result.
Meanwhile one teacher dashboard reads the live event stream, a few clients download a shard
very slowly, a few vanish mid-download and a few start a request body and never finish it.
Every loop is bounded in count and in time; the script stops by itself.

Reports p50 / p99 latency per kind of request, errors, and the server's RSS and CPU (psutil).

    .venv/bin/python scripts/classroom_load.py --students 60 --duration 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only, always
PYODIDE = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
           "pyodide-lock.json"]
PAGE = ["/", "/page/app.js", "/lib/worker.js", "/page/classroom.js", "/page/classroom.css",
        "/lib/style.css", "/vendor/uplot/uPlot.esm.js", "/vendor/uplot/uPlot.min.css"]


class Stats:
    def __init__(self):
        self.lat: dict[str, list] = {}
        self.errors: dict[str, int] = {}
        self.bytes = 0
        self.events = 0  # events the teacher's live stream received
        self.downloading = 0  # students still downloading
        self.samples: list = []

    def add(self, kind: str, seconds: float):
        self.lat.setdefault(kind, []).append(seconds)

    def error(self, kind: str, what: str):
        key = f"{kind}: {what}"[:120]
        self.errors[key] = self.errors.get(key, 0) + 1


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def timed(stats, kind, coro, ok=(200,)):
    t0 = time.perf_counter()
    try:
        r = await coro
    except (httpx.HTTPError, OSError) as exc:
        stats.error(kind, type(exc).__name__)
        return None
    stats.add(kind, time.perf_counter() - t0)
    if r.status_code not in ok:
        stats.error(kind, f"HTTP {r.status_code}")
    return r


async def download(client, stats, kind, url, etag_store):
    """GET url streaming the body away (not kept); remembers the ETag."""
    t0 = time.perf_counter()
    try:
        async with client.stream("GET", url) as r:
            async for chunk in r.aiter_bytes(1 << 20):
                stats.bytes += len(chunk)
            if r.status_code != 200:
                stats.error(kind, f"HTTP {r.status_code}")
            elif r.headers.get("etag"):
                etag_store[url] = r.headers["etag"]
    except (httpx.HTTPError, OSError) as exc:
        stats.error(kind, f"{type(exc).__name__}: {str(exc)[:70]}")
        return
    stats.add(kind, time.perf_counter() - t0)


async def student(i, base, sid, assets, stats, args, t_end):
    async with httpx.AsyncClient(base_url=base, verify=False, timeout=120,
                                 limits=httpx.Limits(max_connections=6)) as c:
        await asyncio.sleep(random.uniform(0, args.ramp))
        etags: dict = {}
        stats.downloading += 1
        for url in PAGE + ["/api/wheel"]:
            await download(c, stats, "page", url, etags)
        for url in assets["pyodide"] + [assets["wheel"]]:
            await download(c, stats, "pyodide+wheel", url, etags)
        for url in assets["shards"]:
            await download(c, stats, "shard", url, etags)
        stats.downloading -= 1
        for url, tag in etags.items():  # the second visit: all revalidated
            await timed(stats, "revalidate (304)", c.get(url, headers={"If-None-Match": tag}),
                        ok=(304,))
        await timed(stats, "range (206)", c.get(assets["shards"][0],
                                                 headers={"Range": "bytes=0-1023"}), ok=(206,))
        r = await timed(stats, "join", c.post(f"/api/classroom/join/{sid}",
                                              json={"name": f"student {i:02d}"}))
        if r is None or r.status_code != 200:
            return
        key = {"X-Student-Key": r.json()["key"]}
        cfg = {"model": "mlp-ts17", "max_steps": 0, "eval_images": 500}
        step, sent = 0, 0
        total = 100000
        for n in range(int(args.duration / 2) + 2):  # bounded: one post per 2 s
            if time.monotonic() >= t_end:
                break
            pts = [[step + k + 1, 2.3 * 0.999 ** (step + k), 0.1 + 0.8 * (step + k) / total]
                   for k in range(10)]
            step += 10
            batch = {"run": 1, "state": "training", "points": pts,
                     "progress": {"step": step, "total_steps": total, "epoch": 1,
                                  "epochs": 1, "images_per_s": 640.0}}
            if n == 0:
                batch.update(config=cfg, adapter=f"simulated GPU {i}")
            kind = ("metrics post (downloads over)" if stats.downloading == 0
                    else "metrics post (while others download)")
            await timed(stats, kind, c.post("/api/classroom/report", json=batch, headers=key))
            sent += 1
            await asyncio.sleep(2.0)
        await timed(stats, "metrics post", c.post("/api/classroom/report", headers=key, json={
            "run": 1, "result": {"test_acc": 0.9 + i / 1000, "test_loss": 0.3,
                                 "eval_images": 500, "steps": step}}))


async def slow_reader(base, url, stats, t_end):
    """Reads a shard at ~64 KB/s until the end: holds a connection, must block nobody."""
    async with httpx.AsyncClient(base_url=base, verify=False, timeout=60) as c:
        try:
            async with c.stream("GET", url) as r:
                async for _ in r.aiter_bytes(65536):
                    if time.monotonic() >= t_end:
                        break
                    await asyncio.sleep(1.0)
        except (httpx.HTTPError, OSError):
            pass


async def vanisher(base, url, stats):
    """Starts a shard download and drops the connection after 1 MB."""
    async with httpx.AsyncClient(base_url=base, verify=False, timeout=60) as c:
        try:
            async with c.stream("GET", url) as r:
                got = 0
                async for chunk in r.aiter_bytes(65536):
                    got += len(chunk)
                    if got > 1 << 20:
                        break
        except (httpx.HTTPError, OSError):
            pass


async def stalled_body(port, sid, stats):
    """Promises a 10 KB JSON body and sends 10 bytes: the server answers 408 by itself."""
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(HOST, port, ssl=ctx)
        writer.write((f"POST /api/classroom/join/{sid} HTTP/1.1\r\nHost: {HOST}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n"
                      '{"name": "').encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 90)
        stats.add("stalled body -> server answer", time.perf_counter() - t0)
        if b" 408 " not in line:
            stats.error("stalled body", line.decode(errors="replace").strip())
        writer.close()
    except (OSError, asyncio.TimeoutError) as exc:
        stats.error("stalled body", type(exc).__name__)


async def teacher_stream(base, sid, token, stats, t_end):
    async with httpx.AsyncClient(base_url=base, verify=False, timeout=None) as c:
        try:
            async with c.stream("GET", f"/api/classroom/sessions/{sid}/events",
                                headers={"Authorization": f"Bearer {token}"}) as r:
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        stats.events += 1
                    if time.monotonic() >= t_end:
                        break
        except (httpx.HTTPError, OSError) as exc:
            stats.error("teacher stream", type(exc).__name__)


async def sample(proc, stats, t_end):
    p = psutil.Process(proc.pid)
    kids = lambda: [p, *p.children(recursive=True)]  # noqa: E731
    last = sum(sum(k.cpu_times()[:2]) for k in kids())
    t_last = time.monotonic()
    while time.monotonic() < t_end:
        await asyncio.sleep(1.0)
        try:
            procs = kids()
            cpu = sum(sum(k.cpu_times()[:2]) for k in procs)
            rss = sum(k.memory_info().rss for k in procs)
        except psutil.Error:
            continue
        now = time.monotonic()
        stats.samples.append((now, rss, (cpu - last) / (now - t_last)))
        last, t_last = cpu, now


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


async def main(args) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="classroom-load-"))
    models = tmp / "models"
    models.mkdir()
    (models / "mlp-ts17.onnx").write_bytes(
        (REPO / "tests/fixtures/models/mlp-ts17.onnx").read_bytes())
    port, token = free_port(), "load-test-teacher-token-0123456789"
    cmd = [sys.executable, "-m", "webgpu_trainer.cli.main", "classroom", "--host", HOST,
           "--port", str(port), "--state-dir", str(tmp / "state"), "--models-dir",
           str(models), "--teacher-token", token]
    if args.workers > 1:
        cmd += ["--workers", str(args.workers)]
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    base = f"https://{HOST}:{port}"
    stats = Stats()
    try:
        async with httpx.AsyncClient(base_url=base, verify=False, timeout=10) as c:
            for _ in range(240):
                try:
                    if (await c.get("/api/classroom/info",
                                    headers={"Authorization": f"Bearer {token}"})).is_success:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
            else:
                print((tmp / "server.log").read_text()[-3000:])
                return 1
            r = await c.post("/api/classroom/sessions", headers={
                "Authorization": f"Bearer {token}"}, json={
                "name": "load", "config": {"model": "mlp-ts17"}, "pinned": ["model"]})
            sid = r.json()["id"]
            manifest = (await c.get("/data/mnist/manifest.json")).json()
            meta = (await c.get("/api/wheel")).json()
            wheel, pyodide = meta["url"], meta.get("pyodide", "/vendor/pyodide/")
        assets = {"pyodide": [f"{pyodide}{f}" for f in PYODIDE], "wheel": wheel,
                  "shards": [f"/data/mnist/{e['file']}" for s in manifest["splits"].values()
                             for e in s.values() if isinstance(e, dict) and "file" in e]}
        t0 = time.monotonic()
        t_end = t0 + args.ramp + args.download_allowance + args.duration
        print(f"{args.students} students, {args.duration:.0f} s of metrics every 2 s, "
              f"server pid {proc.pid} on {base} (state {tmp})", flush=True)
        tasks = [student(i, base, sid, assets, stats, args, t_end)
                 for i in range(args.students)]
        tasks += [slow_reader(base, assets["shards"][0], stats, t_end)
                  for _ in range(args.slow)]
        tasks += [vanisher(base, assets["shards"][0], stats) for _ in range(args.vanish)]
        tasks += [stalled_body(port, sid, stats) for _ in range(args.stalled)]
        tasks += [teacher_stream(base, sid, token, stats, t_end), sample(proc, stats, t_end)]
        await asyncio.wait_for(asyncio.gather(*tasks), args.ramp + args.download_allowance
                               + args.duration + 120)
        wall = time.monotonic() - t0
        async with httpx.AsyncClient(base_url=base, verify=False, timeout=30) as c:
            roster = (await c.get(f"/api/classroom/sessions/{sid}/roster",
                                  headers={"Authorization": f"Bearer {token}"})).json()
        report(args, stats, wall, roster)
        return 0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def report(args, stats, wall, roster):
    print(f"\nwall {wall:.0f} s, {stats.bytes / 1e9:.2f} GB downloaded, "
          f"{len(roster)} students in the roster, "
          f"{sum(r['points'] or 0 for r in roster)} points stored, "
          f"{sum(r['state'] == 'finished' for r in roster)} finished, "
          f"{stats.events} live events to the teacher")
    print(f"{'request':32s} {'n':>6s} {'p50 ms':>9s} {'p99 ms':>9s} {'max ms':>9s}")
    for kind, v in stats.lat.items():
        print(f"{kind:32s} {len(v):6d} {pct(v, .5) * 1e3:9.1f} {pct(v, .99) * 1e3:9.1f} "
              f"{max(v) * 1e3:9.1f}")
    print(f"errors: {sum(stats.errors.values())}" +
          "".join(f"\n  {k}: {n}" for k, n in sorted(stats.errors.items())))
    if stats.samples:
        rss = [s[1] for s in stats.samples]
        cpu = [s[2] for s in stats.samples]
        print(f"server RSS: start {rss[0] / 2**20:.0f} MiB, max {max(rss) / 2**20:.0f} MiB, "
              f"end {rss[-1] / 2**20:.0f} MiB")
        print(f"server CPU: mean {statistics.mean(cpu) * 100:.0f}% of one core, "
              f"max {max(cpu) * 100:.0f}% (1 s samples; this machine has {os.cpu_count()} "
              "cores shared with the load generator)")
    print(json.dumps({"students": args.students, "duration_s": args.duration,
                      "errors": sum(stats.errors.values())}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--students", type=int, default=60)
    ap.add_argument("--duration", type=float, default=300.0,
                    help="seconds of metrics posting per student (default 300)")
    ap.add_argument("--ramp", type=float, default=10.0, help="students arrive over this")
    ap.add_argument("--download-allowance", type=float, default=120.0,
                    help="extra seconds for the downloads before the metrics phase ends")
    ap.add_argument("--slow", type=int, default=3, help="slow shard readers")
    ap.add_argument("--vanish", type=int, default=3, help="clients that vanish mid-download")
    ap.add_argument("--stalled", type=int, default=3, help="clients that stall a body")
    ap.add_argument("--workers", type=int, default=1, help="server processes")
    sys.exit(asyncio.run(main(ap.parse_args())))
