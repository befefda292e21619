"""The model zoo (tests/fixtures/zoo, scripts/make_zoo.py): ResNet-8, MobileNetV2, a small ViT,
an LSTM and a GRU row classifier, a narrow ResNet-18, a 1-D conv net over the 784-pixel
sequence and an embedding bag on int64 token ids, each from both exporters (TorchScript
opset 17, dynamo opset 18). For every file: the strict import; the device's eval forward
against onnxruntime; the first training step's loss, output and every parameter gradient
against torch autograd in float64
(Dropout at p=0 on both sides); three Adam steps natively against the numpy engine step by
step; the trained model's export through onnx.checker and onnxruntime (which agrees with the
device's eval forward of the re-imported file)."""

import copy
import pathlib
import sys

import numpy as np
import pytest

from conftest import FWD_RTOL, GRAD_RTOL, _record, assert_close, rel_err, rng_for, run
from harness import one_step

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_zoo  # noqa: E402

ZOO = ROOT / "tests" / "fixtures" / "zoo"
CASES = [(m, e) for m in make_zoo.ZOO for e in make_zoo.EXPORTERS]
IDS = [f"{m}-{e}" for m, e in CASES]
BATCH = 8


def _classes(name):
    return 4 if name in make_zoo.TOKENS else 10


def _batch(name, what):
    """(x, labels) of BATCH samples: float32 normal, or int64 token ids in [0, VOCAB)."""
    shape = make_zoo.MODELS[name][1]
    rng = rng_for("zoo", name, what)
    x = rng.integers(0, make_zoo.VOCAB, (BATCH, *shape)) if name in make_zoo.TOKENS else \
        rng.standard_normal((BATCH, *shape)).astype(np.float32)
    return x, rng.integers(0, _classes(name), BATCH)


def _ratio0(graph):
    """A copy of ``graph`` whose Dropout nodes have ratio 0 (torch's references use p=0)."""
    graph = copy.deepcopy(graph)
    graph["constants"]["__ratio0"] = {"dtype": "float32", "shape": [], "values": [0.0]}
    for n in graph["nodes"]:
        if n["op_type"] == "Dropout":
            n["inputs"] = [n["inputs"][0], "__ratio0"] + n["inputs"][2:]
            n["attrs"]["ratio"] = 0.0
    return graph


def _ort_eval(model_bytes, x):
    """onnxruntime's output for ``x`` of the inference form of a model."""
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _inference(path):
    """The file as an inference graph (BatchNormalization with running statistics, no
    Dropout), as the export writes it."""
    from webgpu_trainer.onnx_io.export import _to_inference
    model = onnx.load(str(path))
    _to_inference(model.graph, model.opset_import[0].version)
    return model.SerializeToString()


def _gate_order(t, gates):
    """torch's gate blocks (LSTM i, f, g, o; GRU r, z, n) in ONNX's order (i, o, f, c; z, r, h)."""
    c = t.chunk(gates, 0)
    return torch.cat([c[0], c[3], c[1], c[2]] if gates == 4 else [c[1], c[0], c[2]], 0)


def _forms(net):
    """(torch names, f) for every form an exporter writes a parameter in: as it is, transposed
    (the dynamo exporter's MatMul weights), an RNN's W / R with ONNX's gate order and a
    direction axis, its two biases as one B; ``f`` maps a torch tensor dict to that form."""
    out = []
    for name, p in net.named_parameters():
        out.append(((name,), lambda t, n=name: t[n]))
        if p.dim() == 2:
            out.append(((name,), lambda t, n=name: t[n].T))
    rnn = getattr(net, "rnn", None)
    if rnn is not None:
        gates = 4 if isinstance(rnn, torch.nn.LSTM) else 3
        for key in ("weight_ih_l0", "weight_hh_l0"):
            out.append(((f"rnn.{key}",),
                        lambda t, k=key: _gate_order(t[f"rnn.{k}"], gates)[None]))
        out.append((("rnn.bias_ih_l0", "rnn.bias_hh_l0"), lambda t: torch.cat(
            [_gate_order(t["rnn.bias_ih_l0"], gates),
             _gate_order(t["rnn.bias_hh_l0"], gates)])[None]))
    return out


