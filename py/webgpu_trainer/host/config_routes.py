"""The run configuration's routes (docs/ARCHITECTURE.md, "Server routes"): the kernel
playground's presets, the configuration's schema, and a configuration checked by the engine's
validator against the data and the model."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .bodies import JSON_LIMIT, parse_json, read_body
from .errors import ApiError

BODY_KEYS = ("config", "model")  # what POST /api/config/validate's body holds
MAX_UNKNOWN = 3                  # unknown keys named one by one; the rest are only counted


def unknown_body_keys(body: dict) -> list:
    """``[[key, message]]`` for each top-level key of a validate body that is not one of
    ``BODY_KEYS`` (before: ignored, so ``{"confg": {...}}`` was "ok" with the defaults): the
    first ``MAX_UNKNOWN`` named (cut, ``validate.shown``), with the closest known key when
    one is close (difflib) or, for a setting's name, where it belongs (inside "config"); the
    rest counted."""
    import difflib

    from ..engine.config import BY_NAME
    from ..engine.config.validate import shown
    bad = [k for k in body if k not in BODY_KEYS]
    errors = []
    for key in bad[:MAX_UNKNOWN]:
        name = shown(key)[1:-1] if len(key) <= 40 else shown(key)
        if key in BY_NAME:
            hint = (f"; {name} is a setting: send it inside \"config\" "
                    f"({{\"config\": {{\"{name}\": ...}}}})")
        else:
            close = difflib.get_close_matches(key, BODY_KEYS, n=1, cutoff=0.6)
            hint = f" (did you mean \"{close[0]}\"?)" if close else ""
        errors.append([name, f"unknown key of the body{hint}; it takes \"config\" and "
                             "\"model\""])
    if len(bad) > MAX_UNKNOWN:
        rest = len(bad) - MAX_UNKNOWN
        errors.append(["body", f"{rest:,} more unknown key{'s' * (rest != 1)} (not listed)"])
    return errors


class RunConfigRoutes:
    """``models``: the model lookup (``model_routes.Models``); ``train_images(name)``: the
    training split's size of the config's dataset (``data_routes.Datasets.train_images``);
    ``manifest(name)``: that dataset's manifest or None (``Datasets.fit_manifest``);
    ``missing(name)``: why the server cannot train on dataset ``name``, or None
    (``Datasets.missing``)."""

    def __init__(self, models, train_images, manifest=lambda name: None,
                 missing=lambda name: None):
        self.models, self.train_images, self.manifest = models, train_images, manifest
        self.missing = missing

    def routes(self) -> list:
        return [
            Route("/api/kernels", self.kernels),
            Route("/api/config/schema", self.config_schema),
            Route("/api/config/validate", self.config_validate, methods=["POST"]),
        ]

    def kernels(self, request: Request) -> Response:
        from ..engine.tools import playground
        return JSONResponse(playground.presets())

    def config_schema(self, request: Request) -> Response:
        from ..engine import config
        return JSONResponse(config.schema())

    def misfit(self, model: str, dataset) -> str | None:
        """Why model ``model`` cannot train on the config's dataset (``data.check_model_fits``:
        input vs sample shape, outputs vs classes), or None (it fits, or there is nothing to
        check: no manifest, a model that cannot be planned, which the model list names). Also
        the classroom's check of a session (``app.state.model_misfit``)."""
        from ..engine.graph import Graph, GraphError
        from ..engine.train.data import DataSpec, check_model_fits
        manifest = self.manifest(dataset)
        if manifest is None:
            return None
        try:
            graph = Graph(self.models.bundle(self.models.path(model))[0])
            check_model_fits(graph, DataSpec.from_manifest(manifest))
        except ApiError:
            return None
        except (GraphError, NotImplementedError, KeyError, IndexError, TypeError):
            return None
        except ValueError as exc:
            return str(exc)
        return None

    async def config_validate(self, request: Request) -> Response:
        """Body ``{"config": {...}, "model": name?}``: the run configuration checked by the
        engine's validator (``config.parse``) against the training images of the config's
        dataset (and the model's classes when ``model`` is given); a dataset the server does not
        have is answered first, alone, as the "dataset" field's error, then a model that does
        not fit that dataset as the "model" field's error. Answers ``{"ok": true,
        "config": resolved config, "steps": {"per_epoch", "total", "train_images",
        "val_images"}}`` or
        ``{"ok": false, "errors": [[field, message], ...]}`` (200 both: a bad config is an
        answer, not a failed request; so is a ``model`` the server does not have); 400 when
        the body is not such an object (or not JSON,
        or nested too deeply), 413 over ``JSON_LIMIT`` bytes. A top-level key other than
        "config" and "model" is an error of its own (``unknown_body_keys``), listed first."""
        body = parse_json(await read_body(request, JSON_LIMIT, "the body") or b"{}")
        if not isinstance(body, dict) or not isinstance(body.get("config", {}), dict):
            raise ApiError(400, 'body must be {"config": {...}, "model": name}')
        unknown = unknown_body_keys(body)
        answer = self._validate(body)
        if unknown:  # named first, with whatever else the check found
            return JSONResponse({"ok": False, "errors": unknown + answer.get("errors", [])})
        return JSONResponse(answer)

    def _validate(self, body: dict) -> dict:
        """``config_validate``'s answer for the body's "config" and "model"."""
        from ..engine import config
        model = body.get("model")
        if model is not None:  # a name the server has (a path or an object is no model)
            try:
                self.models.path(model if isinstance(model, str) else "")
            except ApiError as exc:
                why = exc.message if isinstance(model, str) else "must be a model's name"
                return {"ok": False, "errors": [["model", why]]}
        cfg_in = body.get("config") or {}
        dataset = cfg_in.get("dataset") if isinstance(cfg_in, dict) else None
        gone = self.missing(dataset) if isinstance(dataset, str) else None
        if gone:  # the fit and the counts would be the default dataset's: name this first
            return {"ok": False, "errors": [["dataset", gone]]}
        misfit = self.misfit(model, dataset) if isinstance(model, str) else None
        if misfit:  # before the batch size: a model that cannot fit is no batch problem
            return {"ok": False, "errors": [["model", misfit]]}
        images = self.train_images(dataset)
        classes = self.models.classes(model) if isinstance(model, str) else None
        try:
            cfg = config.parse(cfg_in, train_images=images, classes=classes)
        except config.ConfigError as exc:
            return {"ok": False, "errors": [list(e) for e in exc.errors]}
        per_epoch, total = cfg.steps(images)
        used = config.train_used(cfg, images)
        return {"ok": True, "config": cfg.to_json(),
                "steps": {"per_epoch": per_epoch, "total": total, "train_images": used,
                          "val_images": cfg["val_images"]}}
