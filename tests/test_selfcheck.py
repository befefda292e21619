"""The GPU self-check (selfcheck.py, `webgpu-trainer doctor`, the gate before `train`): it
passes on the native adapters, and it FAILS naming the op when a reference value is corrupted
or a kernel computes a wrong result; `train` refuses (exit 2) unless --force."""

import copy
import json
import struct

import pytest

from conftest import backends, run
from webgpu_trainer.cli import main as cli
from webgpu_trainer.engine.errors import UserError
from webgpu_trainer.engine.tools import parity, selfcheck
from webgpu_trainer.engine.backends import shaders
from webgpu_trainer.engine.tools.parity import b64, unb64

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

REPORT = []
# Cases of tests/cases marked ``selfcheck`` (cases.selfcheck_cases)
SLICE, MSE, ADAM, SGD = ("layout/chain_slice_steps", "losses/one_gemm_mse", "optim/2_adam",
                         "optim/0_sgd")
# ... and those of shaders/attention.wgsl (FusedAttention, forced at their size)
ATTENTION, ATTENTION_STEPS = "matmul/chain_attention", "optim/7_sgd_attention"
# ... and of gemm.wgsl matmul_kpar_t on GPU adapters (weight gradients over 300 rows)
GEMM_ROWS = "gemm/weight_grads_over_300_rows"


def _subset(*names) -> dict:
    doc = copy.deepcopy(selfcheck.load())
    doc["cases"] = [c for c in doc["cases"] if c["name"] in names]
    assert [c["name"] for c in doc["cases"]] == list(names)
    return doc


def _scale_first(text: str, factor: float) -> str:
    """A base64 float32 array with its largest value scaled by ``factor``."""
    vals = list(struct.unpack(f"<{len(unb64(text)) // 4}f", unb64(text)))
    k = max(range(len(vals)), key=lambda i: abs(vals[i]))
    vals[k] *= factor
    return b64(struct.pack(f"<{len(vals)}f", *vals))


def test_passes_on_the_native_adapter(device):
    result = run(selfcheck.run(device))
    assert result["ok"], selfcheck.table(result)
    checks = {r["check"] for r in result["rows"]}
    assert checks == {"forward", "backward", "step"}
    cases = {r["case"] for r in result["rows"]}
    assert len(cases) == len(selfcheck.load()["cases"])
    worst = max(result["rows"], key=lambda r: r["error"] / r["tolerance"])
    REPORT.append(f"{device.info['backend_type']:7s} {len(result['rows'])} checks in "
                  f"{result['seconds']:.1f} s, worst {worst['case']} {worst['check']} "
                  f"{worst['error']:.1e} (tolerance {worst['tolerance']:.0e})")


def test_corrupted_reference_names_the_op(device):
    doc = _subset(SLICE, MSE, ADAM)
    doc["cases"][0]["expect"]["grads"] = _scale_first(doc["cases"][0]["expect"]["grads"], 1.01)
    doc["cases"][2]["expect"]["weights"] = _scale_first(doc["cases"][2]["expect"]["weights"],
                                                        0.9)
    result = run(selfcheck.run(device, doc))
    assert not result["ok"]
    assert [(r["case"], r["check"]) for r in result["rows"] if not r["ok"]] == [
        (SLICE, "backward"), (ADAM, "step")]
    assert result["wrong"][0].startswith(f"{SLICE} backward (") and "Slice" in \
        result["wrong"][0]
    assert "optimizer adam" in result["wrong"][1]
    assert "WRONG" in selfcheck.table(result)


def test_broken_kernel_names_the_op(device, monkeypatch):
    """layout.wgsl's gather writing 1.001 x the value: the Slice case is wrong (forward and
    backward), the cases that do not use it stay ok."""
    src = shaders.source("layout")
    assert src.count("out[l.dst] = v;") == 1
    monkeypatch.setitem(shaders._SOURCES, "layout",
                        src.replace("out[l.dst] = v;", "out[l.dst] = v * 1.001;"))
    # no pipelines cached yet (a second wgpu device per backend in one process has aborted
    # inside wgpu-native's poller on llvmpipe: reuse the session's device, empty cache)
    monkeypatch.setattr(device, "_pipelines", {})
    result = run(selfcheck.run(device, _subset(SLICE, MSE, SGD)))
    bad = [(r["case"], r["check"]) for r in result["rows"] if not r["ok"]]
    assert bad == [(SLICE, "forward"), (SLICE, "backward")], \
        selfcheck.table(result)
    assert all("Slice" in w for w in result["wrong"])