def _torch_grads(net, params, grads_of):
    """{bundle tensor: torch's gradient in its form}: each trainable tensor of the bundle
    (``params``: name -> float32 values) matched to the one torch form whose values it holds
    (the same name first); every torch parameter must be matched exactly once."""
    values = {k: v.detach() for k, v in net.named_parameters()}
    out, covered = {}, []
    for name, arr in params.items():
        hits = [(tnames, f) for tnames, f in _forms(net)
                if tuple(f(values).shape) == arr.shape
                and np.allclose(f(values).numpy(), arr, rtol=0, atol=1e-7)]
        hits.sort(key=lambda h: name not in h[0])
        assert hits, f"{name}: no torch parameter holds its values"
        out[name] = hits[0][1](grads_of).numpy()
        covered += hits[0][0]
    assert sorted(covered) == sorted(values), "every torch parameter once"
    return out


@pytest.mark.parametrize("name,exporter", CASES, ids=IDS)
def test_forward_and_gradients(device, name, exporter):
    """Import (strict); the eval forward on the device vs onnxruntime (FWD_RTOL); the training
    step's loss and every parameter gradient vs torch in float64 (GRAD_RTOL each; one that is
    zero in exact arithmetic: at most GRAD_RTOL of the largest gradient)."""
    check_forward_and_gradients(device, name, exporter, ZOO / f"{name}-{exporter}.onnx")


def check_forward_and_gradients(device, name, exporter, path, grad_rtol=GRAD_RTOL):
    """test_forward_and_gradients for zoo model ``name`` in the file ``path`` (with the
    training step's output vs torch's, FWD_RTOL; each gradient within ``grad_rtol``); returns
    the relative errors (eval forward vs onnxruntime, training forward vs torch, the worst
    gradient vs torch)."""
    from webgpu_trainer.cpu.engine import params_from_blob
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(path)
    x, labels = _batch(name, "step")
    res = run(one_step(device, graph, blob, x, labels, train=False))
    want = _ort_eval(_inference(path), x)
    err = assert_close(res["acts"][graph["outputs"][0]["name"]], want, FWD_RTOL,
                       f"{name}-{exporter}: eval output vs onnxruntime")
    _record(f"zoo {name}-{exporter}", "fwd", err)

    res = run(one_step(device, _ratio0(graph), blob, x, labels))
    net, _ = make_zoo.build(name)
    net = net.double().train()
    for m in net.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    net.zero_grad()
    xt = torch.tensor(x) if name in make_zoo.TOKENS else torch.tensor(x, dtype=torch.float64)
    out = net(xt)
    loss = torch.nn.functional.cross_entropy(out, torch.tensor(labels))
    loss.backward()
    assert_close(res["loss"], loss.item(), FWD_RTOL, f"{name}-{exporter}: loss")
    fwd = assert_close(res["acts"][graph["outputs"][0]["name"]], out.detach().numpy(),
                       FWD_RTOL, f"{name}-{exporter}: training forward vs torch")
    params = {k: v.astype(np.float32) for k, v in params_from_blob(graph, blob).items()
              if k in res["grads"]}
    assert len(params) == len(res["grads"])
    grads = _torch_grads(net.float(), params, {k: p.grad.double() for k, p in
                                               net.named_parameters()})
    worst, scale = 0.0, max(np.abs(g).max() for g in grads.values())
    for pname, g in grads.items():
        if np.abs(g).max() <= 1e-12 * scale:  # zero in exact arithmetic (a BatchNorm's bias
            #  followed by a 1x1 Conv and another BatchNorm): the device's is rounding noise
            assert np.abs(res["grads"][pname]).max() <= grad_rtol * scale, pname
            continue
        worst = max(worst, assert_close(res["grads"][pname], g, grad_rtol,
                                        f"{name}-{exporter}: gradient of {pname}"))
    _record(f"zoo {name}-{exporter}", "grad", worst)
    return err, fwd, worst


