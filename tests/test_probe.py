"""The live views' engine capability (issue 10): ``probe`` (eval-mode forward of given images,
chosen activations read back) and ``norms`` (per-parameter L2 norms of weights and gradients), on
the GPU engine (every wgpu backend) and the numpy engine, against the float64 numpy engine on the
weights the engine holds; a probe between training steps leaves the training bit for bit as it
was. SeedNet on real MNIST, a few steps of Adam at batch 64."""

import asyncio

import numpy as np
import pytest
from conftest import FWD_RTOL, assert_close, run
from e2e_fixtures import REPO

from webgpu_trainer import onnx_io
from webgpu_trainer.cli import commands as native
from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.cpu.engine import Engine, params_from_blob
from webgpu_trainer.cpu.softmax import log_softmax
from webgpu_trainer.engine.train import probe
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.data import MNIST
from webgpu_trainer.engine.train.loop import Trainer

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

CONFIG = {"optimizer": "adam", "lr": 1e-3, "batch_size": 64, "epochs": 1, "seed": 0,
          "init": "scratch", "max_steps": 3, "eval_images": 64, "report_every": 1,
          "val_images": 0}
N_PROBE = 3  # test images probed (the probe's plan takes them one at a time)


@pytest.fixture(scope="module")
def seednet():
    return onnx_io.load_bundle(REPO / "models" / "seednet.onnx")


@pytest.fixture(scope="module")
def splits(mnist_cache):
    train, test, _ = native.load_splits(mnist_cache, train_images=256, eval_images=64)
    return train, test


async def _trained(engine, seednet, splits, between=None):
    """A Trainer over ``engine`` after CONFIG's steps; ``between(engine)`` (async) runs after
    each step's report (between two training steps)."""
    graph, weights = seednet
    tr = Trainer(engine, graph, weights, dict(CONFIG), *splits)
    await tr.setup()
    if between is not None:
        report = tr._report

        async def with_probe(epoch):
            await report(epoch)
            await between(engine)
        tr._report = with_probe
    await tr.run()
    return tr


def _reference(graph, blob, images):
    """The float64 numpy engine's eval-mode activations of uint8 ``images`` [n, 784] on the
    weights ``blob`` (plan layout), and the log-probabilities."""
    eng = Engine(graph, params_from_blob(graph, blob), np.float64)
    x = np.asarray(MNIST.table(), np.float32)[images].astype(np.float64).reshape(-1, 1, 28, 28)
    vals = eng.forward(x, train=False)[0]
    return vals, log_softmax(vals[eng.output], axis=1)


async def _check_probe(engine, tr, test):
    graph = tr.graph
    images = np.frombuffer(test.images, np.uint8).reshape(-1, 784)[:N_PROBE]
    maps = [name for _, name in probe.feature_maps(graph)]
    assert len(maps) == 3, maps  # SeedNet's three conv layers
    got = await engine.probe(images.tobytes(), maps + [graph.output, probe.LOGP])
    vals, logp = _reference(graph.desc, await engine.read_weights(), images)
    for name in maps + [graph.output]:
        arr = np.frombuffer(got[name], np.float32).reshape(vals[name].shape)
        assert_close(arr, vals[name], FWD_RTOL, f"probe {name}")
    assert_close(np.frombuffer(got[probe.LOGP], np.float32).reshape(logp.shape), logp,
                 FWD_RTOL, "probe log-probabilities")
    return got


def test_gpu_probe_and_norms_match_float64(device, seednet, splits):
    async def go():
        eng = GpuEngine(device)
        tr = await _trained(eng, seednet, splits)
        got = await _check_probe(eng, tr, splits[1])
        # the same images as the eval program's (same gather, same table, same kernels)
        logp_eval, _ = await eng.eval_outputs("test", 0, eng.batch)
        want = np.frombuffer(logp_eval, np.float32)[:N_PROBE * 10]
        assert_close(np.frombuffer(got[probe.LOGP], np.float32), want, FWD_RTOL,
                     "probe vs eval program")
        norms = await eng.norms()
        w = np.frombuffer(await eng.read_weights(), np.float32)
        g = np.frombuffer(await device.read(eng.plan.G, 0, eng.wbytes), np.float32)
        return norms, w, g, tr.graph
    norms, w, g, graph = run(go())
    params = [t for t in graph.desc["tensors"] if t["role"] == "param"]
    assert sorted(r["name"] for r in norms) == sorted(t["name"] for t in params)
    for r in norms:
        t = graph.tensors[r["name"]]
        lo, hi = t["offset"] // 4, (t["offset"] + t["nbytes"]) // 4
        assert_close(r["weight"], np.linalg.norm(w[lo:hi].astype(np.float64)), FWD_RTOL,
                     f"weight norm {r['name']}")
        assert_close(r["grad"], np.linalg.norm(g[lo:hi].astype(np.float64)), FWD_RTOL,
                     f"gradient norm {r['name']}")
        assert np.isfinite(r["weight"]) and r["weight"] > 0, r


