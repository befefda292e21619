"""``webgpu-trainer summary``'s text table of ``summary.summarize``'s dict (``format_summary``)."""

from __future__ import annotations


def _shape_text(shape) -> str:
    return "-" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _si(n: int) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return str(n)


def format_summary(s: dict) -> str:
    """``summary.summarize``'s dict as a text table (torchinfo-like): one row per layer (name,
    op, output shape for one sample, parameters, multiply-adds, "yes" / "no" / "partly" for
    whether its parameters train), then the totals, the head, the loss, every initializer that
    does not train with the reason, and the import's notes."""
    trains = {t["name"]: t["trainable"] for t in s["tensors"] if t["role"] == "param"}
    rows = []
    for layer in s["layers"]:
        owned = [trains[n] for n in layer["tensors"] if n in trains]
        mark = "" if not owned else "yes" if all(owned) else "no" if not any(owned) \
            else "partly"
        rows.append((layer["name"], layer["op"], _shape_text(layer["output_shape"]),
                     f"{layer['params']:,}" if layer["params"] else "-",
                     f"{layer['macs']:,}" if layer["macs"] else "-", mark))
    head = ("Layer", "Op", "Output shape", "Params", "Mult-adds", "Trainable")
    widths = [max(len(r[k]) for r in rows + [head]) for k in range(len(head))]
    right = (False, False, False, True, True, False)

    def line(r):
        return "  ".join(v.rjust(w) if ra else v.ljust(w)
                         for v, w, ra in zip(r, widths, right)).rstrip()
    rule = "-" * len(line(tuple("x" * w for w in widths)))
    t = s["totals"]
    inp = s["input"]
    about = ", ".join(x for x in (f"opset {s['opset']}" if s.get("opset") else "",
                                  s.get("producer") or "") if x)
    out = [f"{s.get('name') or 'model'}" + (f" ({about})" if about else "")
           + f"; input {inp['name']!r} {_shape_text(inp['shape'])}",
           rule, line(head), rule, *(line(r) for r in rows), rule]
    width = len(f"{max(t['params'], t['macs']):,}")
    out += [f"Total params:      {t['params']:>{width},}",
            f"Trainable params:  {t['trainable']:>{width},}",
            f"Frozen params:     {t['frozen']:>{width},}",
            f"Buffers:           {t['buffers']:>{width},}  (BatchNorm running statistics)",
            f"Mult-adds:         {t['macs']:>{width},}  per sample ({_si(t['macs'])})",
            "Shapes and mult-adds for one sample (batch 1).",
            f"Head (--head-only): {', '.join(s['head']) or '-'}"]
    loss = s.get("loss")
    if loss:
        why = f", the model ends in {loss['final_op']}" if loss["final_op"] else ""
        out.append(f"Loss{f' (auto{why})' if loss['auto'] else ''}: {loss['text']}")
    rest = s.get("not_trained") or []
    if rest:
        out.append(f"Not trained ({len(rest)} initializer{'s' if len(rest) != 1 else ''}):")
        out += [f"  {x['name']} {_shape_text(x['shape'])}: {x['reason']}" for x in rest]
    mem = s.get("memory")
    if mem:
        parts = ", ".join(f"{k} {v / 2 ** 20:.2f}" for k, v in mem["parts"].items())
        out.append(f"GPU memory at batch {mem['batch']}: {mem['bytes'] / 2 ** 20:.2f} MiB "
                   f"({parts}); largest buffer {mem['largest']['name']!r} "
                   f"{mem['largest']['bytes']:,} bytes")
        if mem["max_batch"] is not None:
            out.append(f"Largest batch that fits: {mem['max_batch']}")
    for note in s.get("notes") or []:
        out.append(f"Note: {note}")
    return "\n".join(out)
