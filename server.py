#!/usr/bin/env python3
"""Thin server entry: ``python server.py [--port N] [--host H]`` (PORT env also works).

Prepares MNIST if needed (cached), builds the app from ``webgpu_trainer.host.server`` and runs
uvicorn on 127.0.0.1 (default port 8000), printing the URL. Works from a source checkout
without installing the package. Same options as ``webgpu-trainer serve``; never opens a browser.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "py"))

from webgpu_trainer.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["serve", "--no-open", *sys.argv[1:]]))
