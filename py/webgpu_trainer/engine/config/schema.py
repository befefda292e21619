"""Every option of a training run, declared once as data (standard library only: runs in Pyodide).

A ``Field`` states a config key (torch's keyword name where torch has one), its type, default,
limits, unit, help text, which optimizer / scheduler / loss it belongs to and whether it may
change on ``--resume``. The CLI's flags (``cli/options.py``), the page's form (``web/form.js``,
through ``GET /api/config/schema``) and the validator (``validate.py``) are all built from
``FIELDS``; ``PRESETS`` are the page's preset buttons.

Types: ``int``, ``float`` (finite in float32, which the GPU packs; an int is accepted),
``bool``, ``choice`` (one of ``choices``), ``str`` (matching the regular expression
``pattern``) and ``list`` (of ``item`` "float" or "str", ``length``
items when fixed). ``default=None`` means off / every parameter (``nullable``), or, with
``auto``, a value derived from the run (resolved with the data size, see ``validate.resolve``).
"""

from __future__ import annotations

from dataclasses import dataclass, field as _field

OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "adagrad": "AdaGrad",
              "rmsprop": "RMSprop", "adadelta": "Adadelta"}
# the --scheduler name -> torch.optim.lr_scheduler's class (config.json of older runs: the class)
SCHEDULERS = {"none": None, "steplr": "StepLR", "exponential": "ExponentialLR",
              "cosine": "CosineAnnealingLR", "onecycle": "OneCycleLR"}
LOSSES = {"auto": "auto (from the model's last op)", "cross_entropy": "CrossEntropyLoss",
          "nll": "NLLLoss", "nll_log": "NLLLoss of log(Softmax output)",
          "mse": "MSELoss (one-hot)", "bce_with_logits": "BCEWithLogitsLoss (one-hot)"}
DATASET_NAME = "[a-z0-9][a-z0-9_-]{0,39}"  # a dataset's folder under the data root
MNIST_TRAIN, MNIST_TEST = 60000, 10000
MNIST_VAL = 5000  # validation images held out of the training split by default
# Static bounds on the counts, for any dataset; a run checks them against its dataset's split
# sizes (validate.resolve), naming both.
MAX_IMAGES = 10_000_000  # training / validation / test images a run may use
MAX_BATCH = 65_536       # images per step
REPORT_MAX = 32  # half of plan.METRICS_RING: the GPU keeps 64 steps of metrics between reads;
# also report_every's default: a readback drains the GPU's queue (H100, batch 64: every 10 steps
# cost 15-20% of a step's time, every 32 4-6%; results/2026-12-07-h100-s41-readbacks.json)
SEED_MAX = 2 ** 32 - 1
INT_MAX = 10 ** 9  # counts without a natural bound (steps, epochs between decays): fit an i32
F32_MAX = 3.4028234663852886e38  # the largest float32: every float field, and what the GPU packs
F32_TINY = 1.1754943508222875e-38  # the smallest normal float32 (a smaller lr would be 0 there)

# Groups in the order the CLI's --help and the page show them.
GROUPS = {"run": "run", "optimizer": "optimizer (torch.optim's names and defaults)",
          "schedule": "learning-rate schedule (torch.optim.lr_scheduler)",
          "loss": "loss (torch.nn.functional's criteria)",
          "finetune": "fine-tuning (which parameters train; the rest stay frozen)"}


