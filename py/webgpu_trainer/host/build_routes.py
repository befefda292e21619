"""``POST /api/models/build``: the page's layer list (onnx_io.build_spec) checked as the user
types, and, with ``"save": true``, built into a model the uploads keep (docs/ARCHITECTURE.md,
"Server routes").

Body ``{"layers": [...], "input": [C, H, W] or [F], "classes": K, "save": bool}`` (JSON, 64 KB,
32 levels: ``host/bodies.py``). Answer (200 whether or not the layers are valid):
``{"ok", "rows": [{"index", "op", "label", "shape", "params", "macs"}], "totals": {"params",
"macs", "layers"}, "errors": [{"layer", "field", "message"}], "spec", "output"}``; without
errors also ``"name"`` (what ``save`` names it); with ``save`` also ``"summary"``: the
model ``built-<hash>`` (the same
layers for the same shapes give the same name), written to the uploads only after it imports
and plans like an upload. 400 for a body that is not such an object, or whose field is missing
or of the wrong JSON type (``input`` not a list, ``classes`` not a whole number, ``layers`` not
a list, ``save`` not a boolean: ``body_problems``); values of the right type that do not fit
(an input [1, 2], 1 class, a layer's field) are the 200's ``errors``.
"""
from __future__ import annotations

import json
import secrets

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .bodies import read_json
from .errors import ApiError, import_error, problems

KEYS = ("layers", "input", "classes", "save")
EXPECTED = {  # field -> (its JSON type's test, what it must be)
    "layers": (lambda v: isinstance(v, list), 'a list of layers [{"op": ...}, ...]'),
    "input": (lambda v: isinstance(v, list), "the samples' shape, a list of whole numbers: "
                                             "images [C, H, W] or table rows [F]"),
    "classes": (lambda v: isinstance(v, int) and not isinstance(v, bool),
                "the dataset's class count, a whole number 2..4096"),
    "save": (lambda v: isinstance(v, bool), "true or false"),
}
MAX_BUILT = 64  # built-* models kept in the uploads; the oldest go first


def _write(models, chk, name: str) -> dict:
    """Build ``chk``'s model, check it as an upload is checked, keep it as ``name``; returns
    its bundle graph. ApiError 400 when it does not import or plan (a bug, not user input)."""
    from ..engine.graph import Graph, GraphError
    from ..onnx_io import load_bundle
    from ..onnx_io.build import build_model
    data, _ = build_model(chk.spec, chk.input, chk.classes)
    models.uploads.mkdir(parents=True, exist_ok=True)
    tmp = models.uploads / f".build-{secrets.token_hex(8)}.onnx"
    try:
        tmp.write_bytes(data)
        try:
            graph, _ = load_bundle(tmp)
            Graph(graph).shapes(2)
        except ValueError as exc:
            raise import_error(f"{name}.onnx", exc, str(tmp)) from exc
        except (GraphError, NotImplementedError) as exc:
            raise ApiError(400, f"{name}.onnx cannot be trained: {exc}", problems(exc)) from exc
        _evict(models.uploads, MAX_BUILT - 1)
        tmp.replace(models.uploads / f"{name}.onnx")
    finally:
        tmp.unlink(missing_ok=True)
    return graph


def _evict(folder, keep: int) -> None:
    """Remove the oldest ``built-*.onnx`` (by modification time) beyond ``keep``: a saved list
    of 200 bytes may write 64 MB (16 M parameters), so the count is what bounds the disk."""
    old = sorted(folder.glob("built-*.onnx"), key=lambda p: p.stat().st_mtime)
    for path in old[:max(0, len(old) - keep)]:
        path.unlink(missing_ok=True)


def _json(value) -> str:
    """``value`` as JSON (null, "3"), at most 40 characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text):,} characters)"


def body_problems(body: dict) -> list:
    """One line per field of ``body`` that is missing (``save`` may be) or not of its JSON
    type, naming the field and what it must be; [] when each has its type."""
    found = []
    for key, (ok, expected) in EXPECTED.items():
        if key not in body:
            if key != "save":
                found.append(f"{key}: missing: expected {expected}")
        elif not ok(body[key]):
            found.append(f"{key}: expected {expected}; got {_json(body[key])}")
    return found


def build_handler(models):
    """The route's handler for ``models`` (host.model_routes.Models)."""

    async def build(request: Request) -> Response:
        from ..onnx_io.build_spec import check, model_name  # standard library: no onnx
        body = await read_json(request, "the layer list")
        if not isinstance(body, dict):
            raise ApiError(400, "the layer list: expected an object {\"layers\": [...], "
                                "\"input\": [...], \"classes\": K}")
        unknown = [str(k)[:40] for k in body if k not in KEYS]
        if unknown:
            raise ApiError(400, f"the layer list: unknown field(s) {', '.join(unknown[:5])} "
                                f"(fields: {', '.join(KEYS)})")
        found = body_problems(body)
        if found:
            raise ApiError(400, "the layer list: " + "; ".join(found), found)
        chk = check(body.get("layers"), body.get("input"), body.get("classes"))
        out = {"ok": not chk.errors, "rows": chk.rows, "totals": chk.totals(),
               "errors": chk.errors, "spec": chk.spec, "output": chk.output}
        if chk.errors:
            return JSONResponse(out)
        name = out["name"] = model_name(chk)  # what "save" would name it
        if body.get("save") is not True:
            return JSONResponse(out)
        from ..engine.tools.summary import summarize
        path = models.uploads / f"{name}.onnx"
        if path.is_file():  # uploads cannot take a built- name (model_routes.upload_name)
            graph = (await run_in_threadpool(models.bundle, path))[0]
        else:
            graph = await run_in_threadpool(_write, models, chk, name)
        out.update(name=name, summary=summarize(graph))
        return JSONResponse(out)

    return build
