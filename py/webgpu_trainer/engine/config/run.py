"""``RunConfig``: a checked run configuration (made by ``validate.parse``), its serialisation
(config.json's ``config``), the trainers' dict, the run's steps and ``--resume``'s update."""

from __future__ import annotations

from collections.abc import Mapping

from .schema import BY_NAME, FIELDS, SCHEDULERS

# torch.optim keyword arguments of each optimizer besides lr, momentum and weight_decay
_OPTIMIZER_ARGS = ("dampening", "nesterov", "betas", "eps", "amsgrad", "alpha", "centered",
                   "rho", "lr_decay", "initial_accumulator_value")
_SCHEDULE_ARGS = ("step_size", "gamma", "interval", "T_max", "eta_min", "max_lr",
                  "total_steps", "pct_start", "anneal_strategy", "div_factor",
                  "final_div_factor", "three_phase", "cycle_momentum", "base_momentum",
                  "max_momentum")


def train_used(cfg, train_images: int) -> int:
    """The images a run trains on out of ``train_images`` in the training split: the split
    minus its last ``val_images`` (the validation images), of which the first ``train_images``
    of the config when that is > 0. The one place this is computed."""
    rest = max(train_images - int(cfg.get("val_images") or 0), 0)
    return min(cfg.get("train_images") or rest, rest)


def steps(cfg, train_images: int) -> tuple[int, int]:
    """``(steps per epoch, total steps)`` of a run with ``train_images`` in the training split
    (``train_used`` of them train): the last incomplete batch of an epoch is dropped (BatchNorm
    needs full batches), ``max_steps`` > 0 caps the total. The one place this is computed."""
    per_epoch = train_used(cfg, train_images) // max(int(cfg["batch_size"]), 1)
    total = per_epoch * int(cfg["epochs"])
    if int(cfg.get("max_steps") or 0) > 0:
        total = min(total, int(cfg["max_steps"]))
    return per_epoch, total


class RunConfig(Mapping):
    """A checked configuration: a read-only mapping of every field that applies to the chosen
    optimizer / scheduler / loss (defaults filled in; run-dependent ones None until
    ``parse(..., train_images=N)`` resolves them). Make one with ``validate.parse``."""

    def __init__(self, values: dict):
        self._v = dict(values)

    def __getitem__(self, key):
        return self._v[key]

    def __iter__(self):
        return iter(self._v)

    def __len__(self):
        return len(self._v)

    def __repr__(self):
        return f"RunConfig({self._v!r})"

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self._v.items()}

    def to_json(self) -> dict:
        """config.json's ``config``: the stored fields, flat (``parse`` reads it back)."""
        return {f.name: self.to_dict()[f.name] for f in FIELDS
                if f.stored and f.name in self._v}

    def steps(self, train_images: int) -> tuple[int, int]:
        return steps(self, train_images)

    def trainer_config(self) -> dict:
        """The dict ``train.Trainer`` reads (on either engine): optimizer, lr,
        momentum, weight_decay, clip_grad_norm, ``optimizer_args`` (the other torch.optim
        keywords of the optimizer), ``scheduler`` (``schedulers.make``'s spec, or None),
        ``loss`` (``ops.losses``' spec), and the run's fields as they are."""
        v = self._v
        out = {k: v[k] for k in v if k not in _OPTIMIZER_ARGS + _SCHEDULE_ARGS and
               BY_NAME[k].group not in ("loss", "schedule") and BY_NAME[k].stored}
        out["momentum"] = v.get("momentum", 0.0)
        out["optimizer_args"] = {k: (tuple(v[k]) if k == "betas" else v[k])
                                 for k in _OPTIMIZER_ARGS if k in v}
        name = SCHEDULERS[v["scheduler"]]
        out["scheduler"] = None if name is None else {
            "name": name, **{k: v[k] for k in _SCHEDULE_ARGS if k in v}}
        out["loss"] = {"loss": v["loss"], "reduction": v["reduction"],
                       "label_smoothing": v.get("label_smoothing", 0.0),
                       "weight": v.get("class_weights")}
        return out