@dataclass(frozen=True)
class Field:
    """One option. ``optimizers`` / ``schedulers`` / ``losses``: the choices it belongs to
    (empty: all); ``defaults``: per-optimizer defaults overriding ``default``; ``min_open`` /
    ``max_open``: the bound itself is excluded; ``required_by``: schedulers that need a value
    (``default`` None); ``resume``: may change on ``--resume``; ``where``: "cli" and / or "page";
    ``stored``: kept in config.json (the fine-tuning inputs are stored as ``trainable``);
    ``flag``: the CLI flag when not ``--name-with-dashes``; ``advanced``: the page's Advanced
    section; ``zero``: what 0 means (e.g. "whole epochs"); ``label``: the page's label."""

    name: str
    type: str
    default: object
    help: str
    group: str
    label: str = ""
    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False
    choices: tuple = ()
    pattern: str = ""
    item: str = ""
    length: int = 0
    unit: str = ""
    optimizers: tuple = ()
    schedulers: tuple = ()
    losses: tuple = ()
    defaults: dict = _field(default_factory=dict)
    auto: str = ""
    nullable: bool = False
    required_by: tuple = ()
    resume: bool = True
    where: tuple = ("cli", "page")
    stored: bool = True
    flag: str = ""
    metavar: str = ""
    advanced: bool = False
    zero: str = ""

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.lower().replace("_", "-")

    @property
    def html_id(self) -> str:
        return self.name.lower().replace("_", "-")


