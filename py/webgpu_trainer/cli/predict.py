"""``webgpu-trainer predict MODEL.onnx``: one MNIST test image predicted by the engine (eval
mode, weights as in the model) and by onnxruntime on the model's inference form, side by side
(:func:`predict`); :func:`engine_log_probs` and :func:`onnxruntime_probs` are the two halves,
also used by the tests."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ..engine.train import data as train_data
from ..engine.ops import losses
from .devices import make_trainer, open_device


async def engine_log_probs(dev, model_path: Path, images, labels) -> list[list[float]]:
    """Eval-mode log-probabilities of the engine (weights as in the model: fine-tune init) for
    ``images`` (uint8 [n, 28, 28], n >= 1), via the trainer's evaluate (its normalisation), on
    the engine of ``dev`` (wgpu device: GPU, ``CpuDevice``: numpy)."""
    import numpy as np

    from .. import onnx_io
    graph, weights = onnx_io.load_bundle(model_path)
    images = np.asarray(images, np.uint8)
    labels = np.asarray(labels, np.uint8)
    n = len(labels)
    if n < 2:  # the plan's batch (BatchNorm training needs >= 2) is never run in train mode
        images = np.concatenate([images, images])
        labels = np.concatenate([labels, labels])
    split = train_data.Split(images.tobytes(), labels.tobytes(), len(labels), labels.tobytes())
    trainer = make_trainer(dev, graph, weights,
                           {"init": "finetune", "batch_size": 2, "eval_images": n,
                            "val_images": 0}, split, split)
    await trainer.setup()
    _, _, raw = await trainer.evaluate()
    vals = np.frombuffer(raw, np.float32).reshape(n, trainer.classes)
    return vals.astype(np.float64)


def onnxruntime_probs(model_path: Path, images):
    """Probabilities of onnxruntime on the inference form of the model (BatchNorm with running
    statistics, Dropout off), input normalised as the trainer does."""
    import numpy as np
    import onnxruntime as ort

    from .. import onnx_io
    graph, weights = onnx_io.load_bundle(model_path)
    model = onnx_io.export_onnx(model_path, weights, {})
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = (np.asarray(images, np.float32) / 255.0 - train_data.MNIST_MEAN) / train_data.MNIST_STD
    x = x.reshape(len(x), 1, *x.shape[1:]).astype(np.float32)
    out = sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)
    final = losses.final_op(graph)
    if final == "LogSoftmax":
        return np.exp(out)
    if final == "Softmax":  # already probabilities
        return out
    e = np.exp(out - out.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def add_predict(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("predict", help="predict one MNIST test image with the engine (eval "
                                       "mode) and with onnxruntime")
    p.add_argument("model", type=Path, help="the .onnx model")
    p.add_argument("--index", type=int, default=12, help="MNIST test image (default 12)")
    p.add_argument("--data-dir", dest="data_dir", type=Path, default=None,
                   help="MNIST cache (default <repo>/.cache/datasets/mnist)")
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                   help="gpu (wgpu-py, default) or cpu (the numpy engine, float32)")
    return p


def predict(args) -> int:
    import numpy as np

    from ..host import data
    try:
        dev = open_device(args.device)
        data.prepare(args.data_dir)
        images, labels = data.load(args.data_dir, "test")
        if not 0 <= args.index < len(labels):
            raise ValueError(f"--index must be in [0, {len(labels)})")
        img, label = images[args.index:args.index + 1], labels[args.index:args.index + 1]
        probs = np.exp(asyncio.run(engine_log_probs(dev, args.model, img, label))[0])
        ref = onnxruntime_probs(args.model, img)[0]
    except (NotImplementedError, ValueError, FileNotFoundError, data.DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    digit, ref_digit = int(probs.argmax()), int(ref.argmax())
    print(f"MNIST test image {args.index} (label {int(label[0])}): predicted digit {digit}")
    print("engine      " + " ".join(f"{d}:{p:.4f}" for d, p in enumerate(probs)))
    print("onnxruntime " + " ".join(f"{d}:{p:.4f}" for d, p in enumerate(ref)))
    print(f"onnxruntime digit {ref_digit}; max |engine - onnxruntime| = "
          f"{float(np.abs(probs - ref).max()):.2e}")
    return 0
