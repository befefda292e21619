"""LSTM and GRU on the native device against the float64 numpy engine (tests/cases/rnn.py), what
is refused, and the numpy engine against torch in float64 (skipped without torch). The
torch-exported classifiers over the 28 rows of an MNIST image: tests/test_rnn_models.py."""

import pathlib

import numpy as np
import pytest

from cases import ids, rnn
from conftest import node
from harness import builder_patch, check_case
from webgpu_trainer.cpu import rnn as np_rnn
from webgpu_trainer.cpu.engine import Context
from webgpu_trainer.engine.graph import GraphError
from webgpu_trainer.engine.ops import rnn as card

ZOO_LSTM = pathlib.Path(__file__).parent / "fixtures" / "zoo" / "lstm-ts.onnx"
pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend


@pytest.mark.parametrize("case", rnn.CASES, ids=ids(rnn.CASES))
def test_case(device, case):
    check_case(device, case)


# Loop budgets of 40 and 99 iterations a thread: 1 or 3 steps a dispatch of forward_seq /
# backward_seq (hidden 5: 33 an LSTM step, 28 a GRU step; T 4, so the last chunk is short) and
# weight gradients in parts of at most 40 / 99 (step, sample) pairs, the chunking lavapipe's
# 65,535-iteration cap asks of long sequences and large hidden sizes.
CHUNKED = [c for c in rnn.CASES if "bidirectional" in c.id or "_n160" in c.id]


@pytest.mark.parametrize("budget,per", [(40, 1), (99, 3)])  # T 4: chunks 1+1+1+1, 3+1
@pytest.mark.parametrize("case", CHUNKED, ids=ids(CHUNKED))
def test_case_in_chunks(device, case, budget, per, monkeypatch):
    monkeypatch.setattr(card, "LOOP_BUDGET", budget)
    assert card.steps_per_dispatch(5, 4) == per and card.steps_per_dispatch(5, 3) == per
    check_case(device, case)


# The GPU path's sequence kernels (*_seq_wide; hidden 8 and 64 with R in registers) a step a
# dispatch: each dispatch loads the row its first step reads from storage, later steps the row
# the units wrote into workgroup memory.
WIDE_CHUNKED = [c for c in rnn.CASES if "bidirectional" in c.id and "_n160" not in c.id]


@pytest.mark.parametrize("case", WIDE_CHUNKED, ids=ids(WIDE_CHUNKED))
def test_case_in_chunks_gpu_paths(device, case, monkeypatch):
    monkeypatch.setattr(card, "LOOP_BUDGET", 1)
    with builder_patch({"TILED": True}):
        check_case(device, case)


# Several samples a workgroup of the *_seq_wide kernels with R in registers (rnn._rows,
# rnn.wgsl NB: up to 2 or 4 of them, the floor lowered to 1 workgroup): against float64, then
# the same bits as one sample a workgroup (the same products in the same order).
ROWS = [c for c in rnn.CASES if any(f"_h{h}" in c.id for h in (8, 12, 64))]


def _same_bits_as_one_a_workgroup(device, case):
    """``case`` against float64 with several samples a workgroup (the floor lowered to 1
    workgroup), then the same bits from one sample a workgroup."""
    with builder_patch({"TILED": True, "RNN_ROWS_MIN_GROUPS": 1}):
        many, _ = check_case(device, case)
    with builder_patch({"TILED": True, "RNN_ROWS_MIN_GROUPS": None}):
        one, _ = check_case(device, case)
    for name in case.acts:
        assert np.array_equal(many["acts"][name], one["acts"][name]), name
    for name, g in one["grads"].items():
        assert np.array_equal(many["grads"][name], g), name


