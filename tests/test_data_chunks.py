"""Datasets larger than one GPU buffer (issue 18 item 6): a split is uploaded as chunks of whole
samples, each within ``GpuEngine.data_limit`` (the device's maxStorageBufferBindingSize and
maxBufferSize, or the engine's ``chunk_bytes``), one gather dispatch per chunk
(shaders/data.wgsl). Here ``chunk_bytes`` is lowered so that a small dataset spans 3+ buffers:

- ``data.chunks`` cuts on sample boundaries (sizes in words of 4 bytes, samples of odd size);
- training with chunks is bit-identical to one buffer (losses, final weights), for uint8
  images (105-byte samples: chunks start mid-word) and float32 features, with augmentation;
  and agrees with the numpy engine;
- a dataset that cannot fit (one sample over the limit; more bytes than a budget) is refused
  with the numbers named, before the engine is built or any buffer made.
"""

import numpy as np
import pytest
from conftest import head, make_graph, node, run

from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine.train.data import DataSpec, Split, check_size, chunks
from webgpu_trainer.engine.train.gpu_engine import GpuEngine
from webgpu_trainer.engine.train.loop import Trainer

SHAPE = (3, 5, 7)  # 105 bytes a sample: chunk boundaries fall inside 4-byte words
COUNT, CLASSES = 40, 4
CFG = {"batch_size": 8, "epochs": 2, "max_steps": 8, "val_images": 8, "eval_images": 16, "seed": 5,
       "optimizer": "adam", "lr": 0.01, "report_every": 1}


def spec_of(shape):
    kind = "image" if len(shape) == 3 else "table"
    c = shape[0] if kind == "image" else 0
    return DataSpec("chunky", "Chunky", kind, shape, [str(k) for k in range(CLASSES)],
                    [0.4, 0.5, 0.6][:c], [0.2, 0.25, 0.3][:c])


def model(shape):
    """Flatten -> Gemm -> LogSoftmax over samples [N, *shape]."""
    n = int(np.prod(shape))
    hn, ht = head("flat", n, CLASSES, np.random.default_rng(0))
    return make_graph([node("Flatten", ["input"], ["flat"], axis=1)] + hn, ht,
                      [("input", ["N", *shape])], [("output", ["N", CLASSES])])


def split(shape, count=COUNT, seed=7):
    """Samples whose class is learnable: label k raises the first values."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count, dtype=np.uint8)
    if len(shape) == 3:
        x = rng.integers(0, 200, (count, *shape)).astype(np.uint8)
        x[:, 0, 0, :4] += (labels * 15).astype(np.uint8)[:, None]
    else:
        x = rng.standard_normal((count, *shape)).astype("<f4")
        x[:, 0] += labels
    return Split(x.tobytes(), labels.tobytes(), count, labels.tobytes(), spec_of(shape))


def train(engine, shape, **cfg):
    """(losses of every step, final weights, the engine) of a short run."""
    events = []
    data = split(shape)
    graph, blob = model(shape)
    tr = Trainer(engine, graph, blob, dict(CFG, **cfg), data, split(shape, 24, seed=8),
                 emit=lambda kind, **kw: events.append((kind, kw)))
    run(tr.setup())
    run(tr.run())
    losses = np.array([row[1] for kind, kw in events if kind == "progress"
                       for row in kw["losses"]])
    return losses, run(engine.read_weights()), engine


def test_chunks_cut_on_sample_boundaries():
    assert chunks(40, 105, 1000) == [(0, 9), (9, 18), (18, 27), (27, 36), (36, 40)]
    assert chunks(40, 105, None) == [(0, 40)]
    assert chunks(9, 105, 948) == [(0, 9)]  # 945 bytes: 948 in words, within the limit
    assert chunks(9, 105, 947) == [(0, 8), (8, 9)]  # 947 is 944 in words: 8 samples
    assert chunks(3, 104, 107) == [(0, 1), (1, 2), (2, 3)]
    assert chunks(0, 105, 1000) == [(0, 0)]
    with pytest.raises(ValueError) as e:
        chunks(3, 105, 107)  # 108 bytes in whole words: more than 107
    assert str(e.value) == ("one sample is 105 bytes, more than the largest data buffer "
                            "this device binds (104 bytes)")


@pytest.mark.parametrize("shape, aug", [(SHAPE, {}), (SHAPE, {"augment_crop": 2,
                                                               "augment_flip": True}),
                                        ((7,), {})], ids=["images", "augmented", "table"])
def test_chunked_training_is_bit_identical_to_one_buffer(device, shape, aug):
    size = spec_of(shape).sample_bytes
    limit = 9 * size + 3  # 9 samples a buffer: 32 training images -> 4 chunks
    one, w_one, _ = train(GpuEngine(device), shape, **aug)
    many, w_many, eng = train(GpuEngine(device, chunk_bytes=limit), shape, **aug)
    assert eng.data_limit == limit
    assert len(chunks(32, size, limit)) == 4
    gathers = [d for d in eng.gather_train if d[0][2].startswith("data:")]
    assert len(gathers) == 4, [d[0][2] for d in eng.gather_train]
    assert len(one) == len(many) == CFG["max_steps"]
    assert one.tobytes() == many.tobytes(), (one, many)
    assert w_one == w_many
    assert many[-3:].mean() < many[:3].mean()  # it learns
    cpu, _, _ = train(CpuEngine(), shape, **aug)
    np.testing.assert_allclose(many, cpu, rtol=2e-4, atol=1e-5)


def test_a_dataset_that_cannot_fit_is_refused_before_any_work(device):
    spec = spec_of(SHAPE)
    with pytest.raises(ValueError) as e:
        check_size(spec, {"training": 40, "test": 24}, 104)
    assert str(e.value) == ("dataset chunky (3x5x7 images) cannot be uploaded: one sample is "
                            "105 bytes, more than the largest data buffer this device binds "
                            "(104 bytes)")
    with pytest.raises(ValueError) as e:
        check_size(spec, {"training": 40, "test": 24}, 1000, budget=6000)
    assert str(e.value) == ("dataset chunky is 6,784 bytes (40 training + 24 test samples of "
                            "105 bytes and a label byte each): more than the 6,000 bytes this "
                            "page can hold; use fewer samples")
    check_size(spec, {"training": 40, "test": 24}, 108, budget=6784)  # exactly fits
    before = device.allocated
    graph, blob = model(SHAPE)
    tr = Trainer(GpuEngine(device, chunk_bytes=100), graph, blob, CFG, split(SHAPE),
                 split(SHAPE, 24))
    with pytest.raises(ValueError, match=r"^dataset chunky \(3x5x7 images\) cannot be "
                                         r"uploaded: one sample is 105 bytes, more than the "
                                         r"largest data buffer this device binds \(100 bytes\)$"):
        run(tr.setup())
    assert not hasattr(tr.engine, "plan") and device.allocated == before


def test_the_device_reports_its_granted_limits(device):
    lim = device.limits
    assert lim["max_storage_buffer_binding_size"] >= 128 * 2 ** 20  # WebGPU's default
    assert lim["max_buffer_size"] >= 256 * 2 ** 20
    assert GpuEngine(device).data_limit == min(lim.values())
