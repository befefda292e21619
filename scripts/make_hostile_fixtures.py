"""Build the small hostile input files of ``tests/fixtures/hostile/`` (issue 9: every input
checked).

Usage: ``.venv/bin/python scripts/make_hostile_fixtures.py [OUT_DIR]`` (default
``tests/fixtures/hostile``). The softmax-head model and its reference values need torch (the
``fixtures`` optional dependency group); everything else is numpy + onnx. The tests read the
files and need no torch. Seeded: re-running gives the same files (up to exporter versions).

ONNX models (``onnx/``), each ``[N, 1, 28, 28] -> [N, 10]``:

- ``softmax_head.onnx``: LeNet-style conv1 Conv2d(1, 4, 5) -> ReLU -> MaxPool2d(2) -> flatten ->
  fc1 Linear(576, 10) -> nn.Softmax(dim=1), TorchScript exporter, opset 17, dynamic batch.
  ``softmax_head.npz``: ``x`` [4, 1, 28, 28], ``labels`` [4], ``out`` (the probabilities),
  ``loss`` = ``F.nll_loss(torch.log(p), y)`` and ``grad/<param>`` its gradients; ``loss_ws`` and
  ``grad_ws/<param>`` = ``F.cross_entropy(torch.log(p), y, weight=W, label_smoothing=0.1)``
  (``weight`` = W), which is NLL of log(p) with class weights and label smoothing; ``loss_ce``
  = ``F.cross_entropy(p, y)`` (what an explicit ``cross_entropy`` means: a second softmax).
  All in float64 from the float32 weights of the file.
- ``dequantize.onnx``: ``fc1.weight_quantized`` int8 [16, 784] (12,544 weights) with one scale and
  zero point -> DequantizeLinear (output ``fc1.weight``) -> Gemm(transB) -> Relu -> Gemm (fc2);
  ``dequantize_per_axis.onnx``: the same with one scale and zero point per row (axis 0).
- ``many_problems.onnx``: input [N, 3, 32, 32] (fine since issue 18), an int64 Gemm bias and a
  Hardmax node.
- ``opset99.onnx``: a Flatten -> Gemm -> Relu -> Gemm MLP that declares opset 99.
- ``scalar_param.onnx``: Gemm -> Mul by ``scale`` (a scalar nn.Parameter, shape []) -> the erf
  GELU written out with scalar initializers ``sqrt2`` (Div), ``one`` (Add), ``half`` (Mul) ->
  Div by ``temperature`` (a parameter of shape [1]) -> Div by ``val_11`` (2.0, an exporter's
  constant name) -> Dropout(ratio = initializer ``ratio``) -> Gemm.

Data files (``data/``), 28x28 grey digits with labels 0..9 unless said otherwise:

- ``own_idx/``: a valid own dataset as gzip IDX, 12 training and 5 test images, with the
  standard MNIST file names; ``own_csv/``: the same digits as ``digits_train.csv`` /
  ``digits_test.csv`` with a header line;
- ``non_numeric.csv`` (line 3, field 101 is ``x12``), ``short_row.csv`` (line 4 has 700
  fields), ``label11.csv`` (line 2 has label 11), ``label11-labels-idx1-ubyte`` (label 11 at
  index 5), ``wrong_magic-images-idx3-ubyte`` (magic 0x00000804), ``truncated-images-idx3-ubyte``
  (the header says 10 images, the file holds 9.5), ``garbage-images-idx3-ubyte.gz`` (gzip magic,
  then random bytes).
- issue 16's edge cases (``edge_files``), 4 digits each (labels 1, 3, 2, 0):
  ``bom_no_header.csv`` (a UTF-8 BOM, no header), ``space_first.csv`` (the first row starts
  with a space), ``crlf.csv`` (a header, CRLF), ``trailing_blank.csv`` (blank lines at the
  end), ``signed_labels.csv`` (labels ``+1`` and `` 3``), ``header_only.csv``, ``nul.csv`` (a
  NUL byte in line 3, field 10), ``mixed_first_line.csv`` (a header with ``0`` in field 301),
  ``lone_minus.csv`` (``-`` in line 4, field 201), ``bomb-images-idx3-ubyte.gz`` (an IDX
  header for 400,000 images and 300 MiB of zeros in ~300 KB of gzip) and ``own_one/`` (IDX,
  1 training and 1 test image).
"""
from __future__ import annotations

import gzip
import json
import pathlib
import sys
import warnings
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
LABELS = [3, 0, 7, 9]
CLASS_WEIGHTS = [1.0, 0.5, 2.0, 1.0, 1.5, 1.0, 0.8, 1.2, 1.0, 0.7]


# ----------------------------------------------------------------------------- ONNX (no torch)