def test_attention_cases_run_the_fused_kernels(device, monkeypatch):
    """The self-check has attention cases (forward and backward; 3 SGD steps) and they pass;
    their plans run FusedAttention (attention.wgsl's forward, dQ and dK / dV kernels), not
    MatMul, Softmax, MatMul: the cases ask for it (``fuse_all_attention``), also where
    ``Builder.ATTENTION_MIN_ROWS`` would leave them unfused."""
    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "ATTENTION_MIN_ROWS", 65536)  # above the cases' rows
    doc = _subset(ATTENTION, ATTENTION_STEPS)
    assert all(c["fuse_all_attention"] is True and "FusedAttention" in c["ops"]
               for c in doc["cases"])
    plans, load = [], parity.load

    async def spy(*args, **kw):
        plans.append(await load(*args, **kw))
        return plans[-1]
    monkeypatch.setattr(parity, "load", spy)
    result = run(selfcheck.run(device, doc))
    assert result["ok"], selfcheck.table(result)
    assert [(r["case"], r["check"]) for r in result["rows"]] == [
        (ATTENTION, "forward"), (ATTENTION, "backward"), (ATTENTION_STEPS, "step")]
    assert Builder.ATTENTION_MIN_ROWS == 65536  # restored after each plan
    for plan in plans:
        ops = [n["op_type"] for n in plan.graph.nodes]
        assert ops.count("FusedAttention") == 1 and "Softmax" not in ops, ops
        kernels = [":".join(d[0][2].split(":")[:2]) for d in plan.fwd_train + plan.bwd]
        assert [k for k in kernels if k.startswith(("attention:", "softmax:"))] == [
            "attention:attention_forward", "attention:attention_dq",
            "attention:attention_dkv"], kernels


def test_broken_attention_kernel_names_fused_attention(device, monkeypatch):
    """attention.wgsl's dK 1.01 x too large (attention_dkv): the attention case's backward
    (1.8e-3 on lavapipe) and its SGD steps (5.8e-4) are WRONG, naming FusedAttention; its
    forward and the cases without attention stay ok."""
    src = shaders.source("attention")
    line = "out[kj + d] = p.alpha_s * ak[d];"
    assert src.count(line) == 1
    monkeypatch.setitem(shaders._SOURCES, "attention",
                        src.replace(line, "out[kj + d] = 1.01 * p.alpha_s * ak[d];"))
    monkeypatch.setattr(device, "_pipelines", {})  # as test_broken_kernel_names_the_op
    result = run(selfcheck.run(device, _subset(MSE, ATTENTION, ATTENTION_STEPS)))
    bad = [(r["case"], r["check"]) for r in result["rows"] if not r["ok"]]
    assert bad == [(ATTENTION, "backward"), (ATTENTION_STEPS, "step")], \
        selfcheck.table(result)
    assert all("FusedAttention" in w for w in result["wrong"])


def _kernels(plan) -> list:
    """The pipeline keys (shader:entry:constants) of a plan's training dispatches."""
    return [d[0][2] for d in plan.fwd_train + plan.bwd]


def test_gpu_adapters_run_attention_lanes_and_kpar_t(device, monkeypatch):
    """On GPU adapters (Builder.TILED, forced here: lavapipe is a CPU adapter) the self-check
    runs the kernels only they take, and passes: the attention case's three attention.wgsl
    dispatches with 8 threads a row (LANES=8: 38 tokens, one head of 64; the SGD case's 6
    tokens take 2), and the 300-row case's weight gradients on gemm.wgsl ``matmul_kpar_t``
    with the bias gradient summed beside (BSUM), the hidden Linear's with vec4 loads of both
    operands (KVEC=3)."""
    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "TILED", True)
    plans, load = {}, parity.load

    async def spy(dev, graph, *args, **kw):
        plans[graph["name"]] = await load(dev, graph, *args, **kw)
        return plans[graph["name"]]
    monkeypatch.setattr(parity, "load", spy)
    result = run(selfcheck.run(device, _subset(GEMM_ROWS, ATTENTION, ATTENTION_STEPS)))
    assert result["ok"], selfcheck.table(result)
    assert [(r["case"], r["check"]) for r in result["rows"]] == [
        (GEMM_ROWS, "forward"), (GEMM_ROWS, "backward"), (ATTENTION, "forward"),
        (ATTENTION, "backward"), (ATTENTION_STEPS, "step")]
    for name, lanes in ((ATTENTION, 8), (ATTENTION_STEPS, 2)):
        kernels = [k for k in _kernels(plans[name.replace("/", "_")])
                   if k.startswith("attention:")]
        assert [k.split(":")[1] for k in kernels] == [
            "attention_forward", "attention_dq", "attention_dkv"], kernels
        assert all(f"LANES={lanes}," in k for k in kernels), kernels
    kpar = [k for k in _kernels(plans[GEMM_ROWS.replace("/", "_")])
            if k.startswith("gemm:matmul_kpar_t:")]
    # the head's [3, 12] (dY's rows of 3 are no vec4s), then the hidden Linear's [12, 8]
    assert kpar == ["gemm:matmul_kpar_t:BSUM=1,KL=64,KVEC=2",
                    "gemm:matmul_kpar_t:BSUM=1,KL=64,KVEC=3"], kpar


