"""Data augmentation (issue 18 item 5): ``augment_crop`` (torchvision's RandomCrop(size,
padding=N), zero padding of the raw image) and ``augment_flip`` (RandomHorizontalFlip(0.5)).

- The GPU's augmented batch (shaders/augment.wgsl after the gather) is the numpy engine's
  (cpu/augment.py) bit for bit, and both equal a float64 reference written pixel by pixel from
  the same Philox draws (pad the raw uint8 image with 0, crop, flip, then normalise).
- Off (the default): no dispatch is added to the training step (tests/test_golden.py holds).
- The draws: offsets cover 0..2N uniformly, about half the images flip, another step or seed
  draws others.
- A model on [N, F] with augmentation on is refused naming its input; tables ignore it.
"""

import numpy as np
import pytest
from conftest import head, make_graph, node, run, tiny_mlp

from webgpu_trainer.cpu import augment as cpu_augment
from webgpu_trainer.cpu import philox
from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine.graph import Graph
from webgpu_trainer.engine.train import augment
from webgpu_trainer.engine.train.data import DataSpec, Split
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.loop import Trainer

SHAPE = (3, 8, 6)  # C, H, W: colour, not square
BATCH, COUNT, SEED = 5, 12, 321
# per channel: pixel 0 becomes -1.8, -1.2, 0 (the padding differs per channel)
MEAN, STD = [0.45, 0.3, 0.0], [0.25, 0.25, 0.5]


def spec_of(shape):
    c = shape[0] if len(shape) == 3 else 0
    return DataSpec("aug", "augmented", "image" if c else "table", shape,
                    [str(k) for k in range(10)], MEAN[:c], STD[:c])


TABLE = spec_of(SHAPE).table()


def image_model(shape=SHAPE, classes=4):
    """Flatten -> Gemm -> LogSoftmax over images [N, *shape]."""
    rng = np.random.default_rng(0)
    n = int(np.prod(shape))
    hn, ht = head("flat", n, classes, rng)
    return make_graph([node("Flatten", ["input"], ["flat"], axis=1)] + hn, ht,
                      [("input", ["N", *shape])], [("output", ["N", classes])])


def data(shape=SHAPE, count=COUNT):
    rng = np.random.default_rng(7)
    images = rng.integers(1, 256, (count, *shape), dtype=np.uint8) if len(shape) == 3 \
        else rng.standard_normal((count, *shape)).astype("<f4")  # pixel 0 only from padding
    labels = rng.integers(0, 4, count, dtype=np.uint8)
    return images, Split(images.tobytes(), labels.tobytes(), count, labels.tobytes(),
                         spec_of(shape))


def reference(raw, seed, step, pad, flip):
    """float64, pixel by pixel, from the Philox words themselves: torchvision's order (pad the
    raw uint8 image with 0, crop at (dy, dx), flip), then the table."""
    n, c, h, w = raw.shape
    out = np.empty(raw.shape, np.float64)
    for b in range(n):
        w0, w1, w2, _ = (int(v) for v in philox.philox4x32(b, 0, step, 2, seed, 0))
        dy, dx = w0 * (2 * pad + 1) >> 32, w1 * (2 * pad + 1) >> 32
        flipped = flip and w2 >= 2 ** 31
        padded = np.zeros((c, h + 2 * pad, w + 2 * pad), np.int64)
        padded[:, pad:pad + h, pad:pad + w] = raw[b]
        crop = padded[:, dy:dy + h, dx:dx + w]
        if flipped:
            crop = crop[:, :, ::-1]
        out[b] = np.asarray(TABLE).reshape(c, 256)[np.arange(c)[:, None, None], crop]
    return out


def plain_batch(raw):
    """The first batch of ``raw`` normalised, not augmented (float32)."""
    table = np.asarray(TABLE, np.float32).reshape(-1, 256)
    return table[np.arange(raw.shape[1])[:, None, None], raw[:BATCH]]


async def gpu_batches(device, graph, blob, split, augmentation, steps):
    """The model input the GPU's training step ``t`` saw, for each t of ``steps`` (order:
    identity, batch at offset 0)."""
    eng = GpuEngine(device)
    await eng.build(Graph(graph), BATCH, None, None, SEED)
    eng.write_weights(blob + bytes(eng.wbytes - len(blob)))
    await eng.attach(eng.optim.make("sgd", 0.01))
    eng.set_augment(augmentation)
    await eng.load_data(split, {}, TABLE)
    eng.set_order(list(range(split.count)))
    out = []
    for t in steps:
        await eng.step(t, 0, 0.0)
        await device.sync()
        raw = await device.read(eng.plan.input.buf, 0, eng.plan.input.nbytes)
        out.append(np.frombuffer(raw, "<f4")
                   .reshape(BATCH, *SHAPE))
    return eng, out


async def cpu_batches(graph, blob, split, augmentation, steps):
    """The model input the numpy engine's step ``t`` computed on, for each t of ``steps``."""
    eng = CpuEngine()
    await eng.build(Graph(graph), BATCH, None, None, SEED)
    eng.write_weights(blob + bytes(eng.wbytes - len(blob)))
    await eng.attach(eng.optim.make("sgd", 0.01))
    eng.set_augment(augmentation)
    await eng.load_data(split, {}, TABLE)
    eng.set_order(list(range(split.count)))
    seen, forward = [], eng.engine.step

    def capture(x, *args, **kw):
        seen.append(np.array(x))
        return forward(x, *args, **kw)
    eng.engine.step = capture
    for t in steps:
        await eng.step(t, 0, 0.0)
    return seen


