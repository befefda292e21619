"""The op cases: one list per op family, in ``tests/cases/<family>.py`` named after
``py/webgpu_trainer/engine/ops/<family>.py`` (plus ``plan``: views, in-place ReLU, gradient
accumulation; ``optim``: optimizer steps). Each module defines ``CASES``, a list of ``Case``.

A case is a tiny model (its bundle dict ``graph`` and weight blob ``blob``: nodes, tensors,
constants, input shape), an input batch and labels drawn from a seeded generator, and how to
run and compare it. The same case runs
- natively: ``harness.check_case(device, case)`` (tests/test_ops_<family>.py) runs one step on
  the native GPU and on the float64 numpy engine and compares the loss, the output, the
  activations ``acts``, the activation gradients ``dacts``, every parameter gradient and the
  running statistics, with the tolerances of tests/conftest.py;
- in the browser: ``case.parity()`` is a case of ``engine/tools/parity.py``; tests/test_parity.py
  runs it in Pyodide on the browser's WebGPU and natively, and compares the two;
- in the GPU self-check (``webgpu-trainer doctor``, the page before training): the cases marked
  ``selfcheck`` against float64 references (``selfcheck_cases``, scripts/make_selfcheck.py).
"""

import importlib
from dataclasses import dataclass, field

import numpy as np

from conftest import f32, make_graph
from webgpu_trainer.engine.tools.parity import b64

# Every family with a case list, in the order the browser runs them.
FAMILIES = ("activation", "batchnorm", "binary", "conv", "dropout", "gather", "gemm",
            "layernorm", "layout", "losses", "matmul", "pool", "reduction", "rnn", "softmax",
            "unary", "views", "resize", "plan", "optim")


@dataclass(eq=False)
class Case:
    """One model, input and labels, and how to run and compare it (see the module docstring).

    ``tag``: the row of the measured-errors table (an op type); ``train``: one training step
    (forward, loss, backward), else the eval forward only; ``step`` / ``seed``: the step's
    uniform (Dropout masks); ``loss``: a loss spec of ops/losses.py (None: auto);
    ``init_seed``: re-initialise the weights on the GPU first (Plan.init_weights);
    ``optimizer`` / ``steps``: optimizer steps (browser parity and the self-check; the native
    optimizers are checked against torch in tests/test_optim.py); ``patch``: Builder class
    attributes set while the native plan is built (e.g. a smaller REDUCE_CHUNK; such cases do not
    run in the browser); ``zero_grads``: parameters whose gradient is zero in exact arithmetic (a
    bias before a BatchNorm: only rounding noise is compared, see ``harness.compare``);
    ``checks``: extra assertions ``f(res, want)`` after the comparison;
    ``browser``: False keeps a case out of the browser (say why where it is set);
    ``selfcheck``: one of the GPU self-check's cases (``selfcheck_cases``);
    ``fuse_all_attention``: fold attention into FusedAttention at this small size (parity's
    case key; natively a ``patch`` of ``Builder.ATTENTION_MIN_ROWS`` 0).
    """
    id: str
    graph: dict
    blob: bytes
    x: np.ndarray
    labels: np.ndarray
    tag: str = ""
    acts: tuple = ()
    dacts: tuple = ()
    train: bool = True
    step: int = 1
    seed: int = 0
    loss: object = None
    init_seed: int | None = None
    optimizer: dict | None = None
    steps: int = 1
    zero_grads: tuple = ()
    patch: dict = field(default_factory=dict)
    checks: tuple = ()
    browser: bool = True
    selfcheck: bool = False
    fuse_all_attention: bool = False

    def __post_init__(self):
        if self.fuse_all_attention:
            self.patch = {**self.patch, "ATTENTION_MIN_ROWS": 0}

    @property
    def name(self) -> str:
        """The id without the family (the test id inside its family's test file)."""
        return self.id.split("/", 1)[1]

    @property
    def output(self) -> str:
        return self.graph["outputs"][0]["name"]

    def parity(self) -> dict:
        """This case as a case of ``webgpu_trainer.engine.tools.parity`` (JSON-able; the key
        ``fuse_all_attention`` only where it is set)."""
        extra = {"fuse_all_attention": True} if self.fuse_all_attention else {}
        return {"name": self.id, "graph": self.graph, "weights": b64(self.blob),
                "x": b64(f32(self.x).tobytes()),
                "labels": b64(np.asarray(self.labels, "<u4").tobytes()),
                "batch": len(self.labels), "steps": self.steps, "step": self.step,
                "optimizer": self.optimizer, "train": self.train, "seed": self.seed,
                "loss": self.loss, "init_seed": self.init_seed, **extra}


def case(id, nodes, tensors, x, labels, constants=None, opset=17, output=None, input_dims=None,
         **opts) -> Case:
    """A Case of the model ``nodes`` / ``tensors`` ([(name, array, "param" | "buffer")]) /
    ``constants``; its input "input" has the dims of ``x`` with the batch first (or
    ``input_dims``, a str dim being the batch); its output is ``output`` (default: the last
    node's first output). ``opts`` are Case fields."""
    x = f32(x)
    output = output or nodes[-1]["outputs"][0]
    dims = input_dims or ["N"] + list(x.shape[1:])
    graph, blob = make_graph(nodes, tensors, [("input", dims)], [(output, ["N"])],
                             constants=constants, name=id.replace("/", "_"))
    graph["opset"] = opset
    return Case(id, graph, blob, x, np.asarray(labels, np.int64), **opts)


def by_id(cases, name) -> Case:
    """The case of ``cases`` whose name (the id without the family) is ``name``."""
    found = [c for c in cases if c.name == name]
    assert len(found) == 1, f"{name}: {len(found)} cases"
    return found[0]


def ids(cases) -> list:
    return [c.name for c in cases]


def family(name):
    """The module tests/cases/<name>.py."""
    return importlib.import_module(f"cases.{name}")


def browser_cases(name) -> list:
    """The cases of family ``name`` that run in the browser: all of its ``CASES`` but those
    with ``browser=False`` (a patched Builder). All of them fit: the ~510 cases take ~50 s in
    headless Chromium on SwiftShader (2 cores); a family that outgrows that would pick a
    deterministic subset here."""
    return [c for c in family(name).CASES if c.browser]


def selfcheck_cases() -> list:
    """The GPU self-check's cases (engine/tools/selfcheck.py, ``webgpu-trainer doctor``): the cases
    marked ``selfcheck`` (at least one per op family, BatchNorm's running statistics, Dropout,
    the GPU weight init, every optimizer), as ``engine/tools/parity.py`` cases. Their float64
    references are committed in engine/tools/selfcheck.json: after changing one, run
    scripts/make_selfcheck.py (tests/test_selfcheck.py fails until then)."""
    return [c.parity() for name in FAMILIES for c in family(name).CASES if c.selfcheck]
