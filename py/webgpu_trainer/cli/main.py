"""``webgpu-trainer`` command line: ``serve`` (and ``bench``, added by its owner; ``data`` and
``datasets`` live in datasets.py).

Each subcommand is an ``add_<name>(subparsers)`` that registers its arguments plus a handler
``<name>(args) -> int`` (exit status); ``COMMANDS`` maps names to both, so adding a command is
one line there.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import webbrowser

from . import classroom as classroom_cmd, commands, datasets as datasets_cmd, doctor
from .paths import add_serving_args, prepare_serving, repo_root


# ---------------------------------------------------------------- serve

def add_serve(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="prepare MNIST, then serve the page on 127.0.0.1")
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; WebGPU needs a secure context, "
                        "which plain http is only on localhost)")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)),
                   help="port (default $PORT or 8000)")
    add_serving_args(p)
    p.add_argument("--no-open", action="store_true", help="do not open a browser")
    return p


def _can_open_browser() -> bool:
    """Only GUI sessions: on a bare console webbrowser may start a text browser (lynx, w3m)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def serve(args) -> int:
    import uvicorn

    from ..host.server import create_app

    ready = prepare_serving(args.data_dir, args.source)
    if ready is None:
        return 1
    root, data_dir, wheels_dir = ready
    app = create_app(root, args.models_dir or root / "models", data_dir, wheels_dir,
                     uploads_dir=args.uploads_dir, data_root=args.data_root)
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{shown}:{args.port}"
    print(f"webgpu-trainer: serving on {url}  (Ctrl+C to stop)", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("note: other machines reach plain http://, where browsers give no WebGPU (not a "
              "secure context); for a class use `webgpu-trainer classroom --host 0.0.0.0` "
              "(HTTPS, join URL + QR, teacher dashboard)", flush=True)
    if not args.no_open and _can_open_browser():
        threading.Timer(1.0, lambda: webbrowser.open(url)).start()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


# ---------------------------------------------------------------- bench

def _bench_script():
    """``benchmarks/run.py`` of the source tree as a module (None outside a checkout)."""
    import importlib.util
    path = repo_root() / "benchmarks" / "run.py"
    if not path.is_file():
        return None
    if str(path.parent) not in sys.path:  # its siblings (browser, cpu, native, ...)
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("webgpu_trainer_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def add_bench(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("bench", help="SeedNet and GEMM speed: the engine in headless Chromium "
                                     "beside jax-js and TensorFlow.js, natively, and on numpy "
                                     "beside PyTorch CPU (benchmarks/run.py)")
    mod = _bench_script()
    return mod.add_arguments(p) if mod else p


def bench(args) -> int:
    mod = _bench_script()
    if mod is None:
        print("error: benchmarks/run.py not found (run from a source checkout)",
              file=sys.stderr)
        return 1
    return mod.run(args)


# ---------------------------------------------------------------- registry

COMMANDS = {
    "serve": (add_serve, serve),
    **datasets_cmd.COMMANDS,  # data datasets
    "bench": (add_bench, bench),
    **commands.COMMANDS,  # train predict summary
    **doctor.COMMANDS,  # doctor
    **classroom_cmd.COMMANDS,  # classroom (HTTPS for a class: host/classroom/)
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per entry of COMMANDS."""
    parser = argparse.ArgumentParser(prog="webgpu-trainer",
                                     description="Train neural networks in the browser on WebGPU.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default sys.argv[1:]) and run the subcommand; returns its exit status."""
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command][1](args)


if __name__ == "__main__":
    sys.exit(main())