def test_vit_class_token_is_an_expand_to_the_batch():
    """Both exporters' ``cls.expand(N, -1, -1)`` imports as one Expand of the parameter
    ``cls`` to the constant shape [1, 1, 1] with ``batch_axes`` [0]."""
    from webgpu_trainer.onnx_io import load_bundle
    for exporter in make_zoo.EXPORTERS:
        graph, _ = load_bundle(ZOO / f"vit-{exporter}.onnx")
        (node,) = [n for n in graph["nodes"] if n["op_type"] == "Expand"]
        assert node["inputs"][0] == "cls" and node["attrs"]["batch_axes"] == [0]
        assert graph["constants"][node["inputs"][1]]["values"] == [1, 1, 1]


def test_dynamo_parameters_have_readable_names():
    """No parameter of the zoo's dynamo files keeps the exporter's ``val_<n>`` name (the
    LSTM's and GRU's W and B, folded from torch's weights, were ``val_43`` ... in the norms
    table): they are named by the module and the ONNX input (``rnn.W``, ``rnn.B``), and the
    export writes the trained values back into the initializers they came from."""
    import re

    from webgpu_trainer.onnx_io import load_bundle
    from webgpu_trainer.onnx_io.export import export_onnx
    for name in make_zoo.ZOO:
        graph, blob = load_bundle(ZOO / f"{name}-dynamo.onnx")
        names = [t["name"] for t in graph["tensors"] if t["role"] == "param"]
        assert not [n for n in names if re.fullmatch(r"val_\d+", n)], (name, names)
        if name in ("lstm", "gru"):
            tensors = {t["name"]: t for t in graph["tensors"]}
            assert tensors["rnn.W"]["source"]["renamed_from"].startswith("val_")
            (rnn,) = [n for n in graph["nodes"] if n["op_type"] == name.upper()]
            assert rnn["inputs"][1] == "rnn.W" and rnn["inputs"][3] == "rnn.B"
            w = tensors["rnn.W"]
            trained = bytearray(blob)
            trained[w["offset"]:w["offset"] + w["nbytes"]] = \
                np.full(w["nbytes"] // 4, 0.25, "<f4").tobytes()
            model = onnx.load_from_string(export_onnx(ZOO / f"{name}-dynamo.onnx",
                                                      bytes(trained), {}))
            (init,) = [t for t in model.graph.initializer
                       if t.name == w["source"]["renamed_from"]]
            assert np.all(onnx.numpy_helper.to_array(init) == 0.25)


def test_expand_to_twice_the_batch_is_refused(tmp_path):
    """An Expand whose shape is [2N, 10] cannot be written as a constant: the import names the
    node and both shapes, and the file is left as it was."""
    from onnx import TensorProto, helper, numpy_helper

    from webgpu_trainer.onnx_io import OnnxImportError, load_bundle
    inits = [numpy_helper.from_array(np.zeros(1, np.int64), "zero"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([10], np.int64), "ten"),
             numpy_helper.from_array(np.ones((1, 10), np.float32), "p")]
    nodes = [helper.make_node("Shape", ["input"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"]),
             helper.make_node("Mul", ["n", "two"], ["n2"]),
             helper.make_node("Concat", ["n2", "ten"], ["shape"], axis=0),
             helper.make_node("Expand", ["p", "shape"], ["output"], name="/Expand")]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["M", 10])], inits)
    path = tmp_path / "expand2n.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    before = path.read_bytes()
    with pytest.raises(OnnxImportError) as exc:
        load_bundle(path)
    assert "node /Expand (Expand): its shape [6, 10] (batch 3) / [10, 10] (batch 5) follows " \
        "the batch in a way that cannot be written as a constant" in str(exc.value)
    assert path.read_bytes() == before


def _data(name, count, seed):
    """A Split of ``count`` uint8 samples of the model's shape whose class k has a bright
    row 2k + 3 (every channel) over noise (the 1-D conv net: MNIST-shaped, fed to its
    [N, 1, 784] input); for token models the ``markers`` tokens dataset (uint16 ids)."""
    from webgpu_trainer.engine.train.data import MNIST, DataSpec, Split
    if name in make_zoo.TOKENS:
        from webgpu_trainer.host.datasets import tokens
        a = tokens.markers(train=count, test=1, seed=seed)
        spec = DataSpec("markers", "markers", "tokens", [make_zoo.LENGTH], a.classes,
                        dtype="uint16", vocab_size=make_zoo.VOCAB)
        x, y = a.split("train")
        return Split(x.tobytes(), y.tobytes(), len(y), y.tobytes(), spec)
    shape = make_zoo.MODELS[name][1]
    shape = (1, 28, 28) if shape == (1, 784) else shape
    spec = MNIST if shape[0] == 1 else DataSpec(
        "zoo-rgb", "zoo RGB", "image", shape, [str(k) for k in range(10)],
        [0.5] * shape[0], [0.25] * shape[0])
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count).astype(np.uint8)
    images = rng.integers(0, 60, (count, *shape)).astype(np.uint8)
    images[np.arange(count), :, 2 * labels + 3, :] = 255
    return Split(images.tobytes(), labels.tobytes(), count, labels.tobytes(), spec)