# attention.wgsl lane_sums leaving lane 0's partials out; matmul_kpar_t's partials stored at
# the thread's own slot (matmul_kpar's, lid) instead of its block's lane slot; its bias
# gradient's likewise (kpar_finish, BSUM only)
_LANE_SUMS = ("attention", "for (var y = 0u; y < LANES; y++) { v += part[first + 4u * y + x]; }",
              "for (var y = 1u; y < LANES; y++) { v += part[first + 4u * y + x]; }")
_KPAR_T_SLOT = ("gemm", "kpar_finish(wid.x, lid, own * KL + lane, c0, c1, c2, c3, bs);",
                "kpar_finish(wid.x, lid, lid, c0, c1, c2, c3, bs);")
_BSUM_SLOT = ("gemm", "tile[slot] = bs;", "tile[lid] = bs;")


@pytest.mark.parametrize("mutation, wrong, named", [
    # lavapipe: forward 8.7e-2, backward 2.9e-1, steps (2 lanes) 7.6e-1
    (_LANE_SUMS, [(ATTENTION, "forward"), (ATTENTION, "backward"), (ATTENTION_STEPS, "step")],
     "FusedAttention"),
    # 7.8e-1; the attention case's q / k / v weight gradients (kpar_t over 76 rows) 2.2e-1
    (_KPAR_T_SLOT, [(GEMM_ROWS, "backward"), (ATTENTION, "backward")], "Gemm"),
    (_BSUM_SLOT, [(GEMM_ROWS, "backward")], "Gemm")],  # 6.4e-1
    ids=["lane_sums_without_lane_0", "kpar_t_partials_at_lid", "kpar_t_bias_sums_at_lid"])
def test_broken_gpu_adapter_kernels_are_wrong(device, monkeypatch, mutation, wrong, named):
    """The kernels only GPU adapters run (Builder.TILED forced), broken: attention.wgsl's
    lanes summed without lane 0, gemm.wgsl matmul_kpar_t's partial blocks or bias sums meeting
    at the wrong slots. The self-check's rows of the cases that run them go WRONG; the Gemm
    case of 4 rows (no kpar) and the forward of the weight gradients' case stay ok."""
    from webgpu_trainer.engine.plan import Builder
    shader, line, broken = mutation
    src = shaders.source(shader)
    assert src.count(line) == 1
    monkeypatch.setitem(shaders._SOURCES, shader, src.replace(line, broken))
    monkeypatch.setattr(Builder, "TILED", True)
    monkeypatch.setattr(device, "_pipelines", {})  # as test_broken_kernel_names_the_op
    result = run(selfcheck.run(device, _subset(GEMM_ROWS, MSE, ATTENTION, ATTENTION_STEPS)))
    bad = [(r["case"], r["check"]) for r in result["rows"] if not r["ok"]]
    assert bad == wrong, selfcheck.table(result)
    assert all(r["error"] > 10 * r["tolerance"] for r in result["rows"] if not r["ok"])
    assert all(named in w for w in result["wrong"])


def test_an_engine_error_is_a_wrong_row(device):
    doc = _subset(MSE)
    doc["cases"][0]["graph"]["nodes"][0]["op_type"] = "NoSuchOp"
    result = run(selfcheck.run(device, doc))
    assert not result["ok"] and result["rows"][0]["check"] == "run"
    # a GraphError is written for the user: its message without "GraphError: "
    assert result["rows"][0]["message"] == \
        "unsupported ops for training: /Gemm_logits (NoSuchOp)"


class _Bad(UserError, ValueError):
    """An error written for the user, as the engine's own (LimitError, GraphError)."""


@pytest.mark.parametrize("exc, shown", [
    (_Bad("batch 4 is too large for this GPU"), "batch 4 is too large for this GPU"),
    (KeyError("x"), "KeyError: 'x'"),             # a bug: its type helps the report
    (RuntimeError("device lost"), "RuntimeError: device lost")])
def test_run_rows_show_user_errors_without_their_type(monkeypatch, exc, shown):
    """The self-check's "run" rows (the doctor's table, the page's worker) and the parity
    cases' errors (web/dev/parity.html's rows) say a UserError as its message alone (before:
    "_Bad: batch 4 ..."); any other exception keeps its type. No device: the case raises."""
    async def raising(dev, case):
        raise exc
    monkeypatch.setattr(parity, "run_case", raising)
    doc = _subset(MSE)
    result = run(selfcheck.run(object(), doc))
    assert [(r["check"], r["ok"], r["message"]) for r in result["rows"]] == \
        [("run", False, shown)]
    assert f"    {shown}" in selfcheck.table(result).split("\n")
    assert run(parity.run_cases(object(), [{"name": "a"}, {"name": "b"}])) == \
        [{"name": "a", "error": shown}, {"name": "b", "error": shown}]