def _model(nodes, inits, name, opset=17, ir_version=8) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])
    g = helper.make_graph(nodes, name, [x], [y], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_hostile_fixtures")
    m.ir_version = ir_version
    return m


def _linear(rng, name, n_in, n_out):
    bound = 1 / np.sqrt(n_in)
    return [numpy_helper.from_array(rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32),
                                    f"{name}.weight"),
            numpy_helper.from_array(rng.uniform(-bound, bound, n_out).astype(np.float32),
                                    f"{name}.bias")]


def dequantize_model(per_axis: bool = False) -> onnx.ModelProto:
    """int8 fc1 weights behind DequantizeLinear: one scale and zero point (per tensor), or one
    per output row (``per_axis``: axis 0)."""
    rng = np.random.default_rng(9)
    q = rng.integers(-127, 128, (16, 784)).astype(np.int8)
    shape = (16,) if per_axis else ()
    scale = rng.uniform(0.0005, 0.002, shape).astype(np.float32)
    zero = rng.integers(-3, 4, shape).astype(np.int8)
    inits = [numpy_helper.from_array(q, "fc1.weight_quantized"),
             numpy_helper.from_array(scale, "fc1.weight_scale"),
             numpy_helper.from_array(zero, "fc1.weight_zero_point"),
             numpy_helper.from_array(rng.uniform(-0.03, 0.03, 16).astype(np.float32),
                                     "fc1.bias"),
             *_linear(rng, "fc2", 16, 10)]
    nodes = [
        helper.make_node("DequantizeLinear", ["fc1.weight_quantized", "fc1.weight_scale",
                                              "fc1.weight_zero_point"], ["fc1.weight"],
                         name="/fc1/DequantizeLinear", **({"axis": 0} if per_axis else {})),
        helper.make_node("Flatten", ["input"], ["/Flatten_output_0"], name="/Flatten", axis=1),
        helper.make_node("Gemm", ["/Flatten_output_0", "fc1.weight", "fc1.bias"],
                         ["/fc1/Gemm_output_0"], name="/fc1/Gemm", transB=1),
        helper.make_node("Relu", ["/fc1/Gemm_output_0"], ["/Relu_output_0"], name="/Relu"),
        helper.make_node("Gemm", ["/Relu_output_0", "fc2.weight", "fc2.bias"], ["output"],
                         name="/fc2/Gemm", transB=1),
    ]
    return _model(nodes, inits, "dequantize_per_axis" if per_axis else "dequantize")


def opset99_model() -> onnx.ModelProto:
    rng = np.random.default_rng(99)
    nodes = [helper.make_node("Flatten", ["input"], ["f"], name="/Flatten", axis=1),
             helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["h"], name="/fc1/Gemm",
                              transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="/Relu"),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["output"],
                              name="/fc2/Gemm", transB=1)]
    return _model(nodes, _linear(rng, "fc1", 784, 4) + _linear(rng, "fc2", 4, 10), "opset99",
                  opset=99)


def scalar_param_model() -> onnx.ModelProto:
    rng = np.random.default_rng(5)

    def scalar(name, v, shape=()):
        return numpy_helper.from_array(np.full(shape, v, np.float32), name)

    inits = [*_linear(rng, "fc1", 784, 4), scalar("scale", 1.5), scalar("sqrt2", np.sqrt(2)),
             scalar("one", 1.0), scalar("half", 0.5), scalar("temperature", 0.8, (1,)),
             scalar("val_11", 2.0), scalar("ratio", 0.25), *_linear(rng, "fc2", 4, 10)]
    nodes = [
        helper.make_node("Flatten", ["input"], ["f"], name="/Flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["h"], name="/fc1/Gemm",
                         transB=1),
        helper.make_node("Mul", ["h", "scale"], ["s"], name="/Mul"),
        helper.make_node("Div", ["s", "sqrt2"], ["d"], name="/act/Div"),
        helper.make_node("Erf", ["d"], ["e"], name="/act/Erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="/act/Add"),
        helper.make_node("Mul", ["s", "a"], ["m"], name="/act/Mul"),
        helper.make_node("Mul", ["m", "half"], ["g"], name="/act/Mul_1"),
        helper.make_node("Div", ["g", "temperature"], ["t"], name="/Div"),
        helper.make_node("Div", ["t", "val_11"], ["t2"], name="/Div_1"),
        helper.make_node("Dropout", ["t2", "ratio"], ["dr"], name="/dropout/Dropout"),
        helper.make_node("Gemm", ["dr", "fc2.weight", "fc2.bias"], ["output"], name="/fc2/Gemm",
                         transB=1),
    ]
    return _model(nodes, inits, "scalar_param")


def many_problems_model() -> onnx.ModelProto:
    """An input [N, 3, 32, 32] (a problem before issue 18), an int64 Gemm bias, a Hardmax (no
    kernel): the import must report both problems at once."""
    rng = np.random.default_rng(16)
    inits = [numpy_helper.from_array(rng.uniform(-0.02, 0.02, (10, 3072)).astype(np.float32),
                                     "fc.weight"),
             numpy_helper.from_array(np.arange(10, dtype=np.int64), "fc.bias")]
    nodes = [helper.make_node("Flatten", ["input"], ["f"], name="/Flatten", axis=1),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["g"], name="/fc/Gemm",
                              transB=1),
             helper.make_node("Hardmax", ["g"], ["output"], name="/Hardmax")]
    m = _model(nodes, inits, "many_problems")
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    for k in (2, 3):
        m.graph.input[0].type.tensor_type.shape.dim[k].dim_value = 32
    return m


