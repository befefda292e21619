"""``webgpu-trainer predict MODEL.onnx``: one test image of a dataset (MNIST by default)
predicted by the engine (eval mode, weights as in the model) and by onnxruntime on the model's
inference form, side by side, per class by name (:func:`predict`); :func:`engine_log_probs`
and :func:`onnxruntime_probs` are the two halves, also used by the tests."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path

from ..engine.train import data as train_data
from ..engine.ops import losses
from .devices import make_trainer, open_device


async def engine_log_probs(dev, model_path: Path, images, labels,
                           spec: train_data.DataSpec = train_data.MNIST):
    """Eval-mode log-probabilities of the engine (weights as in the model: fine-tune init) for
    ``images`` (samples of the dataset ``spec``, [n, ...] of its dtype, n >= 1), via the
    trainer's evaluate (its normalisation), on the engine of ``dev`` (wgpu device: GPU,
    ``CpuDevice``: numpy)."""
    import numpy as np

    from .. import onnx_io
    graph, weights = onnx_io.load_bundle(model_path)
    images = np.asarray(images, spec.dtype)
    labels = np.asarray(labels, np.uint8)
    n = len(labels)
    if n < 2:  # the plan's batch (BatchNorm training needs >= 2) is never run in train mode
        images = np.concatenate([images, images])
        labels = np.concatenate([labels, labels])
    split = train_data.Split(images.tobytes(), labels.tobytes(), len(labels), labels.tobytes(),
                             spec)
    trainer = make_trainer(dev, graph, weights,
                           {"init": "finetune", "batch_size": 2, "eval_images": n,
                            "val_images": 0}, split, split)
    await trainer.setup()
    _, _, raw = await trainer.evaluate()
    vals = np.frombuffer(raw, np.float32).reshape(n, trainer.classes)
    return vals.astype(np.float64)


def onnxruntime_probs(model_path: Path, images, spec: train_data.DataSpec = train_data.MNIST):
    """Probabilities of onnxruntime on the inference form of the model (BatchNorm with running
    statistics, Dropout off) for ``images`` of the dataset ``spec``, normalised as the
    trainer does (its table, per channel; features as they are)."""
    import numpy as np
    import onnxruntime as ort

    from .. import onnx_io
    graph, weights = onnx_io.load_bundle(model_path)
    model = onnx_io.export_onnx(model_path, weights, {})
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = np.asarray(images, spec.dtype).reshape(len(images), spec.values)
    if spec.kind == "image":
        table = np.asarray(spec.table(), np.float32).reshape(-1, 256)
        hw = math.prod(spec.sample_shape[-2:])
        x = table[np.arange(spec.values) // hw, x]
    dims = [d if isinstance(d, int) else 0 for d in graph["inputs"][0]["shape"][1:]]
    x = np.ascontiguousarray(x, np.int64 if spec.kind == "tokens" else np.float32).reshape(
        len(x), *dims)
    out = sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)
    final = losses.final_op(graph)
    if final == "LogSoftmax":
        return np.exp(out)
    if final == "Softmax":  # already probabilities
        return out
    e = np.exp(out - out.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def add_predict(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("predict", help="predict one test image of a dataset (MNIST by default) "
                                       "with the engine (eval mode) and with onnxruntime")
    p.add_argument("model", type=Path, help="the .onnx model")
    p.add_argument("--index", type=int, default=12, help="test image (default 12)")
    p.add_argument("--data-dir", dest="data_dir", type=Path, default=None,
                   help="MNIST cache (default <repo>/.cache/datasets/mnist)")
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                   help="gpu (wgpu-py, default) or cpu (the numpy engine, float32)")
    p.add_argument("--data", dest="dataset", default="mnist", metavar="NAME",
                   help="the dataset (default mnist)")
    p.add_argument("--data-root", dest="data_root", type=Path, default=None,
                   help="the folder of prepared datasets (default <repo>/.cache/datasets); "
                        "--data-dir names the dataset's folder directly")
    return p


def predict(args) -> int:
    import numpy as np

    from ..host import data
    from .run_data import dataset_folder, load_dataset
    try:
        dev = open_device(args.device)
        folder = dataset_folder(args.dataset, args.data_dir, args.data_root)
        _, test, _, spec, _ = load_dataset(folder, args.dataset)
        if not 0 <= args.index < test.count:
            raise ValueError(f"--index must be in [0, {test.count})")
        size = spec.sample_bytes
        img = np.frombuffer(test.images[args.index * size:(args.index + 1) * size],
                            spec.dtype).reshape(1, *spec.sample_shape)
        label = test.labels_host[args.index:args.index + 1]
        probs = np.exp(asyncio.run(engine_log_probs(dev, args.model, img, list(label),
                                                    spec))[0])
        ref = onnxruntime_probs(args.model, img, spec)[0]
    except (NotImplementedError, ValueError, FileNotFoundError, data.DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    names = spec.classes + [f"class {k}" for k in range(len(spec.classes), len(probs))]
    best, ref_best = int(probs.argmax()), int(ref.argmax())
    print(f"{spec.title} test image {args.index} (label {names[label[0]]}): predicted "
          f"{names[best]}")
    width = max(len(n) for n in names)
    print(f"{'class':<{width}}  engine  onnxruntime")
    for name, p, r in zip(names, probs, ref):
        print(f"{name:<{width}}  {p:.4f}  {r:.4f}")
    print(f"onnxruntime: {names[ref_best]}; max |engine - onnxruntime| = "
          f"{float(np.abs(probs - ref).max()):.2e}")
    return 0