def test_probe_between_steps_leaves_training_unchanged(device, seednet, splits):
    """Probes and norms between every two steps: the losses and the weights after training are
    the same bits as without them (no running statistic, metric or gradient touched)."""
    probes = []

    def run_with(between):
        async def go():
            eng = GpuEngine(device)
            tr = await _trained(eng, seednet, splits, between)
            metrics, _ = await eng.metrics(1, tr.step)
            return metrics, await eng.read_weights()
        return run(go())

    async def poke(eng):
        images = np.frombuffer(splits[1].images, np.uint8)[:2 * 784].tobytes()
        names = [n for _, n in probe.feature_maps(eng.graph)] + [probe.LOGP]
        await eng.probe(images, names)
        await eng.norms()
        probes.append(eng)

    plain = run_with(None)
    poked = run_with(poke)
    assert len(probes) == CONFIG["max_steps"]
    assert plain[0] == poked[0], "metrics changed by probes"
    assert plain[1] == poked[1], "weights or running statistics changed by probes"


def test_probe_refuses_what_it_cannot_read(device, seednet, splits):
    async def go():
        eng = GpuEngine(device)
        graph, weights = seednet
        tr = Trainer(eng, graph, weights, dict(CONFIG), *splits)
        await tr.setup()
        conv = next(n for n in graph["nodes"] if n["op_type"] == "Conv")
        with pytest.raises(ValueError, match="ReLU"):  # the ReLU overwrites it in place
            await eng.probe(bytes(784), [conv["outputs"][0]])
        with pytest.raises(ValueError, match="no activation named 'nope'"):
            await eng.probe(bytes(784), ["nope"])
        with pytest.raises(ValueError,
                           match=r"whole number of 784-byte samples \(1x28x28 images\)"):
            await eng.probe(bytes(100), [probe.LOGP])
    run(go())


def test_cpu_engine_probe_and_norms(seednet, splits):
    async def go():
        eng = CpuEngine()
        tr = await _trained(eng, seednet, splits)
        await _check_probe(eng, tr, splits[1])
        norms = await eng.norms()
        for r in norms:
            t = tr.graph.tensors[r["name"]]
            lo, hi = t["offset"] // 4, (t["offset"] + t["nbytes"]) // 4
            assert_close(r["weight"], np.linalg.norm(eng.P[lo:hi].astype(np.float64)),
                         FWD_RTOL, r["name"])
            assert_close(r["grad"], np.linalg.norm(eng.G[lo:hi].astype(np.float64)),
                         FWD_RTOL, r["name"])
        # fc2 feeds norm2 (BatchNorm) directly: its bias's gradient is 0 up to rounding, so the
        # norms view does not call it vanishing; conv3's bias passes a ReLU first and learns
        assert probe.biases_before_norm(tr.graph) == {"fc2.bias"}
        by = {r["name"]: r for r in norms}
        assert by["fc2.bias"]["grad"] < 1e-4 * by["fc2.weight"]["grad"], by["fc2.bias"]
        assert by["conv3.bias"]["grad"] > 1e-2 * by["conv3.weight"]["grad"], by["conv3.bias"]
    asyncio.run(go())


def test_gpu_probe_reads_an_attention_map(device, splits, tmp_path, monkeypatch):
    """A model whose attention trains fused (rewrites/attention.py) still shows its attention
    map: the probe's plan keeps the Softmax, and the map matches the float64 numpy engine on
    the engine's weights (rows summing to 1)."""
    torch = pytest.importorskip("torch")
    import warnings

    from webgpu_trainer.engine.plan import Builder
    monkeypatch.setattr(Builder, "ATTENTION_MIN_ROWS", 0)  # fused whatever the default

    class Attend(torch.nn.Module):  # the image's rows as 28 tokens, 2 heads of 8
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(28, 16) for _ in range(3))
            self.fc = torch.nn.Linear(16, 10)

        def forward(self, x):
            n = x.shape[0]
            x = x.reshape(n, 28, 28)
            q, k, v = (f(x).reshape(n, 28, 2, 8).transpose(1, 2) for f in (self.q, self.k,
                                                                          self.v))
            att = (q @ k.transpose(-1, -2) * 8 ** -0.5).softmax(-1)
            return self.fc((att @ v).transpose(1, 2).reshape(n, 28, 16).mean(1))

    torch.manual_seed(0)
    path = tmp_path / "attend.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attend(), (torch.zeros(2, 1, 28, 28),), str(path), dynamo=False,
                          opset_version=17, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    bundle = onnx_io.load_bundle(path)

    async def go():
        eng = GpuEngine(device)
        tr = await _trained(eng, bundle, splits)
        assert {n["op_type"] for n in eng.plan.graph.nodes} >= {"FusedAttention"}
        _, name = probe.attention_softmax(tr.graph)
        images = np.frombuffer(splits[1].images, np.uint8).reshape(-1, 784)[:N_PROBE]
        got = await eng.probe(images.tobytes(), [name])
        vals, _ = _reference(tr.graph.desc, await eng.read_weights(), images)
        return np.frombuffer(got[name], np.float32).reshape(vals[name].shape), vals[name]
    got, want = run(go())
    assert_close(got, want, FWD_RTOL, "probe attention map")
    assert np.allclose(got.sum(-1), 1.0, atol=1e-5)