# ----------------------------------------------------------------------------- softmax head


def softmax_head(out: pathlib.Path) -> None:
    """The LeNet-style softmax-head model and torch's NLL-of-log(p) references (needs torch)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("conv1", nn.Conv2d(1, 4, 5))
    model.add_module("relu", nn.ReLU())
    model.add_module("pool", nn.MaxPool2d(2))
    model.add_module("flatten", nn.Flatten())
    model.add_module("fc1", nn.Linear(4 * 12 * 12, 10))
    model.add_module("softmax", nn.Softmax(dim=1))
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((len(LABELS), 1, 28, 28)).astype(np.float32)
    path = out / "softmax_head.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.from_numpy(x),), str(path), dynamo=False,
                          opset_version=17, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    m = onnx.load(str(path))
    m.doc_string = "webgpu-trainer hostile fixture (scripts/make_hostile_fixtures.py)"
    onnx.save(m, str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    ref = {"x": x, "labels": np.array(LABELS, np.int64),
           "weight": np.array(CLASS_WEIGHTS, np.float32)}
    y = torch.tensor(LABELS)
    for tag in ("", "_ws", "_ce"):
        m64 = model.double()
        with torch.no_grad():
            for name, p in m64.named_parameters():
                p.copy_(torch.from_numpy(inits[name].copy()).double())
                p.grad = None
        p = m64(torch.from_numpy(x).double())
        if tag == "":
            loss = F.nll_loss(torch.log(p), y)
            ref["out"] = p.detach().numpy().astype(np.float32)
        elif tag == "_ws":
            loss = F.cross_entropy(torch.log(p), y, weight=torch.tensor(CLASS_WEIGHTS).double(),
                                   label_smoothing=0.1)
        else:
            loss = F.cross_entropy(p, y)
        loss.backward()
        ref[f"loss{tag}"] = np.array(loss.item())
        for name, q in m64.named_parameters():
            ref[f"grad{tag}/{name}"] = q.grad.numpy().astype(np.float32)
    ref["meta"] = np.array(json.dumps({"torch": torch.__version__, "onnx": onnx.__version__}))
    np.savez_compressed(out / "softmax_head.npz", **ref)


# ----------------------------------------------------------------------------- data


def _digits(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28x28 uint8 images (a bright stroke on black) and labels 0..9 (each at least once
    when n >= 10)."""
    rng = np.random.default_rng(seed)
    img = np.zeros((n, 28, 28), np.uint8)
    for k in range(n):
        r, c = rng.integers(6, 20, size=2)
        img[k, r:r + 8, c:c + 3] = rng.integers(128, 256)
    labels = (np.arange(n) % 10).astype(np.uint8)
    rng.shuffle(labels)
    return img.reshape(n, 784), labels


def _idx(kind: str, arr: np.ndarray, magic: int | None = None) -> bytes:
    dims = [len(arr), 28, 28] if kind == "images" else [len(arr)]
    magic = magic if magic is not None else (0x803 if kind == "images" else 0x801)
    return np.array([magic, *dims], ">u4").tobytes() + np.ascontiguousarray(arr).tobytes()


def _csv(images, labels, header=True) -> str:
    lines = ["label," + ",".join(f"{r}x{c}" for r in range(1, 29) for c in range(1, 29))] \
        if header else []
    lines += [",".join(map(str, [int(lb), *im.tolist()])) for im, lb in zip(images, labels)]
    return "\n".join(lines) + "\n"


