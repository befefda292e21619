"""Write tests/fixtures/init.json: PyTorch's default initialisation of the modules the engine
initialises itself, as torch defines it (tests/test_loop.py compares ``engine/init.py``'s rules
with it, without torch).

For each reference module (SeedNet of scripts/make_seednet.py; a Linear -> LayerNorm -> Linear
MLP, the pattern the dynamo exporter writes as MatMul + Add; a grouped Conv2d) and each of its
parameters and buffers: ``{"kind": "uniform", "bound": b}`` when torch's ``reset_parameters``
draws it from U(-b, b), or ``{"kind": "fill", "value": v}`` when it sets every element to v.
The bound is computed with torch's own helpers exactly as ``kaiming_uniform_(a=sqrt(5))`` (the
weight) and ``reset_parameters`` (the bias: 1 / sqrt(fan_in)) compute it, and the script checks
that a module built under a seed holds exactly what those calls draw under the same seed, and
that 200 draws stay within the bound and reach 98% of it. Only this script needs torch:
``python scripts/make_init_fixture.py``.
"""

import json
import math
import pathlib
import sys

import torch
from torch import nn
from torch.nn import init

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "init.json"
sys.path.insert(0, str(ROOT / "scripts"))
from make_seednet import SeedNet  # noqa: E402


class LinearLayerNorm(nn.Module):
    """784 -> Linear(48) -> LayerNorm(48) -> ReLU -> Linear(10)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 48)
        self.ln = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 10)


class GroupedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, groups=2)


MODELS = {"seednet": SeedNet, "linear_layernorm": LinearLayerNorm, "grouped_conv": GroupedConv}


def _bounds(module):
    """(weight bound, bias bound) of a Conv / Linear as its reset_parameters computes them."""
    w = module.weight
    fan_in, _ = init._calculate_fan_in_and_fan_out(w)
    gain = init.calculate_gain("leaky_relu", math.sqrt(5))
    return math.sqrt(3.0) * (gain / math.sqrt(fan_in)), 1 / math.sqrt(fan_in)


def _check_draws(module_type, make, bound_w, bound_b):
    """The module's values are kaiming_uniform_(a=sqrt(5)) / uniform_(+-bound) draws."""
    torch.manual_seed(7)
    m = make()
    torch.manual_seed(7)
    w, b = torch.empty_like(m.weight), torch.empty_like(m.bias)
    init.kaiming_uniform_(w, a=math.sqrt(5))
    init.uniform_(b, -bound_b, bound_b)
    assert torch.equal(w, m.weight) and torch.equal(b, m.bias), module_type
    top_w = top_b = 0.0
    for seed in range(200):
        torch.manual_seed(seed)
        m = make()
        top_w = max(top_w, m.weight.abs().max().item())
        top_b = max(top_b, m.bias.abs().max().item())
    ulp = 1 + 2.0 ** -23  # the bound as float32 may round up
    assert 0.98 * bound_w < top_w <= bound_w * ulp and 0.98 * bound_b < top_b <= bound_b * ulp, \
        (module_type, top_w, bound_w, top_b, bound_b)


def describe(model: nn.Module) -> dict:
    out = {}
    for prefix, module in model.named_modules():
        name = (prefix + ".") if prefix else ""
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            bw, bb = _bounds(module)
            if isinstance(module, nn.Conv2d):
                args = (module.in_channels, module.out_channels, module.kernel_size)
                _check_draws(prefix, lambda a=args, g=module.groups: nn.Conv2d(*a, groups=g),
                             bw, bb)
            else:
                args = (module.in_features, module.out_features)
                _check_draws(prefix, lambda a=args: nn.Linear(*a), bw, bb)
            out[name + "weight"] = {"kind": "uniform", "bound": bw}
            out[name + "bias"] = {"kind": "uniform", "bound": bb}
        elif isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
            tensors = dict(module.named_parameters())
            tensors.update((k, v) for k, v in module.named_buffers() if k != "num_batches_tracked")
            for key, t in tensors.items():
                values = set(t.detach().reshape(-1).tolist())
                assert len(values) == 1, (name + key, values)
                out[name + key] = {"kind": "fill", "value": values.pop()}
    return out


def main() -> int:
    doc = {"torch": torch.__version__, "made_by": "scripts/make_init_fixture.py",
           "models": {name: describe(cls()) for name, cls in MODELS.items()}}
    lines = [json.dumps({k: v for k, v in doc.items() if k != "models"})[:-1] + ', "models": {']
    for m, (model, tensors) in enumerate(doc["models"].items()):
        lines.append(f" {json.dumps(model)}: {{")
        lines += [f"  {json.dumps(name)}: {json.dumps(spec)}" + ("," if k < len(tensors) - 1
                                                                 else "")
                  for k, (name, spec) in enumerate(tensors.items())]
        lines.append(" }" + ("," if m < len(doc["models"]) - 1 else ""))
    OUT.write_text("\n".join(lines) + "\n}}\n")
    json.loads(OUT.read_text())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