@pytest.mark.parametrize("name,exporter", CASES, ids=IDS)
def test_trains_natively_like_numpy_and_exports(device, name, exporter, tmp_path):
    """Three SGD steps (momentum 0.9, batch 8) on the device and on the numpy engine: the same
    loss at every step (GRAD_RTOL: the steps follow the gradients). The device's trained model
    exported: onnx.checker (full), onnxruntime's output == the device's eval forward of the
    re-imported file (FWD_RTOL), whose weights are the trained ones.
    Not Adam (tests/test_optim.py checks it against torch): it steps every weight by about lr
    whatever its gradient, so a gradient that is rounding noise (~1e-8) steps by its sign, and
    the third loss is chaotic: moving the float64 engine's starting weights by one float32
    ulp moved it by up to 1.3e-4 (ResNet-8 and MobileNetV2, 3 draws each), past GRAD_RTOL;
    with SGD by at most 1.5e-8 (the device: ~1e-7)."""
    from webgpu_trainer.cli import devices
    from webgpu_trainer.onnx_io import export_onnx, load_bundle
    path = ZOO / f"{name}-{exporter}.onnx"
    graph, blob = load_bundle(path)
    cfg = {"batch_size": BATCH, "epochs": 1, "seed": 3, "init": "finetune",
           "eval_images": BATCH, "val_images": BATCH, "report_every": 1,
           "optimizer": "sgd", "momentum": 0.9, "lr": 0.003}
    losses, trained = {}, None
    for kind, dev in (("cpu", devices.CpuDevice()), ("gpu", device)):
        rows = []

        def emit(what_, rows=rows, **kw):
            if what_ == "progress":
                rows.extend(kw["losses"])
        tr = devices.make_trainer(dev, graph, blob, cfg, _data(name, 4 * BATCH, 1),
                                  _data(name, BATCH, 2), emit)
        run(tr.setup())
        run(tr.run())
        losses[kind] = [loss for _, loss, _ in rows]
        trained = run(tr.trained_weights())
    assert len(losses["gpu"]) == len(losses["cpu"]) == 3
    for step, (c, g) in enumerate(zip(losses["cpu"], losses["gpu"])):
        assert rel_err(g, c) <= GRAD_RTOL, (step, c, g)

    model = export_onnx(path, trained, {"zoo": name})
    onnx.checker.check_model(onnx.load_from_string(model), full_check=True)
    out = tmp_path / "trained.onnx"
    out.write_bytes(model)
    graph2, blob2 = load_bundle(out)
    assert len(blob2) == len(trained) and blob2 != blob
    x, labels = _batch(name, "export")
    res = run(one_step(device, graph2, blob2, x, labels, train=False))
    assert_close(res["acts"][graph2["outputs"][0]["name"]], _ort_eval(model, x), FWD_RTOL,
                 f"{name}-{exporter}: trained export vs onnxruntime")


BROWSER_RTOL = 1e-5  # browser (Pyodide, SwiftShader) vs native (wgpu-py, lavapipe)


BROWSER = ["resnet8", "mobilenetv2", "vit", "lstm", "gru", "resnet18n", "conv1d", "textbag"]


def open_parity_page(chromium, server):
    """``(context, page)``: web/dev/parity.html booted (its worker ready)."""
    ctx = chromium.new_context()
    try:
        page = ctx.new_page()
        page.goto(server + "/dev/parity.html")
        page.wait_for_function("window.parityState && (window.parityState.ready || "
                               "window.parityState.error)", timeout=180_000)
        assert not page.evaluate("window.parityState.error")
    except BaseException:
        ctx.close()
        raise
    return ctx, page