def data_files(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": _digits(12, 1), "test": _digits(5, 2)}
    idx = out / "own_idx"
    idx.mkdir(exist_ok=True)
    stems = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
    for split, (im, lb) in splits.items():
        (idx / f"{stems[split][0]}.gz").write_bytes(gzip.compress(_idx("images", im), mtime=0))
        (idx / f"{stems[split][1]}.gz").write_bytes(gzip.compress(_idx("labels", lb), mtime=0))
    own_csv = out / "own_csv"
    own_csv.mkdir(exist_ok=True)
    for split, (im, lb) in splits.items():
        (own_csv / f"digits_{split}.csv").write_text(_csv(im, lb))

    im, lb = _digits(6, 3)
    lines = _csv(im, lb).splitlines()
    fields = lines[2].split(",")  # line 3 (the header is line 1)
    fields[100] = "x12"
    lines[2] = ",".join(fields)
    (out / "non_numeric.csv").write_text("\n".join(lines) + "\n")
    lines = _csv(im, lb).splitlines()
    lines[3] = ",".join(lines[3].split(",")[:700])  # line 4
    (out / "short_row.csv").write_text("\n".join(lines) + "\n")
    bad = lb.copy()
    bad[0] = 11  # line 2: the first row after the header
    (out / "label11.csv").write_text(_csv(im, bad))
    labels = np.arange(10, dtype=np.uint8) % 10
    labels[5] = 11
    (out / "label11-labels-idx1-ubyte").write_bytes(_idx("labels", labels))
    im10, _ = _digits(10, 4)
    (out / "wrong_magic-images-idx3-ubyte").write_bytes(_idx("images", im10, magic=0x804))
    (out / "truncated-images-idx3-ubyte").write_bytes(_idx("images", im10)[:16 + 784 * 19 // 2])
    rng = np.random.default_rng(7)
    (out / "garbage-images-idx3-ubyte.gz").write_bytes(
        b"\x1f\x8b\x08\x00" + rng.integers(0, 256, 400, dtype=np.uint8).tobytes())


def edge_files(out: pathlib.Path) -> None:
    """The CSV / IDX edge cases of issue 16 (4 digits each unless said otherwise)."""
    im, lb = _digits(4, 5)
    rows = _csv(im, lb, header=False)
    (out / "bom_no_header.csv").write_bytes(b"\xef\xbb\xbf" + rows.encode())
    (out / "space_first.csv").write_text(" " + rows)
    (out / "crlf.csv").write_bytes(_csv(im, lb).replace("\n", "\r\n").encode())
    (out / "trailing_blank.csv").write_text(rows + "\n\n \n")
    (out / "header_only.csv").write_text(_csv(im[:0], lb[:0]))
    lines = rows.splitlines()
    lines[0], lines[1] = "+" + lines[0], " " + lines[1]  # labels "+d" and " d"
    (out / "signed_labels.csv").write_text("\n".join(lines) + "\n")
    plain = rows.splitlines()
    fields = plain[2].split(",")
    fields[9] = "\0"  # line 3, field 10
    (out / "nul.csv").write_text("\n".join(plain[:2] + [",".join(fields)] + plain[3:]) + "\n")
    fields = _csv(im, lb).splitlines()[0].split(",")
    fields[300] = "0"  # a header with a number in field 301
    (out / "mixed_first_line.csv").write_text(",".join(fields) + "\n" + rows)
    fields = plain[3].split(",")
    fields[200] = "-"  # line 4, field 201: numpy would read a lone "-" as 0
    (out / "lone_minus.csv").write_text("\n".join(plain[:3] + [",".join(fields)]) + "\n")
    # a gzip bomb: a valid IDX header for 400,000 images and 300 MiB of zeros (~300 KB packed)
    head = np.array([0x803, 400_000, 28, 28], ">u4").tobytes()
    pack = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    bomb = [pack.compress(head)] + [pack.compress(zeros) for _ in range(300)] + [pack.flush()]
    (out / "bomb-images-idx3-ubyte.gz").write_bytes(b"".join(bomb))
    one = out / "own_one"  # 1 training image, 1 test image
    one.mkdir(exist_ok=True)
    for stem in ("train", "t10k"):
        im1, lb1 = _digits(1, 6)
        (one / f"{stem}-images-idx3-ubyte").write_bytes(_idx("images", im1))
        (one / f"{stem}-labels-idx1-ubyte").write_bytes(_idx("labels", lb1))


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "tests" / "fixtures" / "hostile"
    models = out / "onnx"
    models.mkdir(parents=True, exist_ok=True)
    onnx.save(dequantize_model(), str(models / "dequantize.onnx"))
    onnx.save(dequantize_model(per_axis=True), str(models / "dequantize_per_axis.onnx"))
    onnx.save(opset99_model(), str(models / "opset99.onnx"))
    onnx.save(scalar_param_model(), str(models / "scalar_param.onnx"))
    onnx.save(many_problems_model(), str(models / "many_problems.onnx"))
    softmax_head(models)
    data_files(out / "data")
    edge_files(out / "data")
    files = sorted(p for p in out.rglob("*") if p.is_file())
    for p in files:
        print(f"{p.relative_to(out)}: {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
