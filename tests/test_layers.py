"""The package's folders are its layers (docs/ARCHITECTURE.md): the import graph of every module
of py/webgpu_trainer, read with ``ast`` (function-local imports included, nothing imported), has
no circle and points one way; engine/'s root holds only the compiler; only the worker's bridge
(and the Pyodide device backend) touches JavaScript; the engines and devices implement the
``Engine`` and ``Device`` protocols."""

import ast
import inspect
import pathlib
import sys

import pytest

from webgpu_trainer.cpu.cpu_engine import CpuEngine
from webgpu_trainer.engine.backends.device import Device
from webgpu_trainer.engine.train.engine import Engine
from webgpu_trainer.engine.train.gpu_engine import GpuEngine

PKG = pathlib.Path(__file__).resolve().parents[1] / "py" / "webgpu_trainer"
# engine/'s root: the compiler, and the layers built on it as folders
COMPILER = {"__init__.py", "builder.py", "errors.py", "fusion.py", "graph.py", "init.py",
            "plan.py", "pool.py"}
ENGINE_FOLDERS = {"backends", "config", "ops", "rewrites", "tools", "train"}
# an import may only point to a lower rank (or inside its own layer)
RANK = {"webgpu_trainer": 0, "engine": 1, "engine.train": 2, "engine.tools": 3, "cpu": 4,
        "onnx_io": 4, "worker": 5, "host": 5, "cli": 6, "__main__": 7}  # python -m: the CLI
JS_MODULES = {"js", "pyodide"}
JS_ALLOWED = {"webgpu_trainer.worker.bridge", "webgpu_trainer.engine.backends.webgpu_js"}


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(root: pathlib.Path = PKG) -> tuple:
    """``(modules: {name: path}, imports: {name: {imported module}}, external: {name: {top-level
    name outside the package}})`` of every .py file under ``root``. ``from P import x`` counts
    as an import of ``P.x`` when that is a module, else of ``P``."""
    mods = {_name(p): p for p in root.rglob("*.py")}
    imports, external = {}, {}
    for name, path in mods.items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        inside, outside = set(), set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = base.split(".")[:len(base.split(".")) - node.level + 1]
                    target = ".".join(parts + ([node.module] if node.module else []))
                else:
                    target = node.module
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                           for a in node.names]
            else:
                continue
            for t in targets:
                (inside if t.split(".")[0] == "webgpu_trainer" else outside).add(t)
        imports[name], external[name] = inside, {t.split(".")[0] for t in outside}
    return mods, imports, external


MODS, IMPORTS, EXTERNAL = _graph()


def _circles(imports: dict) -> list:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in imports.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1 or v in imports.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(imports):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "webgpu_trainer"
    if parts[0] == "engine" and len(parts) > 1 and parts[1] in ("train", "tools"):
        return f"engine.{parts[1]}"
    return parts[0]


def test_the_graph_reads_every_kind_of_import():
    """The reader itself: relative, absolute, function-local and ``from P import module``."""
    assert "webgpu_trainer.engine.train.optim" in IMPORTS["webgpu_trainer.cpu.optim"]
    assert "webgpu_trainer.engine.tools.summary" in IMPORTS["webgpu_trainer.cli.commands"]
    assert "webgpu_trainer.engine.backends.webgpu_js" in IMPORTS["webgpu_trainer.engine.backends"]
    assert "webgpu_trainer.engine.config" in IMPORTS["webgpu_trainer.engine.train.loop"]
    assert {"js", "pyodide"} <= EXTERNAL["webgpu_trainer.worker.bridge"]
    assert len(MODS) > 100


