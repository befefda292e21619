"""Datasets beyond MNIST on the engine side (engine/train/data.py, shaders/data.wgsl,
cpu/cpu_engine.py):

- ``DataSpec.from_manifest`` on the format ``webgpu-trainer/dataset@1``, the old
  ``webgpu-trainer/mnist@1`` and hostile manifests (the field named);
- ``check_fits`` naming the model's and the dataset's shapes;
- the GPU gather of a 3x5x7 uint8 dataset (105 values per sample: not a multiple of 4) and of a
  float32 table dataset against numpy in float64: every value is the float32 rounding of the
  float64 reference, exactly; the labels too; the CPU engine's inputs the same.
"""

import numpy as np
import pytest

from conftest import make_graph, node, run
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.train.data import MNIST, DataSpec, Split, check_fits

pytestmark = pytest.mark.every_backend

RGB = {"format": "webgpu-trainer/dataset@1", "name": "tiny-rgb", "title": "Tiny RGB",
       "kind": "image", "sample_shape": [3, 5, 7], "classes": ["red", "green", "blue", "grey"],
       "mean": [0.25, 0.5, 0.625], "std": [0.125, 0.25, 0.3], "splits": {}}
TABLE = {"format": "webgpu-trainer/dataset@1", "name": "iris", "title": "Iris", "kind": "table",
         "sample_shape": [6], "classes": ["setosa", "versicolor", "virginica"], "mean": [],
         "std": [], "splits": {}}


def test_spec_of_new_manifest():
    spec = DataSpec.from_manifest(RGB)
    assert (spec.name, spec.title, spec.kind, spec.sample_shape) == \
        ("tiny-rgb", "Tiny RGB", "image", [3, 5, 7])
    assert (spec.values, spec.dtype, spec.sample_bytes, spec.channels) == (105, "uint8", 105, 3)
    table = spec.table()
    assert len(table) == 3 * 256
    assert table[256 + 51] == (51 / 255 - 0.5) / 0.25  # channel 1, value 51: exactly 0.0 - 2.0
    assert table[2 * 256 + 255] == (1 - 0.625) / 0.3
    tab = DataSpec.from_manifest(TABLE)
    assert (tab.values, tab.dtype, tab.sample_bytes, tab.table()) == (6, "float32", 24, None)


def test_spec_of_legacy_manifests():
    """The old MNIST manifest reads as 1x28x28 digits with MNIST's mean and std; the user's
    own digits of that format as "own"; MNIST's table is the one every earlier run used."""
    mnist = DataSpec.from_manifest({"format": "webgpu-trainer/mnist@1", "dataset": "MNIST"})
    assert (mnist.name, mnist.title, mnist.sample_shape, mnist.classes) == \
        ("mnist", "MNIST", [1, 28, 28], [str(i) for i in range(10)])
    assert mnist.table() == [(v / 255 - 0.1307) / 0.3081 for v in range(256)]
    own = DataSpec.from_manifest({"format": "webgpu-trainer/mnist@1", "dataset": "own"})
    assert (own.name, own.values) == ("own", 784)
    assert MNIST.table() == mnist.table()


@pytest.mark.parametrize("change,message", [
    ({"format": "webgpu-trainer/cifar@9"}, "dataset manifest: format 'webgpu-trainer/cifar@9' "
     "is not 'webgpu-trainer/dataset@1' (or the older 'webgpu-trainer/mnist@1')"),
    ({"kind": "audio"},
     "dataset manifest: kind must be 'image', 'table' or 'tokens', got 'audio'"),
    ({"sample_shape": [3, 0, 7]}, "dataset manifest: sample_shape [3, 0, 7] is not [C, H, W] "
     "(or [H, W]) with sizes >= 1"),
    ({"sample_shape": "3x5x7"}, "dataset manifest: sample_shape must be a list of sizes, got "
     "'3x5x7'"),
    ({"classes": ["only"]}, "dataset manifest: classes must be 2 to 256 names, got ['only']"),
    ({"classes": [str(i) for i in range(300)]}, "dataset manifest: classes must be 2 to 256 "
     "names, got ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', ..."),
    ({"mean": [0.5]}, "dataset manifest: mean must be 3 numbers (one per channel), got [0.5]"),
    ({"std": [0.1, 0.0, 0.2]}, "dataset manifest: std must be > 0, got [0.1, 0.0, 0.2]"),
    ({"name": None}, "dataset manifest: name must be a dataset name, got None"),
])
def test_hostile_manifests(change, message):
    with pytest.raises(ValueError) as e:
        DataSpec.from_manifest({**RGB, **change})
    assert str(e.value) == message


def _conv_graph(in_shape, classes):
    """Flatten -> Gemm from ``in_shape`` (per sample) to ``classes`` scores."""
    f = int(np.prod(in_shape))
    w = np.random.default_rng(1).standard_normal((classes, f)).astype(np.float32) * 0.01
    return make_graph([node("Flatten", ["x"], ["flat"], axis=1),
                       node("Gemm", ["flat", "fc.w"], ["logits"], transB=1)],
                      [("fc.w", w, "param")], [("x", ["N", *in_shape])],
                      [("logits", ["N", classes])])