# ---------------------------------------------------------------- the commands (first backend)

@pytest.fixture()
def first_backend(request):
    return backends(request.config)[0]


def test_doctor_command(first_backend, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WEBGPU_TRAINER_CACHE_DIR", str(tmp_path))
    assert cli.main(["doctor", "--backend", first_backend]) == 0
    out = capsys.readouterr().out
    assert SLICE in out and "WRONG" not in out and "all ok" in out
    assert "adapter: " in out
    doc = _subset(SLICE, MSE)
    doc["cases"][0]["expect"]["output"] = _scale_first(doc["cases"][0]["expect"]["output"], 2)
    monkeypatch.setattr(selfcheck, "load", lambda path=None: doc)
    assert cli.main(["doctor", "--backend", first_backend, "--json"]) == 1
    cap = capsys.readouterr()
    assert json.loads(cap.out)["wrong"] == [
        f"{SLICE} forward (Conv, Slice, Reshape, Gemm, LogSoftmax)"]
    assert "error: the GPU self-check failed" in cap.err and f"{SLICE} forward" in cap.err


def test_train_refuses_a_failing_adapter_unless_forced(first_backend, capsys, monkeypatch,
                                                       tmp_path, mnist_cache):
    from test_cli import MODEL, TINY
    monkeypatch.setenv("WEBGPU_TRAINER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WGPU_BACKEND_TYPE", {"vulkan": "Vulkan", "opengl": "OpenGL"}.get(
        first_backend, first_backend))
    doc = _subset(SLICE)
    doc["cases"][0]["expect"]["grads"] = _scale_first(doc["cases"][0]["expect"]["grads"], 3)
    monkeypatch.setattr(selfcheck, "load", lambda path=None: doc)
    args = ["train", str(MODEL), *TINY, "--max-steps", "1", "--data-dir", str(mnist_cache)]
    assert cli.main(args + ["--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "the GPU self-check failed" in err and f"{SLICE} backward" in err
    assert "Slice" in err and "--force" in err
    assert not (tmp_path / "refused" / "model.onnx").exists()
    assert cli.main(args + ["--out", str(tmp_path / "forced"), "--force"]) == 0
    assert "warning: the GPU self-check failed" in capsys.readouterr().err
    recorded = json.loads((tmp_path / "forced" / "config.json").read_text())["selfcheck"]
    assert recorded["ok"] is False and recorded["wrong"][0].startswith(f"{SLICE} backward")
    monkeypatch.undo()  # the real references: passes, then comes from the cache
    monkeypatch.setenv("WEBGPU_TRAINER_CACHE_DIR", str(tmp_path / "cache"))
    for k in (1, 2):
        assert cli.main(args + ["--out", str(tmp_path / f"ok{k}")]) == 0
        rec = json.loads((tmp_path / f"ok{k}" / "config.json").read_text())["selfcheck"]
        assert rec["ok"] and rec["cached"] == (k == 2)



def test_the_committed_references_are_current(monkeypatch):
    """selfcheck.json holds exactly the cases of tests/cases marked ``selfcheck``, and
    references that scripts/make_selfcheck.py computes today (regenerate it after changing
    either)."""
    import importlib.util
    from pathlib import Path

    import numpy as np
    from cases import selfcheck_cases
    from conftest import rel_err
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_selfcheck.py"
    spec = importlib.util.spec_from_file_location("make_selfcheck", script)
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    monkeypatch.setattr(make.cpu_optim, "f32", np.float64)  # as make_selfcheck.main does
    stored = selfcheck.load()["cases"]
    fresh = selfcheck_cases()
    assert [c["name"] for c in stored] == [c["name"] for c in fresh]
    for want, case in zip(stored, fresh):
        inputs = {k: v for k, v in want.items() if k not in ("ops", "expect")}
        assert inputs == json.loads(json.dumps(case)), \
            f"{case['name']} changed: run scripts/make_selfcheck.py"
        assert want["ops"] == make.ops_of(case)
        ref = make.reference(case)
        for key in ("output", "grads", "weights"):
            a, b = ref[key], want["expect"][key]
            assert (a is None) == (b is None), f"{case['name']} {key}"
            if a is not None:
                assert rel_err(selfcheck.floats(a), selfcheck.floats(b)) <= 1e-6
        assert rel_err(ref["losses"], want["expect"]["losses"]) <= 1e-6
