"""The GPU self-check: does this adapter compute what the engine means?

Runs the parity cases (``parity.run_case``: every op family forward and backward, BatchNorm's
running statistics, Dropout, the GPU weight init, every optimizer for a few steps) on a device
and compares each result with float64 references committed in ``selfcheck.json`` (made by
scripts/make_selfcheck.py with the numpy engine). Used by ``webgpu-trainer doctor``, before
``webgpu-trainer train`` on the GPU, and by the page's worker before its first training run.
Standard library only (it runs in Pyodide).

Each case gives up to three rows: ``forward`` (model output, losses, running statistics),
``backward`` (the flat gradient buffer) and ``step`` (losses, output and weights over the
optimizer steps), each the largest relative error ``max|got - ref| / max(max|ref|, 1e-6)`` of
its arrays against its tolerance (``TOLERANCES``). A case the engine cannot run at all is one
``run`` row with the error message (``errors.user_message``: an error written for the user
as it is, an unexpected exception with its type).

    result = await selfcheck.run(dev)
    print(selfcheck.table(result))      # op, max relative error, tolerance, ok / WRONG
    result["wrong"]                     # ["transpose_slice_pad_concat backward (Transpose, ...)"]
"""

import json
import math
import struct
import time
from pathlib import Path

from ..errors import user_message
from . import parity

FORMAT = "webgpu-trainer/selfcheck@1"
REFERENCE = Path(__file__).resolve().with_name("selfcheck.json")

# Ten times the test suite's tolerances (tests/conftest.py): float32 drift from another
# summation order or another exp/sqrt stays far below them (largest seen: 3e-6, the optimizer
# trajectories, on lavapipe, llvmpipe through OpenGL and SwiftShader), a wrong kernel far
# above (the OpenGL Slice gradient bug: 0.2 here, 0.71 in its op test).
TOLERANCES = {"forward": 1e-4, "backward": 1e-3, "step": 1e-4}
ABS_FLOOR = 1e-6


def load(path=None) -> dict:
    """The reference document (``selfcheck.json``): ``{"format", "cases": [case + "ops" +
    "expect"]}``. Raises ValueError for another format."""
    doc = json.loads(Path(path or REFERENCE).read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path or REFERENCE}: format {doc.get('format')!r}, expected {FORMAT}")
    return doc


def floats(text: str) -> list:
    """float32 values of a base64 string (parity's encoding)."""
    raw = parity.unb64(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def rel_err(got: list, want: list) -> float:
    """``max|got - want| / max(max|want|, ABS_FLOOR)``; inf when a value is NaN / inf or the
    lengths differ (``got`` may be longer: a GPU buffer rounded up; the tail is not compared)."""
    if len(got) < len(want):
        return math.inf
    if not want:
        return 0.0
    diff = 0.0
    for g, w in zip(got, want):
        d = abs(g - w)
        if not d <= diff:  # also NaN
            diff = d if d == d else math.inf
    scale = max(max(abs(w) for w in want), ABS_FLOOR)
    return diff / scale


def compare(case: dict, got: dict) -> list:
    """Rows ``{"case", "ops", "check", "error", "tolerance", "ok"}`` of one case's result."""
    want = case["expect"]
    errs: dict = {}

    def add(check, err):
        errs[check] = max(errs.get(check, 0.0), err)

    multi = len(want["losses"]) > 1
    first = "step" if multi else "forward"
    add(first, rel_err(floats(got["output"]), floats(want["output"])))
    if want["losses"]:
        add(first, rel_err(got["losses"], want["losses"]))
    # The parameter buffer after the run (None: the case's weights, unchanged).
    add(first, rel_err(floats(got["weights"]), floats(want["weights"] or case["weights"])))
    if want.get("grads"):
        add("backward", rel_err(floats(got["grads"]), floats(want["grads"])))
    return [{"case": case["name"], "ops": case["ops"], "check": check, "error": err,
             "tolerance": TOLERANCES[check], "ok": err <= TOLERANCES[check]}
            for check, err in errs.items()]


async def run(dev, doc: dict | None = None) -> dict:
    """Run every case of ``doc`` (default: ``load()``) on ``dev``.

    Returns ``{"ok": bool, "rows": [row], "wrong": ["<case> <check> (<ops>)"], "seconds",
    "adapter": dev.info}``. Engine errors are rows too (check "run"), never raised.
    """
    doc = doc or load()
    t0 = time.perf_counter()
    rows = []
    for case in doc["cases"]:
        try:
            got = await parity.run_case(dev, case)
        except Exception as exc:  # a shader that does not compile here, a device error, ...
            rows.append({"case": case["name"], "ops": case["ops"], "check": "run",
                         "error": math.inf, "tolerance": 0.0, "ok": False,
                         "message": user_message(exc)})
            continue
        rows.extend(compare(case, got))
    wrong = [f"{r['case']} {r['check']} ({', '.join(r['ops'])})" for r in rows if not r["ok"]]
    return {"ok": not wrong, "rows": rows, "wrong": wrong,
            "seconds": time.perf_counter() - t0, "adapter": dict(getattr(dev, "info", {}))}


def adapter_name(info: dict) -> str:
    """One line naming the adapter: device or description, and the backend."""
    name = info.get("device") or info.get("description") or info.get("vendor") or "GPU"
    extra = [info[k] for k in ("backend_type", "adapter_type") if info.get(k)]
    return f"{name} ({', '.join(extra)})" if extra else name


def table(result: dict) -> str:
    """The result as a text table: case, check, max relative error, tolerance, ok / WRONG."""
    lines = [f"{'op case':32s} {'check':8s} {'max rel err':>11s} {'tolerance':>9s}  result"]
    for r in result["rows"]:
        err = "failed" if r["check"] == "run" else f"{r['error']:.1e}"
        lines.append(f"{r['case']:32s} {r['check']:8s} {err:>11s} {r['tolerance']:9.0e}  "
                     + ("ok" if r["ok"] else "WRONG"))
        if r.get("message"):
            lines.append(f"    {r['message']}")
    lines.append(f"adapter: {adapter_name(result['adapter'])}; {len(result['rows'])} checks in "
                 f"{result['seconds']:.1f} s: " + ("all ok" if result["ok"] else
                                                  f"{len(result['wrong'])} WRONG"))
    return "\n".join(lines)
