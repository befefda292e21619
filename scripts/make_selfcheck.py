"""Write py/webgpu_trainer/engine/tools/selfcheck.json: the GPU self-check's cases with float64
references.

The cases are those of the op case lists marked ``selfcheck`` (``cases.selfcheck_cases`` of
tests/cases: every op family forward and backward, BatchNorm running statistics, Dropout, the
GPU weight init, every optimizer for a few steps). Each case gets the result
``parity.run_case`` must give, computed here with the numpy engine in float64
(``cpu.engine.Engine``) and the numpy optimizers run in float64:

    {"losses": [float per step], "output": b64 float32, "grads": b64 float32 | null (flat
     gradient buffer, single-step training cases), "weights": b64 float32 | null (flat
     parameter buffer after the last step; null: the case's weights, unchanged)}

The GPU's random numbers are reproduced exactly: Dropout masks and ``init_seed``'s weight init
come from Philox-4x32-10 keyed by the seed (cpu/philox.py draws the bits lib/philox.wgsl
draws; engine/init.py holds the init rules of both engines).

Run from the repository root (needs numpy and pytest, the test extras), then commit the file:

    .venv/bin/python scripts/make_selfcheck.py
"""

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import cases  # noqa: E402  (tests/ on sys.path)
from webgpu_trainer.engine.tools import selfcheck  # noqa: E402
from webgpu_trainer.cpu import optim as cpu_optim, philox  # noqa: E402
from webgpu_trainer.engine import init  # noqa: E402
from webgpu_trainer.engine.graph import Graph  # noqa: E402
from webgpu_trainer.cpu.engine import Engine, params_from_blob  # noqa: E402
from webgpu_trainer.engine.tools.parity import b64, unb64  # noqa: E402

OUT = ROOT / "py" / "webgpu_trainer" / "engine" / "tools" / "selfcheck.json"


def init_weights(graph, params, seed):
    """``Plan.init_weights``: the op families' rules (engine/init.py) drawn from Philox keyed by
    ``seed`` (cpu/philox.py: the bits shaders/init.wgsl draws)."""
    for rule in init.rules(Graph(graph)):
        p = params[rule.name]
        if rule.kind == "uniform":
            vals = philox.init_values(seed, rule.stream, p.size, np.float32(rule.scale))
            params[rule.name] = vals.reshape(p.shape).astype(np.float64)
        else:
            params[rule.name] = np.full(p.shape, rule.value)


def flat(graph, values, nbytes):
    """The float32 blob (bundle layout, ``nbytes`` long) of {tensor name: array}; absent
    tensors are zeros (like the GPU's gradient of a buffer)."""
    out = np.zeros(nbytes // 4, np.float64)
    for t in graph["tensors"]:
        if t["name"] in values:
            out[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4] = np.ravel(values[t["name"]])
    return out


def unflat(graph, vec):
    return {t["name"]: vec[t["offset"] // 4:(t["offset"] + t["nbytes"]) // 4]
            .reshape(t["shape"]).copy() for t in graph["tensors"]}


def f32_b64(a) -> str:
    return b64(np.asarray(a, "<f4").tobytes())


def reference(case) -> dict:
    """What ``parity.run_case(dev, case)`` returns, in float64."""
    graph = case["graph"]
    blob = unb64(case["weights"])
    nbytes = len(blob)
    params = params_from_blob(graph, blob)
    if case.get("init_seed") is not None:
        init_weights(graph, params, int(case["init_seed"]))
    x = np.frombuffer(unb64(case["x"]), "<f4").astype(np.float64)
    x = x.reshape([case["batch"]] + list(graph["inputs"][0]["shape"][1:]))
    labels = np.frombuffer(unb64(case["labels"]), "<u4").astype(np.int64)
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    train = case.get("train", True)
    if not train:
        eng = Engine(graph, params)
        vals, _, _ = eng.forward(x, train=False)
        return {"losses": [], "output": f32_b64(vals[eng.output]), "grads": None,
                "weights": weights_or_none(case, flat(graph, params, nbytes))}
    opt = None
    if case.get("optimizer"):
        spec = dict(case["optimizer"])
        opt = cpu_optim.make(spec.pop("name"), float(spec.pop("lr")), **spec)
        mask = flat(graph, {k: np.ones(v.shape) for k, v in params.items()
                            if roles[k] == "param"}, nbytes)
        opt.attach_flat(mask.size, mask)
    steps = int(case.get("steps", 1))
    losses, res = [], None
    for t in range(1, steps + 1):
        eng = Engine(graph, params)
        res = eng.step(x, labels, train=True, key=(int(case.get("seed", 0)), t),
                       loss=case.get("loss"))
        losses.append(float(res["loss"]))
        params.update(res["buffers"])  # training-mode BatchNorm's running statistics
        if opt is not None:
            P = flat(graph, params, nbytes)
            opt.step(P, flat(graph, res["grads"], nbytes), t, opt.lr)
            params = unflat(graph, P)
    out = res["acts"][graph["outputs"][0]["name"]]
    grads = f32_b64(flat(graph, res["grads"], nbytes)) if steps == 1 else None
    return {"losses": losses, "output": f32_b64(out), "grads": grads,
            "weights": weights_or_none(case, flat(graph, params, nbytes))}


def weights_or_none(case, vec):
    """The weights as base64 float32, or None when they are the case's own (unchanged)."""
    text = f32_b64(vec)
    return None if unb64(text) == unb64(case["weights"]) else text


def ops_of(case) -> list:
    """What a case checks, for the doctor's messages: op types (and FusedAttention where the
    case folds attention into it), loss, optimizer, init."""
    ops = list(dict.fromkeys(n["op_type"] for n in case["graph"]["nodes"]))
    if case.get("fuse_all_attention"):
        ops.append("FusedAttention")
    if case.get("loss"):
        ops.append(f"loss {case['loss']['loss']}")
    if case.get("optimizer"):
        ops.append(f"optimizer {case['optimizer']['name']}")
    if case.get("init_seed") is not None:
        ops.append("weight init")
    return ops


def main() -> int:
    # The numpy optimizers compute in the module's float type: float64 for the references.
    cpu_optim.f32 = np.float64
    out = [dict(case, ops=ops_of(case), expect=reference(case))
           for case in cases.selfcheck_cases()]
    doc = {"format": selfcheck.FORMAT, "made_by": "scripts/make_selfcheck.py",
           "reference": "numpy engine (webgpu_trainer.cpu) in float64", "cases": out}
    OUT.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(out)} cases, {OUT.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
