"""``webgpu-trainer data`` (prepare MNIST, Fashion-MNIST or a dataset from a source) and
``webgpu-trainer datasets`` (list the prepared ones). The work is ``host/datasets``'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..host import data as data_mod
from ..host.datasets import idx, prepare_source, store, tokens
from ..host.datafiles import DataError


def add_data(sub) -> argparse.ArgumentParser:
    """Register ``data`` and its options."""
    p = sub.add_parser(
        "data", help="prepare a dataset: MNIST (no arguments; idempotent), Fashion-MNIST "
                     "(--fashion-mnist) or your own / CIFAR (--source PATH)",
        description="Prepare a dataset once (checked, checksummed shards and a manifest under "
                    "the data root). --source takes: a folder or .zip of photos, one subfolder "
                    "per class (PNG, JPEG, WebP, BMP; --size, --color, --test, --seed); "
                    "CIFAR-10 / CIFAR-100 as downloaded (folder or .tar.gz, binary or python "
                    "version); four IDX files (MNIST-style, any image size); a CSV table "
                    "(a label column and numeric features; --label, --test, --seed).")
    p.add_argument("--source", type=Path, default=None,
                   help="a folder or .zip of photos (one subfolder per class); a folder or "
                        ".tar.gz of CIFAR-10/100 as downloaded (binary or python version); "
                        "four IDX files of any image size (train/t10k images and labels, raw "
                        "or .gz; idx3 [N,H,W] or idx4 [N,C,H,W]; class names in an optional "
                        "classes.txt); a .csv table; or two CSV files of 28x28 digits")
    p.add_argument("--label", default=None, metavar="COLUMN",
                   help="CSV tables: the label column, by header name or index from 0 "
                        "(negative from the end; default: the column named label, class or "
                        "target, else the last)")
    p.add_argument("--size", type=int, default=None, metavar="PIXELS",
                   help="photos: resize each to PIXELS x PIXELS (8-256; default 32)")
    p.add_argument("--color", choices=("grey", "rgb", "auto"), default=None,
                   help="photos: grey, rgb or auto (RGB when any image has colour; default)")
    p.add_argument("--test", type=float, default=None, metavar="FRACTION",
                   help="photos and CSV tables: the fraction of each class held out as the "
                        "test split (default 0.2)")
    p.add_argument("--seed", type=int, default=None,
                   help="photos and CSV tables: the seed of the test split (default 0)")
    p.add_argument("--fashion-mnist", action="store_true",
                   help=f"prepare Fashion-MNIST from {idx.FASHION_DIR} (Debian's "
                        "dataset-fashion-mnist; skipped when already prepared)")
    p.add_argument("--markers", action="store_true",
                   help="generate 'markers', a small synthetic tokens dataset (rows of 16 "
                        "token ids of 32; the label: which of 4 marker tokens appears most)")
    p.add_argument("--name", default=None,
                   help="dataset name (lowercase letters, digits, - or _; default: the source's "
                        "own: mnist, fashion-mnist, cifar10, cifar100, else from its file name, "
                        "which never replaces an existing dataset: give --name to replace one)")
    p.add_argument("--data-root", type=Path, default=None,
                   help="where datasets live (default <repo>/.cache/datasets; one folder each)")
    p.add_argument("--cache", type=Path, default=None,
                   help="(older form) write 28x28 digits from --source, or MNIST, into this "
                        "one folder instead of <data root>/<name>")
    return p


def _fashion_ready(folder: Path) -> bool:
    """Whether ``folder`` already holds Fashion-MNIST (manifest, shard sizes, original md5s)."""
    try:
        m = store.read_manifest(folder)
    except DataError:
        return False
    return all(m["splits"][s][p].get("idx_md5") == md5 for (s, p), md5 in idx.FASHION_MD5.items())


READ_OPTIONS = ("label", "size", "color", "test", "seed")


def _prepare(args) -> dict:
    root = args.data_root or store.default_root()
    options = {k: getattr(args, k) for k in READ_OPTIONS if getattr(args, k, None) is not None}
    if options and (args.source is None or args.cache is not None):
        raise DataError(f"--{next(iter(options))} applies to --source (photos or a CSV "
                        "table) only")
    if args.markers:
        if args.source is not None or args.fashion_mnist or args.cache is not None:
            raise DataError("give --markers alone (with --name / --data-root at most)")
        return store.write_dataset(root, args.name or "markers", tokens.markers(),
                                   lambda s: print(f"[data] {s}", flush=True))
    if args.cache is not None or (args.source is None and not args.fashion_mnist):
        if args.name not in (None, "mnist"):
            raise DataError("--name needs --source or --fashion-mnist (MNIST is 'mnist')")
        return data_mod.prepare(args.cache or root / "mnist", args.source)
    if args.fashion_mnist and args.source is not None:
        raise DataError("give --fashion-mnist or --source, not both")
    source = args.source or idx.FASHION_DIR
    if args.fashion_mnist:
        folder = root / (args.name or "fashion-mnist")
        if not source.is_dir():
            raise DataError(f"{source} not found: install Debian's dataset-fashion-mnist "
                            "(sudo apt-get install dataset-fashion-mnist)")
        if _fashion_ready(folder):
            print(f"[data] cache ok: {folder} (Fashion-MNIST)")
            return store.read_manifest(folder)
    manifest, _ = prepare_source(source, root, args.name,
                                 lambda s: print(f"[data] {s}", flush=True), **options)
    return manifest


def data(args) -> int:
    """Prepare the dataset the options name; 1 with ``error: ...`` (never a traceback)."""
    try:
        m = _prepare(args)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # an unreadable file or folder: never a traceback
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{k} {v['count']}" for k, v in m["splits"].items())
    what = ("MNIST" if m.get("dataset", "MNIST") == "MNIST" else
            "Your dataset" if m.get("dataset") == "own" else m.get("title", m.get("name")))
    shape = "x".join(map(str, m.get("sample_shape", [1, 28, 28])))
    print(f"{what} ready ({counts}; {shape}, {len(m.get('classes', range(10)))} classes) "
          f"from {m['source']}")
    return 0


def add_datasets(sub) -> argparse.ArgumentParser:
    """Register ``datasets`` and its option."""
    p = sub.add_parser("datasets", help="list the prepared datasets (name, shape, classes, "
                                        "counts, size)")
    p.add_argument("--data-root", type=Path, default=None,
                   help="where datasets live (default <repo>/.cache/datasets)")
    return p


def table(rows: list[dict]) -> str:
    """The ``datasets`` table of ``list_datasets`` summaries."""
    head = ["name", "title", "kind", "shape", "classes", "train", "test", "size"]
    body = [[r["name"], r["title"], r["kind"], "x".join(map(str, r["sample_shape"])),
             str(len(r["classes"])), f"{r['train']:,}", f"{r['test']:,}",
             f"{r['bytes'] / 1e6:.1f} MB"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    right = {4, 5, 6, 7}
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths))).rstrip()
                     for line in [head, *body])


def datasets(args) -> int:
    """Print the table of the prepared datasets, then the folders that fail their checks
    under "invalid", each with the reason (``store.scan_root``)."""
    root = args.data_root or store.default_root()
    rows, invalid = store.scan_root(root)
    if not rows:
        print(f"no datasets in {root}: run `webgpu-trainer data` (MNIST), `webgpu-trainer "
              "data --fashion-mnist` or `webgpu-trainer data --source PATH`")
    else:
        print(table(rows))
    if invalid:
        print(f"invalid ({len(invalid)}; not usable: prepare them again or remove them):")
        for name, why in invalid:
            print(f"  {name}: {why}")
    return 0


COMMANDS = {"data": (add_data, data), "datasets": (add_datasets, datasets)}
