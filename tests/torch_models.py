"""A PyTorch model exported by ``torch.onnx.export`` (either exporter), imported, and one
native GPU step against torch: the op tests' "a model that brings the op" check (CONTRIBUTING,
"Adding an op", step 6). Skips without torch (and, for the dynamo exporter, onnxscript)."""

import warnings

import numpy as np
import pytest

from conftest import _record, rel_err, run
from harness import read_f32, read_flat

RTOL = 1e-4  # eval output vs onnxruntime, loss and every parameter gradient vs torch


def export_and_step(device, model, path, dynamo, opset, tag, batch=4, seed=0, dynamic=False,
                    plan_ops=None):
    """Export ``model`` (input [N, 1, 28, 28], output [N, 10] logits) to ``path``, import it
    (strict: every op trainable), and check on ``device``: the eval output against
    onnxruntime's, one training step's cross-entropy loss and every parameter gradient against
    torch's in float64 (each within ``RTOL`` relative); ``dynamic``: exported with a dynamic
    batch axis; ``plan_ops``: a dict the op types of the plan's (rewritten) graph are counted
    into. Returns the imported graph."""
    torch = pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    import onnxruntime as ort

    from webgpu_trainer import onnx_io
    from webgpu_trainer.engine.tools import parity
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    labels = np.arange(batch) % 10
    model = model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = {} if not dynamic else \
            {"dynamic_shapes": ({0: torch.export.Dim("N")},)} if dynamo else \
            {"dynamic_axes": {"input": {0: "N"}, "output": {0: "N"}}}
        torch.onnx.export(model, (torch.from_numpy(x),), str(path), dynamo=dynamo,
                          opset_version=opset, input_names=["input"], output_names=["output"],
                          **axes)
    graph, blob = onnx_io.load_bundle(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": x})[0]
    plan = run(parity.load(device, graph, blob, batch, x.tobytes(),
                           labels.astype(np.uint32).tobytes(), loss="cross_entropy"))
    for n in plan.graph.nodes if plan_ops is not None else ():
        plan_ops[n["op_type"]] = plan_ops.get(n["op_type"], 0) + 1
    parity.run_step(device, plan, 1, seed, train=False)
    err = rel_err(run(read_f32(device, plan.acts[plan.graph.output])), want)
    _record(tag, "fwd", err)
    assert err <= RTOL, f"eval output vs onnxruntime: {err:.3g}"

    ref = model.double()
    loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x).double()),
                                             torch.from_numpy(labels))
    loss.backward()
    parity.run_step(device, plan, 1, seed)
    got = float(np.frombuffer(run(device.read(plan.metrics, 0, 4)), np.float32)[0])
    assert abs(got - loss.item()) <= RTOL * abs(loss.item())
    names, transposed = _onnx_names(graph, blob, model)
    assert sorted(names.values()) == sorted(plan.trainable)
    for tname, p in ref.named_parameters():
        name = names[tname]
        got = run(read_flat(device, plan, plan.G, name))
        got = got.T if name in transposed else got.reshape(p.shape)
        err = rel_err(got, p.grad.numpy())
        _record(tag, "grad", err)
        assert err <= RTOL, f"gradient of {name}: {err:.3g}"
    return graph


def _onnx_names(graph, blob, model) -> dict:
    """torch parameter name -> the bundle tensor holding it: the same name, else the one tensor
    with the same values (the TorchScript exporter writes nn.PReLU's weight [C] as an
    initializer ``onnx::PRelu_..`` of shape [C, 1, 1]), else the one 2-D tensor holding its
    transpose (the dynamo exporter's MatMul weights of a Linear on [N, T, F] inputs). Returns
    that map and the set of the transposed tensors."""
    from webgpu_trainer.cpu.engine import params_from_blob
    arrays = params_from_blob(graph, blob, np.float32)
    out, transposed = {}, set()
    for name, p in model.named_parameters():
        if name in arrays:
            out[name] = name
            continue
        v = p.detach().float().numpy().ravel()
        same = [k for k, a in arrays.items() if a.size == v.size and np.array_equal(a.ravel(), v)]
        if not same and p.dim() == 2:
            t = p.detach().float().numpy().T
            same = [k for k, a in arrays.items() if a.shape == t.shape and np.array_equal(a, t)]
            transposed.update(same)
        assert len(same) == 1, f"{name}: {same}"
        out[name] = same[0]
    return out, transposed


def check_engines_agree(device, graph, blob, cfg, data, steps, falls_to):
    """Train the bundle ``graph``/``blob`` with the run config ``cfg`` on the numpy engine and
    on ``device`` (``data()``: a fresh ``(train, test)`` pair of Splits for each) and assert:
    ``steps`` reported losses on both, each step's losses within 1e-4 relative, and the
    device's mean of the last 3 below ``falls_to`` times that of the first 3. Returns
    ``{"cpu": [...], "gpu": [...]}``."""
    from webgpu_trainer.cli import devices
    losses = {}
    for kind, dev in (("cpu", devices.CpuDevice()), ("gpu", device)):
        rows = []

        def emit(what_, rows=rows, **kw):
            if what_ == "progress":
                rows.extend(kw["losses"])
        tr = devices.make_trainer(dev, graph, blob, cfg, *data(), emit)
        run(tr.setup())
        run(tr.run())
        losses[kind] = [loss for _, loss, _ in rows]
    assert len(losses["gpu"]) == len(losses["cpu"]) == steps
    for step, (c, g) in enumerate(zip(losses["cpu"], losses["gpu"])):
        assert rel_err(g, c) <= 1e-4, (step, c, g)
    assert np.mean(losses["gpu"][-3:]) < falls_to * np.mean(losses["gpu"][:3]), losses["gpu"]
    return losses