F = Field
_EPOCH = ("steplr", "exponential", "cosine")
_ADAM = ("adam", "adamw")
FIELDS = (
    # ---------------------------------------------------------------- run
    F("optimizer", "choice", "adam", "the optimizer (torch.optim)", "optimizer",
      label="Optimizer", choices=tuple(OPTIMIZERS), resume=False),
    F("lr", "float", 1e-3, "learning rate (torch's default of each optimizer)", "optimizer",
      label="Learning rate", min=0, min_open=True,
      defaults={"adagrad": 1e-2, "rmsprop": 1e-2, "adadelta": 1.0}),
    F("batch_size", "int", 64, "images per step; BatchNorm needs at least 2, and the last "
      "incomplete batch of an epoch is dropped", "run", label="Batch size", min=2,
      max=MAX_BATCH, unit="images", resume=False),
    F("epochs", "int", 1, "passes over the training images", "run", label="Epochs", min=1,
      max=1000, unit="epochs"),
    F("seed", "int", 0, "seeds the init, the data order and dropout", "run", label="Seed",
      min=0, max=SEED_MAX, resume=False),
    F("dataset", "str", "mnist", "the dataset to train on: the NAME of a prepared dataset "
      "under the data root (webgpu-trainer datasets lists them)", "run", label="Dataset",
      pattern=DATASET_NAME, flag="--data", metavar="NAME", resume=False),
    F("init", "choice", "scratch", "scratch: PyTorch's default init; finetune: start from "
      "the model's weights", "run", label="Weights", choices=("scratch", "finetune")),
    F("max_steps", "int", 0, "stop after this many steps (0 = whole epochs)", "run",
      label="Max steps", min=0, max=10 ** 9, unit="steps", advanced=True,
      zero="whole epochs"),
    F("train_images", "int", 0, "train on the first N training images (0 = all but the "
      "validation images)", "run", label="Training images", min=0, max=MAX_IMAGES,
      unit="images", resume=False, advanced=True, zero="all but the validation images"),
    F("val_images", "int", MNIST_VAL, "hold out the last N training images for validation "
      "after each epoch (MNIST's usual 55,000 / 5,000 split; by default at most a tenth of "
      "the training images; 0 = no validation)", "run",
      label="Validation images", min=0, max=MAX_IMAGES, unit="images", resume=False,
      advanced=True, zero="no validation"),
    F("eval_images", "int", MNIST_TEST, "measure the final accuracy on the first N test "
      "images (by default at most the dataset's test images)", "run", label="Test images",
      min=1, max=MAX_IMAGES, unit="images",
      advanced=True),
    F("report_every", "int", REPORT_MAX, "steps between metric readbacks (each one waits "
      "for the GPU's queue to drain)", "run", min=1, max=REPORT_MAX, unit="steps",
      where=("cli",)),
    F("checkpoint_every_s", "float", 60.0, "also save a checkpoint every N seconds of "
      "training inside an epoch, resumed exactly (0 = at the end of each epoch only; the page "
      "also saves one on Stop)", "run", label="Checkpoint every", min=0, max=86400, unit="s",
      advanced=True, zero="at the end of each epoch only"),
    F("augment_crop", "int", 0, "pad each training image with N pixels of value 0 on every "
      "side, then crop it back to its size at a random place, as torchvision's "
      "RandomCrop(size, padding=N) (0 = off; images only, ignored for tables)", "run",
      label="Random crop padding", min=0, max=32, unit="pixels", advanced=True, zero="off"),
    F("augment_flip", "bool", False, "flip each training image left-right with probability "
      "0.5, as torchvision's RandomHorizontalFlip() (off for digits; images only, ignored for "
      "tables)", "run", label="Random horizontal flip", advanced=True),
    F("device", "choice", "gpu", "gpu (wgpu-py) or cpu (the numpy engine, float32)", "run",
      choices=("gpu", "cpu"), where=("cli",)),
    # ---------------------------------------------------------------- optimizer
    F("momentum", "float", 0.0, "momentum factor", "optimizer", label="Momentum", min=0,
      max=1, max_open=True, optimizers=("sgd", "rmsprop")),
    F("dampening", "float", 0.0, "dampening for momentum", "optimizer", label="Dampening",
      min=0, max=1, optimizers=("sgd",)),
    F("nesterov", "bool", False, "Nesterov momentum (needs momentum > 0, dampening 0)",
      "optimizer", label="Nesterov", optimizers=("sgd",)),
    F("weight_decay", "float", 0.0, "L2 penalty (AdamW: decoupled weight decay)", "optimizer",
      label="Weight decay", min=0, defaults={"adamw": 1e-2}),
    F("betas", "list", [0.9, 0.999], "coefficients of the running averages of the gradient "
      "and its square", "optimizer", label="Betas", item="float", length=2, min=0, max=1,
      max_open=True, optimizers=_ADAM, metavar="BETA"),
    F("eps", "float", 1e-8, "term added to the denominator", "optimizer", label="Epsilon",
      min=0, min_open=True, optimizers=_ADAM + ("rmsprop", "adagrad", "adadelta"),
      defaults={"adagrad": 1e-10, "adadelta": 1e-6}),
    F("amsgrad", "bool", False, "the AMSGrad variant", "optimizer", label="AMSGrad",
      optimizers=_ADAM),
    F("alpha", "float", 0.99, "smoothing constant", "optimizer", label="Alpha", min=0, max=1,
      optimizers=("rmsprop",)),
    F("centered", "bool", False, "normalise by the estimated variance of the gradient",
      "optimizer", label="Centered", optimizers=("rmsprop",)),
    F("rho", "float", 0.9, "coefficient of the running averages", "optimizer", label="Rho",
      min=0, max=1, optimizers=("adadelta",)),
    F("lr_decay", "float", 0.0, "learning-rate decay", "optimizer", label="LR decay", min=0,
      optimizers=("adagrad",)),
    F("initial_accumulator_value", "float", 0.0, "initial value of the sum of squares",
      "optimizer", label="Initial accumulator", min=0, optimizers=("adagrad",)),
    F("clip_grad_norm", "float", 0.0, "clip gradients to this global L2 norm, as "
      "torch.nn.utils.clip_grad_norm_ (0 = off)", "optimizer", label="Clip grad norm",
      min=0, metavar="MAX", advanced=True, zero="off"),
    # ---------------------------------------------------------------- schedule
    F("scheduler", "choice", "none", "learning-rate schedule: StepLR, ExponentialLR, "
      "CosineAnnealingLR (per epoch) or OneCycleLR (per batch)", "schedule",
      label="Scheduler", choices=tuple(SCHEDULERS)),
    F("step_size", "int", 1, "epochs between decays", "schedule", label="Step size", min=1,
      max=INT_MAX, unit="epochs", schedulers=("steplr",)),
    F("gamma", "float", None, "decay factor", "schedule", label="Gamma", min=0, min_open=True,
      schedulers=("steplr", "exponential"), defaults={"steplr": 0.1},
      required_by=("exponential",)),
    F("T_max", "int", None, "epochs (steps with interval step) from lr to eta_min", "schedule",
      label="T_max", min=1, max=INT_MAX, schedulers=("cosine",),
      auto="the epochs (x steps per epoch with interval step)"),
    F("eta_min", "float", 0.0, "minimum learning rate", "schedule", label="eta_min", min=0,
      schedulers=("cosine",)),
    F("interval", "choice", "epoch", "step the schedule once per epoch (torch's usual "
      "loop) or once per batch", "schedule", label="Step the schedule per",
      choices=("epoch", "step"), schedulers=_EPOCH, flag="--scheduler-interval"),
    F("max_lr", "float", None, "peak learning rate", "schedule", label="Max lr", min=0,
      min_open=True, schedulers=("onecycle",), auto="the learning rate"),
    F("total_steps", "int", None, "steps in the cycle (max_steps only stops early)",
      "schedule", label="Total steps", min=1, max=INT_MAX, unit="steps",
      schedulers=("onecycle",), auto="epochs x steps per epoch"),
    F("pct_start", "float", 0.3, "fraction of the cycle raising the lr", "schedule",
      label="pct_start", min=0, max=1, schedulers=("onecycle",)),
    F("anneal_strategy", "choice", "cos", "annealing", "schedule", label="Anneal",
      choices=("cos", "linear"), schedulers=("onecycle",)),
    F("div_factor", "float", 25.0, "initial lr = max_lr / div_factor", "schedule",
      label="div_factor", min=0, min_open=True, schedulers=("onecycle",)),
    F("final_div_factor", "float", 1e4, "final lr = initial lr / final_div_factor",
      "schedule", label="final_div_factor", min=0, min_open=True, schedulers=("onecycle",)),
    F("three_phase", "bool", False, "three phases (fastai's two otherwise)", "schedule",
      label="Three phases", schedulers=("onecycle",)),
    F("cycle_momentum", "bool", True, "cycle momentum / Adam's beta1 inversely to the lr "
      "(needs an optimizer with momentum or beta1)", "schedule", label="Cycle momentum",
      schedulers=("onecycle",)),
    F("base_momentum", "float", 0.85, "momentum / beta1 at the peak lr", "schedule",
      label="Base momentum", min=0, max=1, schedulers=("onecycle",)),
    F("max_momentum", "float", 0.95, "momentum / beta1 at the ends of the cycle", "schedule",
      label="Max momentum", min=0, max=1, schedulers=("onecycle",)),
    # ---------------------------------------------------------------- loss
    F("loss", "choice", "auto", "the training loss; auto: nll after a final LogSoftmax, "
      "nll_log (NLL of log(output)) after a final Softmax, else cross_entropy", "loss",
      label="Loss function",
      choices=tuple(LOSSES)),
    F("reduction", "choice", "mean", "mean or sum over the batch", "loss", label="Reduction",
      choices=("mean", "sum")),
    F("label_smoothing", "float", 0.0, "label smoothing", "loss", label="Label smoothing",
      min=0, max=1, losses=("auto", "cross_entropy", "nll_log"), metavar="F"),
    F("class_weights", "list", None, "one weight per class, comma-separated", "loss",
      label="Class weights", item="float", min=0, nullable=True,
      losses=("auto", "cross_entropy", "nll", "nll_log"), metavar="W0,W1,..."),
    # ---------------------------------------------------------------- fine-tuning
    F("trainable", "list", None, "train only these parameters (initializer names; the rest "
      "stay frozen)", "finetune", item="str", nullable=True,
      metavar="NAME[,NAME...]"),
    F("freeze", "list", None, "train all but these parameters; a name may be a prefix, e.g. "
      "conv1. (conv1.weight and conv1.bias)", "finetune", item="str", nullable=True,
      where=("cli",), stored=False, metavar="NAME[,NAME...]"),
    F("head_only", "bool", False, "train only the classifier head (the last Conv / Gemm / "
      "MatMul and the layers after it; see `webgpu-trainer summary`)", "finetune",
      where=("cli",), stored=False),
)
del F
BY_NAME = {f.name: f for f in FIELDS}
FINETUNE = ("trainable", "freeze", "head_only")  # one of them at most