def test_circles_are_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"a"}}) == [["a"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert _circles(IMPORTS) == []


def test_imports_point_one_way():
    wrong = sorted(f"{m} -> {t}" for m, ts in IMPORTS.items() for t in ts
                   if t in MODS and _layer(m) != _layer(t)
                   and RANK[_layer(t)] >= RANK[_layer(m)])
    assert wrong == []


def test_engine_root_holds_only_the_compiler():
    root = PKG / "engine"
    files = {p.name for p in root.iterdir() if p.is_file()}
    folders = {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert (files, folders) == (COMPILER, ENGINE_FOLDERS)


def test_engine_needs_only_the_standard_library():
    """engine/ runs in Pyodide: no numpy, no onnx; JavaScript only in its Pyodide backend."""
    stdlib = sys.stdlib_module_names
    found = {m: sorted(e - stdlib) for m, e in EXTERNAL.items()
             if m.startswith("webgpu_trainer.engine") and e - stdlib}
    assert found == {"webgpu_trainer.engine.backends.webgpu_js": ["js", "pyodide"],
                     "webgpu_trainer.engine.backends.wgpu_native": ["wgpu"]}


def test_only_the_bridge_touches_javascript():
    touching = {m for m, e in EXTERNAL.items() if e & JS_MODULES}
    assert touching == JS_ALLOWED
    worker = {m for m in MODS if m.startswith("webgpu_trainer.worker")}
    assert worker & touching == {"webgpu_trainer.worker.bridge"}


def test_nothing_imports_the_worker():
    users = {m for m, ts in IMPORTS.items() if not m.startswith("webgpu_trainer.worker")
             and any(t.startswith("webgpu_trainer.worker") for t in ts)}
    assert users == set()


def test_only_classroom_mode_imports_the_classroom():
    """host/classroom/ (classroom mode) is built on the host, not the other way: the dataset
    code and the trainer's routes import nothing of it (before: the datasets' hidden-character
    check came from classroom/names.py; it is host/text.py now); only its CLI command does."""
    classroom = "webgpu_trainer.host.classroom"
    users = {m for m, ts in IMPORTS.items() if not m.startswith(classroom)
             and any(t.startswith(classroom) for t in ts)}
    assert users == {"webgpu_trainer.cli.classroom"}


def _members(protocol) -> dict:
    """``{method name: parameter names}`` of a Protocol's methods."""
    return {n: list(inspect.signature(f).parameters) for n, f in vars(protocol).items()
            if inspect.isfunction(f) and not n.startswith("_")}


@pytest.mark.parametrize("make", [lambda: GpuEngine(None), CpuEngine], ids=["gpu", "cpu"])
def test_engines_implement_the_engine_protocol(make):
    engine = make()
    for name, params in _members(Engine).items():
        method = getattr(engine, name, None)
        assert method is not None, f"{type(engine).__name__} lacks {name}"
        assert ["self", *inspect.signature(method).parameters] == params, name
        assert inspect.iscoroutinefunction(method) == \
            inspect.iscoroutinefunction(getattr(Engine, name)), name
    for attr in ("optim", "dev", "memory_bytes"):  # before build (a property: on the class)
        assert hasattr(engine, attr) or hasattr(type(engine), attr), \
            f"{type(engine).__name__} lacks {attr}"


def _class_methods(path: pathlib.Path, cls: str) -> dict:
    """``{method: (parameter names, async)}`` of class ``cls`` in ``path``, read with ast (the
    Pyodide backend cannot be imported in CPython)."""
    node = next(n for n in ast.parse(path.read_text()).body
                if isinstance(n, ast.ClassDef) and n.name == cls)
    return {f.name: ([a.arg for a in f.args.args], isinstance(f, ast.AsyncFunctionDef))
            for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("backend", ["wgpu_native", "webgpu_js"])
def test_devices_implement_the_device_protocol(backend):
    got = _class_methods(PKG / "engine" / "backends" / f"{backend}.py", "Device")
    for name, params in _members(Device).items():
        assert name in got, f"{backend}.Device lacks {name}"
        assert got[name] == (params, inspect.iscoroutinefunction(getattr(Device, name))), name
    source = (PKG / "engine" / "backends" / f"{backend}.py").read_text()
    for attr in ("self.info =", "self.is_cpu =", "self.allocated ="):
        assert attr in source, f"{backend}.Device never sets {attr[5:-2]}"
