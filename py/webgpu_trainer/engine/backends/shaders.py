"""WGSL sources: loading from the package, binding reflection, pipeline cache keys.

The ``shaders/`` folder at the repository root is the only kernel source. The wheel carries it as
``webgpu_trainer/shaders`` (see pyproject.toml); an editable checkout reads the repository folder.
Set the environment variable ``WEBGPU_TRAINER_PRINT_WGSL=1`` (or ``shaders.PRINT_WGSL = True``)
to print each shader's final WGSL when its pipeline is first built.
"""

import os
import re
from pathlib import Path

PRINT_WGSL = bool(os.environ.get("WEBGPU_TRAINER_PRINT_WGSL"))

_HERE = Path(__file__).resolve().parent
_CANDIDATES = (_HERE.parents[1] / "shaders", _HERE.parents[3] / "shaders")
_SOURCES: dict = {}

# "@group(0) @binding(3) var<storage, read_write> name" -> (3, "storage", "read_write")
_BINDING = re.compile(
    r"@group\(0\)\s*@binding\((\d+)\)\s*var<\s*(uniform|storage)\s*(?:,\s*(read_write|read))?\s*>"
)


def shader_dir() -> Path:
    """The folder that holds the ``*.wgsl`` files. Raises FileNotFoundError when none is found."""
    for folder in _CANDIDATES:
        if folder.is_dir():
            return folder
    raise FileNotFoundError(f"no shaders folder in {[str(c) for c in _CANDIDATES]}")


# "//!include detmath" on a line of its own: replaced by shaders/detmath.wgsl (once per file)
_INCLUDE = re.compile(r"^//!include (\w+)[ \t]*$", re.M)


def source(name: str) -> str:
    """WGSL text of ``shaders/<name>.wgsl`` with its ``//!include NAME`` lines replaced by
    ``shaders/NAME.wgsl`` (cached). Raises FileNotFoundError naming the file."""
    if name not in _SOURCES:
        path = shader_dir() / f"{name}.wgsl"
        if not path.is_file():
            raise FileNotFoundError(f"shader {name!r} not found at {path}")
        text = path.read_text()
        _SOURCES[name] = _INCLUDE.sub(lambda m: source(m.group(1)), text)
    return _SOURCES[name]


def bindings(name: str) -> list:
    """Bindings of group 0 in ``name``, as ``[(binding, "uniform"|"storage"|"read-only-storage")]``.

    Every entry point of one file shares this layout, so a bind group built from it fits any of
    them (WebGPU's ``layout: "auto"`` would drop bindings an entry point does not use).
    """
    out = []
    for m in _BINDING.finditer(source(name)):
        kind = m.group(2)
        if kind == "storage" and m.group(3) != "read_write":
            kind = "read-only-storage"
        out.append((int(m.group(1)), kind))
    out.sort()
    if [b for b, _ in out] != list(range(len(out))):
        raise ValueError(f"shader {name!r}: bindings must be numbered 0..n-1, got {out}")
    return out


def pipeline_key(name: str, entry: str, constants: dict | None) -> str:
    """Cache key of a compute pipeline: file, entry point and sorted override constants."""
    consts = ",".join(f"{k}={v}" for k, v in sorted((constants or {}).items()))
    return f"{name}:{entry}:{consts}"