@pytest.mark.parametrize("most", [2, 4])
@pytest.mark.parametrize("case", ROWS, ids=ids(ROWS))
def test_case_rows_a_workgroup(device, case, most, monkeypatch):
    seen = []
    monkeypatch.setattr(card, "ROWS_MAX", most)
    rows = card._rows
    monkeypatch.setattr(card, "_rows", lambda *a: seen.append(rows(*a)) or seen[-1])
    _same_bits_as_one_a_workgroup(device, case)
    half = len(seen) // 2  # the first run's dispatches, then the second's
    want = min(most, 1024 // (4 * case_h(case)))
    assert half and [(c or {}).get("NB") for c, _ in seen] == [want] * half + [None] * half, seen


@pytest.mark.parametrize("case", ROWS, ids=ids(ROWS))
def test_case_rows_in_chunks(device, case, monkeypatch):
    """Several samples a workgroup and a step a dispatch (LOOP_BUDGET 1; found untested by
    review): the same bits as one sample a workgroup."""
    monkeypatch.setattr(card, "LOOP_BUDGET", 1)
    _same_bits_as_one_a_workgroup(device, case)


# The gates' gradients written over the saved gates (Builder.RNN_DG_IN_PLACE, rnn.wgsl backward
# flags 64) and a forward LSTM's x-projections made in the gates buffer (RNN_XP_IN_PLACE,
# forward flags 64) on both kernel families (CPU adapters' *_seq, GPU adapters' *_seq_wide with
# several samples a workgroup) and a step a dispatch: against float64, then the same bits as
# buffers of their own (every unit reads its values before it writes over them).
IN_PLACE = [c for c in rnn.CASES if "bidirectional" in c.id or "forward" in c.id or any(
    f"_h{h}" in c.id for h in (8, 64))]


@pytest.mark.parametrize("budget", [None, 1])
@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("case", IN_PLACE, ids=ids(IN_PLACE))
def test_dg_in_place_same_bits(device, case, tiled, budget, monkeypatch):
    if budget:
        monkeypatch.setattr(card, "LOOP_BUDGET", budget)
    runs = {}
    for on in (True, False):
        with builder_patch({"TILED": tiled, "RNN_DG_IN_PLACE": on, "RNN_XP_IN_PLACE": on,
                            "RNN_ROWS_MIN_GROUPS": 1}):
            runs[on], _ = check_case(device, case)
    for name in case.acts:
        assert np.array_equal(runs[True]["acts"][name], runs[False]["acts"][name]), name
    assert runs[True]["grads"].keys() == runs[False]["grads"].keys()
    for name, g in runs[False]["grads"].items():
        assert np.array_equal(runs[True]["grads"][name], g), name


# An LSTM's values a step ahead and its cell / dc carry in a register (Builder.RNN_AHEAD,
# rnn.wgsl flags 128; GPU adapters' *_seq_wide kernels, one to four samples a workgroup, every
# step in one dispatch or a step a dispatch, gates in place or not): the same bits as loading
# them in the step.
AHEAD = [c for c in rnn.CASES if "/LSTM" in c.id and not c.id.endswith("_h260")]  # H <= 256


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("budget", [None, 1])
@pytest.mark.parametrize("case", AHEAD, ids=ids(AHEAD))
def test_ahead_same_bits(device, case, budget, in_place, monkeypatch):
    if budget:
        monkeypatch.setattr(card, "LOOP_BUDGET", budget)
    seen = []
    kernel = card._kernel

    async def spy(bld, node, entry, groups, /, **kw):
        seen.append((entry, kw["params"]["flags"]))
        return await kernel(bld, node, entry, groups, **kw)

    monkeypatch.setattr(card, "_kernel", spy)
    runs = {}
    for on in (True, False):
        with builder_patch({"TILED": True, "RNN_AHEAD": on, "RNN_DG_IN_PLACE": in_place,
                            "RNN_XP_IN_PLACE": in_place, "RNN_ROWS_MIN_GROUPS": 1}):
            runs[on], _ = check_case(device, case)
    wide = [f for e, f in seen if e.endswith("_seq_wide")]
    assert wide and [f & 128 for f in wide] == [128] * (len(wide) // 2) + [0] * (len(wide) // 2)
    for name in case.acts:
        assert np.array_equal(runs[True]["acts"][name], runs[False]["acts"][name]), name
    assert runs[True]["grads"].keys() == runs[False]["grads"].keys()
    for name, g in runs[False]["grads"].items():
        assert np.array_equal(runs[True]["grads"][name], g), name


@pytest.mark.parametrize("flag", ["RNN_DG_IN_PLACE", "RNN_XP_IN_PLACE"])
def test_in_place_memory(flag):
    """The zoo-shaped LSTM's step (T 28, H 64, GPU kernels) at batch 1000 keeps no [T, N, 4H]
    buffer (28 x 1000 x 256 floats) of the x-projections or of the gates' gradients beside the
    gates when each is in place (the other flag on), and one when it is not."""
    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.train import memory
    desc, _ = onnx_io.load_bundle(ZOO_LSTM)
    big = 4 * 28 * 1000 * 256
    sizes = {}
    for on in (True, False):
        with builder_patch({"TILED": True, flag: on}):
            est = memory.estimate(desc, 1000)
        sizes[on] = est["bytes"]
        large = sorted(name.split(":")[0] for name, n in est["buffers"] if n >= big)
        assert large == (["/rnn/LSTM.gates"] if on else ["/rnn/LSTM.gates", "pool.0"]), large
    # the other gradients and scratch share the pool's largest buffer when it is there
    assert 0.7 * big <= sizes[False] - sizes[True] <= big, sizes


def case_h(case) -> int:
    return int(case.id.rsplit("_h", 1)[1])


def test_rows_rule():
    """NB: the largest power of 2 up to 4 that fits `row` and leaves the floor of workgroups."""
    class B:
        RNN_ROWS_MIN_GROUPS = 128
    b = B()

    def nb(d, n, h):
        return (card._rows(b, {"RV": 1}, d, n, h)[0] or {}).get("NB", 1)
    assert nb(1, 1000, 64) == 4 and nb(1, 512, 64) == 4 and nb(1, 508, 64) == 2
    assert nb(1, 256, 64) == 2 and nb(1, 254, 64) == 1 and nb(1, 64, 64) == 1
    assert nb(2, 256, 64) == 4 and nb(1, 1000, 128) == 2 and nb(1, 1000, 256) == 1
    assert card._rows(b, None, 1, 1000, 64)[0] is None  # no registers: one a workgroup
    assert card._rows(b, {"RV": 16}, 1, 1000, 64)[1][0] == 250
    b.RNN_ROWS_MIN_GROUPS = None
    assert nb(1, 1000, 64) == 1


SHAPES = [[4, 2, 3], [1, 20, 3], [1, 20, 5], None, None, None]


@pytest.mark.parametrize("op,attrs,inputs,message", [
    ("LSTM", {"activations": ["Sigmoid", "Relu", "Tanh"]}, 4,
     "node n (LSTM): activations ['Sigmoid', 'Relu', 'Tanh'] are not supported (only the "
     "default ['Sigmoid', 'Tanh', 'Tanh'])"),
    ("LSTM", {"clip": 3.0}, 4, "node n (LSTM): attribute clip is not supported"),
    ("LSTM", {"input_forget": 1}, 4, "node n (LSTM): input_forget 1 is not supported (only 0)"),
    ("LSTM", {"layout": 1}, 4, "node n (LSTM): layout 1 is not supported (only 0: [T, N, I])"),
    ("GRU", {}, 4, "node n (GRU): linear_before_reset 0 is not supported (only 1, torch's "
     "nn.GRU)"),
    ("GRU", {"linear_before_reset": 1}, 5,
     "node n (GRU): input sequence_lens is not supported (every sequence is T long)"),
    ("LSTM", {}, 8, "node n (LSTM): input P (peepholes) is not supported"),
])
def test_refused(op, attrs, inputs, message):
    """Each unsupported attribute / input is named, at import (normalize) and in infer."""
    names = ["x", "w", "r", "b", "", "", "", ""][:inputs]
    if inputs == 5:
        names[4] = "lens"
    if inputs == 8:
        names[7] = "p"
    n = node(op, names, ["y"], hidden_size=5, **attrs)
    n["name"] = "n"
    assert card.normalize(n, 17, lambda name: None) == [message]
    shapes = [[4, 2, 3], [1, 4 * 5 if op == "LSTM" else 15, 3],
              [1, 4 * 5 if op == "LSTM" else 15, 5], None, None, None, None, None][:inputs]
    with pytest.raises(GraphError) as err:
        card.infer(n, shapes, [None] * inputs)
    assert str(err.value) == message


def test_wrong_shape_refused():
    """R of the wrong hidden size is named with the shape expected."""
    n = node("GRU", ["x", "w", "r"], ["y"], hidden_size=5, linear_before_reset=1)
    n["name"] = "n"
    with pytest.raises(GraphError) as err:
        card.infer(n, [[4, 2, 3], [1, 15, 3], [1, 15, 4]], [None] * 3)
    assert str(err.value) == ("node n (GRU): R has shape [1, 15, 4], expected [1, 15, 5] "
                              "(X [4, 2, 3], hidden_size 5, 1 direction(s))")


def _reorder(t, op):
    """torch's gate order (LSTM i, f, g, o; GRU r, z, n) -> ONNX's (i, o, f, c; z, r, h)."""
    import torch
    c = t.chunk(4 if op == "LSTM" else 3, 0)
    return torch.cat([c[0], c[3], c[1], c[2]] if op == "LSTM" else [c[1], c[0], c[2]], 0)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_numpy_matches_torch(op, direction):
    """Y, Y_h, Y_c and every gradient (X, W, R, B, the initial states) of the numpy twin
    against torch's nn.LSTM / nn.GRU in float64."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    t, n, i, h = 5, 3, 4, 6
    d = 2 if direction == "bidirectional" else 1
    m = getattr(torch.nn, op)(i, h, bidirectional=d == 2).double()
    x = torch.randn(t, n, i, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(d, n, h, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(d, n, h, dtype=torch.float64, requires_grad=True)
    y, st = m(x, (h0, c0)) if op == "LSTM" else m(x, h0)
    hn, cn = st if op == "LSTM" else (st, None)
    gy, gh, gc = torch.randn_like(y), torch.randn_like(hn), torch.randn_like(hn)
    ((y * gy).sum() + (hn * gh).sum() + ((cn * gc).sum() if op == "LSTM" else 0)).backward()
    sfx = ["", "_reverse"][:d]
    par = lambda k, grad=False: np.stack([  # noqa: E731
        _reorder(getattr(m, k + s).grad if grad else getattr(m, k + s), op).detach().numpy()
        for s in sfx])
    w, r = par("weight_ih_l0"), par("weight_hh_l0")
    b = np.concatenate([par("bias_ih_l0"), par("bias_hh_l0")], 1)
    attrs = dict(direction=direction, hidden_size=h)
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    lstm = op == "LSTM"
    nd = node(op, ["x", "w", "r", "b", "", "h0"] + (["c0"] if lstm else []),
              ["y", "yh"] + (["yc"] if lstm else []), **attrs)
    ins = [x.detach().numpy(), w, r, b, None, h0.detach().numpy()] + \
        ([c0.detach().numpy()] if lstm else [])
    ctx = Context(True, np.float64)
    outs, cache = np_rnn.forward(nd, ins, ctx)
    ours_y = outs[0].transpose(0, 2, 1, 3).reshape(t, n, d * h)
    assert np.allclose(ours_y, y.detach().numpy(), rtol=1e-12, atol=1e-13)
    assert np.allclose(outs[1], hn.detach().numpy(), rtol=1e-12, atol=1e-13)
    if lstm:
        assert np.allclose(outs[2], cn.detach().numpy(), rtol=1e-12, atol=1e-13)
    douts = [gy.numpy().reshape(t, n, d, h).transpose(0, 2, 1, 3), gh.numpy()] + \
        ([gc.numpy()] if lstm else [])
    dins = np_rnn.backward(nd, ins, outs, cache, douts, ctx)
    want = [x.grad, par("weight_ih_l0", True), par("weight_hh_l0", True),
            np.concatenate([par("bias_ih_l0", True), par("bias_hh_l0", True)], 1), None,
            h0.grad] + ([c0.grad] if lstm else [])
    for k, (got, ref) in enumerate(zip(dins, want)):
        if ref is None:
            assert got is None
            continue
        ref = np.asarray(ref)
        assert np.allclose(got, ref, rtol=1e-10, atol=1e-12), f"input {k}"


@pytest.mark.parametrize("cid,final", [("rnn/LSTM_forward_Y", False),
                                       ("rnn/LSTM_forward_init_Y_c", True),
                                       ("rnn/GRU_forward_nobias_Y_h", True)])
def test_outputs_nothing_reads_are_not_written(device, cid, final):
    """Y_h and Y_c that nothing reads (torch's LSTM beside a model that uses Y) take no
    ``final_state`` dispatch; one the head reads does (test_case checks the numbers of both
    against the float64 numpy engine)."""
    from harness import run
    from webgpu_trainer.engine.tools import parity
    case = next(c for c in rnn.CASES if c.id == cid)
    plan = run(parity.load(device, case.graph, case.blob, len(case.x), loss="cross_entropy"))
    entries = [str(d[0][2]) for d in plan.fwd_train]
    assert any("final_state" in e for e in entries) == final, entries


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("cid", ["rnn/LSTM_forward_Y", "rnn/GRU_bidirectional_Y"])
def test_zero_state_written_by_the_sequence(device, cid, tiled):
    """With no initial state the first sequence dispatch writes the zero state rows itself
    (rnn.wgsl flags 256, no init_state dispatch): state buffers filled with NaN first give
    the same loss and output as fresh ones (forward_seq; with ``tiled`` forward_seq_wide)."""
    import struct
    from harness import run
    from webgpu_trainer.engine.tools import parity
    case = next(c for c in rnn.CASES if c.id == cid)
    labels = case.labels.astype(np.uint32).tobytes()
    got = []
    for poison in (False, True):
        with builder_patch({"TILED": tiled}):
            plan = run(parity.load(device, case.graph, case.blob, len(case.x), case.x.tobytes(),
                                   labels, loss="cross_entropy"))
        assert not any("init_state" in str(d[0][2]) for d in plan.fwd_train)
        saves = plan.builder._saves
        for key in [k for k in saves if k.endswith((".hs", ".cs"))] if poison else ():
            size = plan.builder.save_sizes[id(saves[key])]
            device.write(saves[key], struct.pack(f"<{size}f", *[float("nan")] * size))
        parity.run_step(device, plan, 1, 0)
        out = plan.acts[plan.graph.output]
        got.append((run(device.read(plan.metrics, 0, 8)),
                    run(device.read(out.buf, out.offset, 4 * int(np.prod(out.shape))))))
    assert got[0] == got[1] and not np.isnan(np.frombuffer(got[0][0], np.float32)).any()


def test_probe_plan_writes_outputs_the_model_ignores(device):
    """A probe may read any activation (``GpuEngine.probe``): its plan keeps every LSTM / GRU
    output (``GpuEngine.probe_keep``), so Y_h and Y_c of a model that reads only Y are
    written there, equal to the float64 numpy engine's (review: they read back as zeros)."""
    import dataclasses
    from conftest import FWD_RTOL, assert_close
    from harness import oracle, read_f32, run
    from webgpu_trainer.engine.graph import Graph
    from webgpu_trainer.engine.plan import Plan
    from webgpu_trainer.engine.tools import parity
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    case = next(c for c in rnn.CASES if c.id == "rnn/LSTM_forward_Y")
    keep = GpuEngine.probe_keep(Graph(case.graph))
    assert {"y", "yh", "yc"} <= set(keep)
    plan = run(Plan.build(device, Graph(case.graph), len(case.x), trainable=set(),
                          keep_acts=keep))
    run(parity.load(device, case.graph, case.blob, len(case.x), case.x.tobytes(),
                    case.labels.astype(np.uint32).tobytes(), plan=plan))
    parity.run_step(device, plan, 1, 0, train=False)
    want = oracle(dataclasses.replace(case, acts=("yh", "yc"), train=False))["acts"]
    for name in ("yh", "yc"):
        got = run(read_f32(device, plan.acts[name]))
        assert_close(got, np.asarray(want[name]).reshape(got.shape), FWD_RTOL, name)