def test_check_fits_names_both_shapes():
    spec = DataSpec.from_manifest(RGB)
    split = Split(bytes(105 * 2), bytes(2), 2, bytes(2), spec)
    check_fits(Graph(_conv_graph([3, 5, 7], 4)[0]), spec, split, split)
    check_fits(Graph(_conv_graph([105], 6)[0]), spec, split, split)  # flat, more classes
    with pytest.raises(ValueError) as e:
        check_fits(Graph(_conv_graph([1, 28, 28], 4)[0]), spec, split, split)
    assert str(e.value) == (
        "model input 'x' [N, 1, 28, 28] does not fit dataset tiny-rgb (3x5x7 images): it "
        "takes [1, 28, 28] per sample (784 values), the dataset gives [3, 5, 7] (105 values); "
        "use a model with input [N, 3, 5, 7] or [N, 105]")
    with pytest.raises(ValueError) as e:  # as many values, channels last: not this layout
        check_fits(Graph(_conv_graph([5, 7, 3], 4)[0]), spec, split, split)
    assert str(e.value).startswith("model input 'x' [N, 5, 7, 3] does not fit dataset "
                                   "tiny-rgb (3x5x7 images): it takes [5, 7, 3] per sample "
                                   "(105 values), the dataset gives [3, 5, 7] (105 values)")
    grey = Split(bytes(784 * 2), bytes(2), 2, bytes(2))  # MNIST: three input forms fit
    for dims in ([1, 28, 28], [784], [28, 28]):
        check_fits(Graph(_conv_graph(dims, 10)[0]), MNIST, grey, grey)
    table = DataSpec.from_manifest(TABLE)
    rows = Split(bytes(48), bytes(2), 2, bytes(2), table)
    with pytest.raises(ValueError) as e:
        check_fits(Graph(_conv_graph([2, 3], 3)[0]), table, rows, rows)
    assert str(e.value) == (
        "model input 'x' [N, 2, 3] does not fit dataset iris (6 features): it takes [2, 3] "
        "per sample (6 values), the dataset gives [6] (6 values); use a model with input "
        "[N, 6]")
    with pytest.raises(ValueError) as e:
        check_fits(Graph(_conv_graph([3, 5, 7], 3)[0]), spec, split, split)
    assert str(e.value) == ("model output 'logits' [N, 3] does not fit dataset tiny-rgb "
                            "(4 classes): training needs [N, K] scores with K >= 4")


def _gathered(device, spec, samples, labels, order, offset, batch=4):
    """The batch the GPU's training gather makes at ``offset`` of ``order`` (inputs, labels),
    and the CPU engine's inputs of the same rows."""
    from webgpu_trainer.cpu.cpu_engine import CpuEngine
    from webgpu_trainer.engine.train.gpu_engine import GpuEngine
    from webgpu_trainer.engine.train.loop import Trainer
    graph, blob = _conv_graph(spec.sample_shape, len(spec.classes))
    split = Split(samples.tobytes(), labels.tobytes(), len(labels), labels.tobytes(), spec)
    cfg = {"batch_size": batch, "val_images": 0, "init": "finetune"}
    said = []
    gpu = Trainer(GpuEngine(device), graph, blob, dict(cfg), split, split,
                  emit=lambda kind, **kw: said.append(kw.get("text")))
    cpu = Trainer(CpuEngine(), graph, blob, dict(cfg), split, split)

    async def go():
        await gpu.setup()
        await cpu.setup()
        assert f"Loading {spec.title}…" in said  # the status names the dataset
        eng = gpu.engine
        eng.set_order(order)
        eng._write_step(1, offset, 0.0)
        device.submit([device.program(eng.gather_train)])
        x, y = eng.plan.input, eng.plan.labels
        xs = np.frombuffer(await device.read(x.buf, x.offset, x.numel * 4), np.float32)
        ys = np.frombuffer(await device.read(y.buf, y.offset, 4 * batch), np.uint32)
        rows = cpu.engine.train_images[np.asarray(order[offset:offset + batch])]
        return xs.reshape(batch, -1), ys, cpu.engine._inputs(rows).reshape(batch, -1)
    return run(go())


def test_gather_rgb_3x5x7(device):
    """13 samples of 105 uint8 values (1,365 bytes: the shard's last word is padded): each
    gathered value is float32((v / 255 - mean[c]) / std[c]), c = index // 35, exactly."""
    spec = DataSpec.from_manifest(RGB)
    rng = np.random.default_rng(7)
    samples = rng.integers(0, 256, (13, 105)).astype(np.uint8)
    labels = rng.integers(0, 4, 13).astype(np.uint8)
    order = [12, 3, 0, 7, 11, 5, 1, 2, 4, 6, 8, 9, 10]
    x, y, cpu_x = _gathered(device, spec, samples, labels, order, offset=0)
    c = np.arange(105) // 35
    mean, std = np.array(RGB["mean"])[c], np.array(RGB["std"])[c]
    want = ((samples[order[:4]].astype(np.float64) / 255 - mean) / std).astype(np.float32)
    assert np.array_equal(x, want)
    assert np.array_equal(cpu_x, want)
    assert y.tolist() == labels[order[:4]].tolist()


def test_gather_table(device):
    """A table dataset: the float32 features are copied bit for bit."""
    spec = DataSpec.from_manifest(TABLE)
    rng = np.random.default_rng(8)
    samples = (rng.standard_normal((9, 6)) * 3).astype(np.float32)
    labels = rng.integers(0, 3, 9).astype(np.uint8)
    order = [1, 8, 2, 0, 3, 4, 5, 6, 7]
    x, y, cpu_x = _gathered(device, spec, samples, labels, order, offset=4)
    want = samples.astype(np.float64)[order[4:8]].astype(np.float32)
    assert np.array_equal(x, want)
    assert np.array_equal(cpu_x, want)
    assert y.tolist() == labels[order[4:8]].tolist()