PRESETS = {
    "seed": {"label": "Seed recipe", "description": "AdaGrad · lr 1.0 · batch 1000 · 8 epochs",
             "config": {"optimizer": "adagrad", "lr": 1.0, "batch_size": 1000, "epochs": 8,
                        "init": "scratch"}},
    "fast": {"label": "Fast default", "description": "Adam · lr 0.001 · batch 64 · 1 epoch",
             "config": {"optimizer": "adam", "lr": 1e-3, "batch_size": 64, "epochs": 1,
                        "init": "scratch"}},
}


def default_for(f: Field, optimizer: str | None = None, scheduler: str | None = None):
    """The default of ``f`` under the chosen optimizer / scheduler (None: off or derived)."""
    value = f.defaults.get(optimizer, f.defaults.get(scheduler, f.default))
    return list(value) if isinstance(value, list) else value


def applies(f: Field, choices: dict) -> bool:
    """Whether ``f`` belongs to the optimizer / scheduler / loss in ``choices``."""
    return ((not f.optimizers or choices.get("optimizer") in f.optimizers)
            and (not f.schedulers or choices.get("scheduler") in f.schedulers)
            and (not f.losses or choices.get("loss") in f.losses))


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10000 else f"{x:g}"


def describe(f: Field) -> str:
    """The allowed values of ``f`` in words, e.g. "an integer in [2, 60,000]", "a number > 0",
    "one of cos, linear"."""
    if f.type == "choice":
        return "one of " + ", ".join(f.choices)
    if f.type == "bool":
        return "true or false"
    if f.type == "str":
        return f"a name matching {f.pattern}"
    if f.type == "list":
        what = "names" if f.item == "str" else "numbers"
        count = f"{f.length} {what}" if f.length else f"a list of {what}"
        bounds = _bounds(f, "each")
        return count + (f", {bounds}" if bounds else "")
    return ("an integer" if f.type == "int" else "a number") + \
        (" " + _bounds(f, "") if _bounds(f, "") else "")


