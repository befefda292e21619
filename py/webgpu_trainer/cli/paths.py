"""Where the command line finds the source tree (models/, scripts/, .cache/)."""

from pathlib import Path


def repo_root() -> Path:
    """The source tree (``<root>/py/webgpu_trainer/cli/paths.py``) when this is a checkout
    (it holds pyproject.toml), else the current directory."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() else Path.cwd()
