"""The worker's one door to JavaScript: the only module of the package that imports ``js`` and
``pyodide`` (a test checks it). It holds the worker's state (``STATE``) and its messages to the
page (``post``, ``post_transfer``), and turns bytes into JS buffers and back. Runs only in
Pyodide.

Every handler module reads and writes ``STATE`` and answers through ``post``; none keeps
state of its own about the run.
"""

from urllib.parse import parse_qs

import js
from pyodide.ffi import create_proxy, to_js

from ..engine.errors import UserError

# "device": the GPU device (``boot``); "trainer": the run being set up or trained; "stop" /
# "pause": asked before the trainer exists; "selfcheck": this worker's self-check result;
# "model": the model of the latest run; "last": {"trainer", "model", "untrained"} of the
# latest run once set up (or of `prepare`: untrained), kept after `done` for the live views
# (views.py); "runs": how many `start`s this worker had (a `prepare` set up after a `start`
# does not replace its model); "prepare_id": the latest `prepare`'s id
STATE = {"device": None, "trainer": None, "stop": False, "pause": False, "selfcheck": None,
         "model": None, "last": None, "runs": 0, "prepare_id": None}


def post(kind: str, **fields):
    """postMessage({type: kind, ...fields}) to the page."""
    js.postMessage(to_js({"type": kind, **fields}, dict_converter=js.Object.fromEntries))


def post_transfer(kind: str, buffers: dict, **fields):
    """postMessage({type: kind, ...fields, ...buffers}) transferring the ArrayBuffers of
    ``buffers`` (name -> bytes) instead of copying them."""
    bufs = {k: array_buffer(v) for k, v in buffers.items()}
    msg = to_js({"type": kind, **fields}, dict_converter=js.Object.fromEntries)
    for k, b in bufs.items():
        setattr(msg, k, b)
    js.postMessage(msg, to_js(list(bufs.values())))


def array_buffer(data: bytes):
    """``data`` copied into a new JS ArrayBuffer."""
    arr = js.Uint8Array.new(len(data))
    arr.assign(data)
    return arr.buffer


def float32_array(data: bytes):
    """float32 bytes as a JS Float32Array (a copy)."""
    return js.Float32Array.new(array_buffer(data))


def uint8_array(data: bytes):
    """bytes as a JS Uint8Array (a copy)."""
    return js.Uint8Array.new(array_buffer(data))


def to_bytes(value) -> bytes:
    """An ArrayBuffer / TypedArray from JavaScript (a JsProxy or, after ``to_py``, a
    memoryview) as bytes."""
    if hasattr(value, "byteLength") and hasattr(value, "to_py"):
        return js.Uint8Array.new(value).to_bytes()
    return bytes(value)


class HttpError(UserError, RuntimeError):
    """A response that is not ok: ``status``, ``url``; the message names what was fetched,
    the status, the URL and the start of the answer."""

    def __init__(self, message: str, status: int, url: str):
        super().__init__(message)
        self.status, self.url = status, url


async def fetch(url: str, what: str):
    """``fetch(url)``'s response; HttpError (a RuntimeError) naming ``what``, the status and
    the URL when it is not ok."""
    resp = await js.fetch(url)
    if not resp.ok:
        text = await resp.text()
        raise HttpError(f"{what}: HTTP {resp.status} from {url}: {text[:200]}", resp.status,
                        url)
    return resp


async def fetch_bytes(url: str, what: str, total: int, progress):
    """The body of ``url`` (``total`` bytes, from the manifest) as a JS Uint8Array, read in
    the chunks the network delivers; ``progress(loaded)`` after each. RuntimeError as
    ``fetch``, or naming the sizes when the body is not ``total`` bytes."""
    resp = await fetch(url, what)
    out = js.Uint8Array.new(total)
    reader, loaded = resp.body.getReader(), 0
    while True:
        part = await reader.read()
        if part.done:
            break
        n = int(part.value.byteLength)
        if loaded + n > total:
            await reader.cancel()
            raise RuntimeError(f"{what}: {url} sent more than the manifest's {total:,} bytes")
        out.set(part.value, loaded)
        loaded += n
        progress(loaded)
    if loaded != total:
        raise RuntimeError(f"{what}: {url} sent {loaded:,} bytes, the manifest says {total:,}")
    return out


def page_query() -> str:
    """The worker's URL query (``?test=1`` allows the test hooks)."""
    return str(js.location.search)


def test_hooks_allowed() -> bool:
    """Whether the worker was started with ``test=1`` in its query (the page does that when its
    own URL has it): the parameter itself, not a substring (``?notest=1``, ``?test=10``)."""
    return parse_qs(page_query().lstrip("?")).get("test") == ["1"]


def on_settled(promise, callback) -> None:
    """Call ``callback(value)`` when the JS ``promise`` resolves (the callback's proxy lives
    as long as the promise needs it)."""
    promise.then(create_proxy(callback))


def nulls_to_none(value):
    """JS null arrives as pyodide's JsNull (not None) in recent Pyodide: map it to None."""
    if isinstance(value, dict):
        return {k: nulls_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nulls_to_none(v) for v in value]
    return None if type(value).__name__ == "JsNull" else value