def _bounds(f: Field, each: str) -> str:
    lo, hi = f.min, f.max
    pre = f"{each} " if each else ""
    if lo is not None and hi is not None:
        return f"{pre}in {'(' if f.min_open else '['}{_num(lo)}, {_num(hi)}" \
               f"{')' if f.max_open else ']'}"
    if lo is not None:
        return f"{pre}{'>' if f.min_open else '>='} {_num(lo)}"
    if hi is not None:
        return f"{pre}{'<' if f.max_open else '<='} {_num(hi)}"
    return ""


def schema() -> dict:
    """The schema as JSON (``GET /api/config/schema``): fields with ``range`` (``describe``)
    and ``id`` (the page's element id), groups, the choices' labels, presets."""
    fields = []
    for f in FIELDS:
        d = {k: v for k, v in f.__dict__.items() if v not in ((), "", {}, None) or
             k in ("default", "min", "max")}
        d.update(range=describe(f), id=f.html_id, flag=f.cli_flag, where=list(f.where))
        for k in ("choices", "optimizers", "schedulers", "losses", "required_by"):
            if k in d:
                d[k] = list(d[k])
        fields.append(d)
    labels = {"optimizer": OPTIMIZERS, "scheduler": {k: v or "none" for k, v in
                                                     SCHEDULERS.items()},
              "loss": LOSSES, "init": {"scratch": "Train from scratch",
                                       "finetune": "Fine-tune"}}
    notes = {"init": {"scratch": "PyTorch default init",
                      "finetune": "start from the model’s weights"}}
    return {"format": "webgpu-trainer/config-schema@1", "fields": fields,
            "groups": [{"name": k, "title": v} for k, v in GROUPS.items()],
            "labels": labels, "notes": notes,
            "presets": [{"name": k, **v} for k, v in PRESETS.items()]}
