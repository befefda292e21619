"""What the page shows for an exception from the worker (``engine.errors.user_message``): the
engine's own user-facing errors (``UserError``: the model does not fit, a graph that cannot be
planned, bad settings, a diverged run, no WebGPU, a failed fetch) as their message alone
(before: "LimitError: the model does not fit this GPU: ..."), any other exception, a bug, with
its type for the report. The worker posts every error through it."""

import ast
import pathlib

import pytest

from conftest import tiny_mlp

from webgpu_trainer.engine import config
from webgpu_trainer.engine.backends.shaders import ParamsError
from webgpu_trainer.engine.errors import GraphError, OffsetLimitError, UserError, user_message
from webgpu_trainer.engine.train import memory
from webgpu_trainer.engine.train.loop import TrainingDiverged

PKG = pathlib.Path(__file__).resolve().parents[1] / "py" / "webgpu_trainer"


def test_a_model_too_large_for_the_budget_is_said_without_the_type():
    graph = tiny_mlp(0)[0]
    est = memory.estimate(graph, 8)
    with pytest.raises(memory.LimitError) as err:
        memory.check(est, None, budget=est["bytes"] - 1)
    big = est["largest"]
    assert user_message(err.value) == (
        f"the model does not fit this GPU: the training step needs {est['bytes']:,} bytes of "
        f"GPU memory at batch 8, more than the budget of {est['bytes'] - 1:,} bytes (largest "
        f"tensor {big['name']!r}: {big['bytes']:,} bytes)")


def test_bad_settings_are_said_without_the_type():
    with pytest.raises(config.ConfigError) as err:
        config.parse({"epochs": 0})
    assert user_message(err.value) == "epochs: must be an integer in [1, 1000], got 0"


def test_an_unexpected_exception_keeps_its_type():
    """A bug: the type is part of what the user reports."""
    assert user_message(ZeroDivisionError("division by zero")) == \
        "ZeroDivisionError: division by zero"
    assert user_message(ParamsError("shader 'gemm': no field 'k'")) == \
        "ParamsError: shader 'gemm': no field 'k'"
    assert user_message(ValueError("test image index 5 is outside 0..3")) == \
        "ValueError: test image index 5 is outside 0..3"  # testset.js reads this prefix


def test_the_user_facing_classes_are_marked():
    for cls in (GraphError, OffsetLimitError, memory.LimitError, config.ConfigError,
                TrainingDiverged):
        assert issubclass(cls, UserError), cls
    assert not issubclass(ParamsError, UserError)
    # the Pyodide-only ones (js imports: read, not imported)
    marked = {}
    for path in ("engine/backends/webgpu_js.py", "worker/bridge.py", "worker/load.py"):
        for n in ast.parse((PKG / path).read_text()).body:
            if isinstance(n, ast.ClassDef):
                marked[n.name] = [ast.unparse(b) for b in n.bases]
    assert {k: marked[k] for k in ("NoWebGPU", "HttpError", "ModelGone")} == {
        "NoWebGPU": ["UserError", "RuntimeError"], "HttpError": ["UserError", "RuntimeError"],
        "ModelGone": ["UserError", "RuntimeError"]}


def test_the_worker_says_every_error_through_user_message():
    """The worker's handlers cannot run natively: no message of theirs is made by hand from an
    exception's type."""
    typed = [f"{p.name}:{i}" for p in sorted((PKG / "worker").glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if "type(exc).__name__}: {exc}" in line]
    assert typed == []
