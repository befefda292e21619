"""Where the command line finds the source tree (models/, scripts/, .cache/), and the set-up
both servers (``serve``, ``classroom``) share."""

import sys
from pathlib import Path


def repo_root() -> Path:
    """The source tree (``<root>/py/webgpu_trainer/cli/paths.py``) when this is a checkout
    (it holds pyproject.toml), else the current directory."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() else Path.cwd()


def prepare_serving(data_dir, source):
    """Before a server starts: the MNIST (or own) shards in ``data_dir`` (default cache) from
    ``source`` and their gzip copies (checked by this process, so it serves them from the first
    request), and the engine wheel in ``<repo>/.cache/wheels``. Returns ``(root, data_dir,
    wheels_dir)``, or None after printing the data error (the caller exits 1)."""
    from ..host import data as data_mod
    from ..host.shard_gzip import prepare_copies
    from ..host.wheel import ensure_wheel
    root = repo_root()
    data_dir = data_dir or data_mod.default_cache_dir()
    try:
        data_mod.prepare(data_dir, source)
    except data_mod.DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    prepare_copies(data_dir)
    wheels_dir = root / ".cache" / "wheels"
    ensure_wheel(wheels_dir, root)
    return root, data_dir, wheels_dir


def add_serving_args(p) -> None:
    """The options both servers (``serve``, ``classroom``) take: --data-dir, --data-root,
    --models-dir, --source (the arguments of ``prepare_serving`` and the models folder)."""
    p.add_argument("--data-dir", type=Path, default=None,
                   help="MNIST cache (default <repo>/.cache/datasets/mnist)")
    p.add_argument("--data-root", type=Path, default=None,
                   help="prepared datasets, one folder each (default <repo>/.cache/datasets)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="folder of .onnx models (default <repo>/models)")
    p.add_argument("--uploads-dir", type=Path, default=None,
                   help="folder of the models uploaded from the page (default "
                        "<repo>/.cache/uploads)")
    p.add_argument("--source", type=Path, default=None,
                   help="MNIST IDX/CSV folder to build the cache from (see `data`)")