@pytest.fixture(scope="module")
def parity_page(chromium, server):
    """One booted parity page for the module's browser cases (as tests/test_parity.py's): each
    ``runParity`` call is a case of its own (``parity.run_case``: its own plan, weights and
    optimizer on the worker's device), so a test depends on no other's; only the boot (Pyodide,
    the engine wheel, the adapter: ~5 s a page) is shared."""
    ctx, page = open_parity_page(chromium, server)
    yield page
    ctx.close()


@pytest.mark.e2e
@pytest.mark.parametrize("name", BROWSER)
def test_trains_in_the_browser_like_natively(chromium, server, device, parity_page, name):
    """The TorchScript file trains 3 Adam steps at batch 4 in headless Chromium (Pyodide,
    web/dev/parity.html) and natively through the same ``parity.run_case``: losses, output
    and weights agree within BROWSER_RTOL, and the weights moved. The ViT: the class token's
    Expand to the batch, attention's Gathers; ``textbag``: int64 token ids (u32 on the GPU);
    ``mobilenetv2``: depthwise Convs (conv_depthwise.wgsl), ReLU6 as Clip."""
    browser_parity(chromium, server, device, name, ZOO / f"{name}-ts.onnx", page=parity_page)


@pytest.mark.e2e
def test_vit_fused_attention_in_the_browser_like_natively(chromium, server, device,
                                                         parity_page):
    """The ViT with its attentions as FusedAttention (attention.wgsl, forced at this batch of
    4): the same 3 Adam steps in Chromium (Tint, SwiftShader) and natively (naga, lavapipe)
    within BROWSER_RTOL. With WGSL's exp instead of det_exp the weights differed by 2.1e-3."""
    browser_parity(chromium, server, device, "vit", ZOO / "vit-ts.onnx", page=parity_page,
                   fuse_all_attention=True)


def browser_parity(chromium, server, device, name, path, page=None, **extra):
    """``test_trains_in_the_browser_like_natively`` for zoo model ``name`` from ``path``, on
    ``page`` (a booted parity page), else on a parity page of its own; ``extra``: more keys
    of the case (parity's module doc)."""
    import asyncio
    import base64
    import json
    from concurrent.futures import ThreadPoolExecutor

    from webgpu_trainer.engine.tools import parity
    from webgpu_trainer.onnx_io import load_bundle
    graph, blob = load_bundle(path)
    x, labels = _batch(name, "browser")
    x = x[:4].astype(np.uint32 if name in make_zoo.TOKENS else np.float32)
    case = {"name": f"{name}-ts", "graph": graph, "weights": parity.b64(blob),
            "x": parity.b64(x.tobytes()),
            "labels": parity.b64(np.asarray(labels[:4], np.uint32).tobytes()), "batch": 4,
            "steps": 3, "optimizer": {"name": "adam", "lr": 0.003}, "train": True, "seed": 1,
            **extra}
    with ThreadPoolExecutor(1) as pool:  # Playwright's event loop owns this thread
        (native,) = pool.submit(asyncio.run, parity.run_cases(device, [case])).result()
    ctx = None
    if page is None:
        ctx, page = open_parity_page(chromium, server)
    try:
        (got,) = json.loads(page.evaluate("c => window.runParity(c)", json.dumps([case])))
    finally:
        if ctx is not None:
            ctx.close()
    assert "error" not in native and "error" not in got, (native.get("error"), got.get("error"))
    assert len(got["losses"]) == 3 and np.isfinite(native["losses"]).all()
    assert rel_err(got["losses"], native["losses"]) <= BROWSER_RTOL
    for key in ("output", "weights"):
        err = rel_err(np.frombuffer(base64.b64decode(got[key]), "<f4"),
                      np.frombuffer(base64.b64decode(native[key]), "<f4"))
        assert err <= BROWSER_RTOL, f"{key}: browser vs native {err:.3g}"
    moved = np.frombuffer(base64.b64decode(native["weights"]), "<f4")[:len(blob) // 4]
    assert not np.array_equal(moved, np.frombuffer(blob, "<f4"))
