"""One run configuration for the CLI, the server, the page and the trainers (standard library
only: the browser worker imports it under Pyodide).

- ``schema.py``: every option declared once as data (``FIELDS``, ``PRESETS``, ``schema()``,
  the JSON the page builds its form from);
- ``validate.py``: ``parse(dict, train_images=N, classes=C) -> RunConfig``, the one validator
  (``ConfigError`` lists every ``(field, message)``), ``upgrade`` (earlier config.json files);
- ``run.py``: ``RunConfig`` (``to_json`` for config.json, ``trainer_config`` for the trainers,
  ``updated`` for ``--resume``) and ``steps`` (steps per epoch, total steps).

Example::

    >>> from webgpu_trainer.engine import config
    >>> cfg = config.parse({"optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
    ...                     "scheduler": "onecycle"}, train_images=60000)
    >>> cfg["total_steps"], cfg.steps(60000)
    (859, (859, 859))
    >>> config.parse({"seed": 1.5})
    Traceback (most recent call last):
    ConfigError: seed: must be an integer in [0, 4,294,967,295], got 1.5
"""

from . import schema as schema_mod
from .run import RunConfig, steps, train_used
from .schema import (BY_NAME, FIELDS, GROUPS, LOSSES, OPTIMIZERS, PRESETS, SCHEDULERS, Field,
                     applies, default_for, describe, schema)
from .validate import ConfigError, parse, replace, resume_with, upgrade

__all__ = ["BY_NAME", "FIELDS", "GROUPS", "LOSSES", "OPTIMIZERS", "PRESETS", "SCHEDULERS",
           "ConfigError", "Field", "RunConfig", "applies", "default_for", "describe", "parse",
           "replace", "resume_with", "schema", "schema_mod", "steps", "train_used", "upgrade"]