@pytest.mark.parametrize("pad,flip", [(3, True), (0, True), (2, False), (9, True)])
def test_gpu_and_cpu_augment_the_same_as_the_reference(device, pad, flip):
    graph, blob = image_model()
    raw, split = data()
    steps = [1, 2, 7]
    eng, gpu = run(gpu_batches(device, graph, blob, split, (pad, flip), steps))
    assert len(eng.gather_train) == 2  # gather, augment
    cpu = run(cpu_batches(graph, blob, split, (pad, flip), steps))
    for t, g, c in zip(steps, gpu, cpu):
        ref = reference(raw[:BATCH], SEED, t, pad, flip)
        assert np.array_equal(g, c), t
        assert np.array_equal(g, ref.astype(np.float32)), t
    assert not np.array_equal(gpu[0], gpu[1])  # another step, other crops / flips
    assert not np.array_equal(gpu[0], plain_batch(raw))
    if pad:  # padding is each channel's table entry of pixel 0
        for c in range(SHAPE[0]):
            assert (gpu[0][:, c] == np.float32(TABLE[256 * c])).any()


def test_off_adds_no_dispatch_and_keeps_the_batch(device):
    """Both off: the training gather is the one dispatch it was, the input the plain batch."""
    graph, blob = image_model()
    raw, split = data()
    eng, (got,) = run(gpu_batches(device, graph, blob, split, None, [3]))
    assert len(eng.gather_train) == 1
    assert np.array_equal(got, plain_batch(raw))


def test_draws_are_uniform_and_seeded():
    """mulhi(word, 2N + 1) covers 0..2N evenly; half the images flip; flip off flips none."""
    dy, dx, flipped = cpu_augment.draws(SEED, 5, 30000, 4, True)
    for d in (dy, dx):
        counts = np.bincount(d, minlength=9)
        assert len(counts) == 9 and abs(counts / 30000 - 1 / 9).max() < 0.01
    assert abs(flipped.mean() - 0.5) < 0.01
    assert not cpu_augment.draws(SEED, 5, 100, 4, False)[2].any()
    other = cpu_augment.draws(SEED + 1, 5, 100, 4, True)
    assert not np.array_equal(other[0], dy[:100])
    # the dropout stream of the same (seed, step) is another counter: other words
    assert not np.array_equal(philox.words(SEED, 4, 0, 5, philox.DROPOUT),
                              np.asarray(philox.philox4x32(0, 0, 5, 2, SEED, 0)))


def test_refused_for_a_model_on_rows_and_ignored_for_tables(device):
    """tiny_mlp takes MNIST's images as rows [N, 784]: augmentation is refused naming the
    input, before any GPU work; a model that reshapes the images too; for a table dataset
    (kind "table") it is ignored; both off: None."""
    graph, blob = tiny_mlp(0)
    cfg = {"batch_size": 4, "max_steps": 1, "val_images": 0, "eval_images": 4,
           "augment_crop": 4, "augment_flip": True}
    tr = Trainer(GpuEngine(device), graph, blob, cfg, *[data((1, 28, 28), 16)[1]] * 2)
    with pytest.raises(ValueError) as e:
        run(tr.setup())
    assert str(e.value) == ("augment_crop and augment_flip need images: model input 'input' "
                            "has shape [N, 784], not [N, C, H, W]; turn augmentation off for "
                            "this model")
    assert not hasattr(tr.engine, "plan")  # refused before the engine was built
    g, images, table = Graph(graph), spec_of((1, 28, 28)), spec_of((784,))
    assert augment.resolve({"augment_flip": True}, g, table) is None
    assert augment.resolve({"augment_crop": 0, "augment_flip": False}, g, images) is None
    with pytest.raises(ValueError, match="^augment_flip need images"):
        augment.resolve({"augment_flip": True}, g, images)
    with pytest.raises(ValueError) as e:
        augment.resolve({"augment_crop": 2}, Graph(image_model((1, 12, 12))[0]),
                        spec_of((1, 6, 24)))
    assert str(e.value) == ("augment_crop need the dataset's images as they are: model input "
                            "'input' [N, 1, 12, 12] reshapes aug's 1x6x24 images; use a model "
                            "with input [N, 1, 6, 24]")
    assert augment.resolve({"augment_crop": 2}, Graph(image_model()[0]), spec_of(SHAPE)) \
        == (2, False)
    # a table dataset trains with augmentation asked: ignored, no augment dispatch
    eng = GpuEngine(device)
    tr = Trainer(eng, graph, blob, cfg, *[data((784,), 16)[1]] * 2)
    run(tr.setup())
    assert eng.augment is None and len(eng.gather_train) == 1


def test_trainer_augments_on_both_engines_alike(device):
    """A short run with augmentation on: the GPU's and the numpy engine's losses agree (same
    batches, float32 arithmetic in another order), and differ from the run without it."""
    graph, blob = image_model((1, 28, 28), classes=10)
    raw, split = data((1, 28, 28), 48)
    cfg = {"batch_size": 8, "max_steps": 6, "val_images": 0, "eval_images": 8, "seed": 3,
           "optimizer": "sgd", "lr": 0.05, "report_every": 1}

    def losses(engine, **aug):
        events = []
        tr = Trainer(engine, graph, blob, dict(cfg, **aug), split, split,
                     emit=lambda kind, **kw: events.append((kind, kw)))
        run(tr.setup())
        run(tr.run())
        return np.array([row[1] for kind, kw in events if kind == "progress"
                         for row in kw["losses"]])
    gpu = losses(GpuEngine(device), augment_crop=4, augment_flip=True)
    cpu = losses(CpuEngine(), augment_crop=4, augment_flip=True)
    plain = losses(CpuEngine())
    assert len(gpu) == len(cpu) == 6
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4)
    assert np.abs(cpu - plain).max() > 1e-3

