"""Token datasets (manifest kind "tokens", standard library only): samples are ``[T]`` token
ids, int32 or uint16 little-endian shards, ``vocab_size`` in the manifest; the model's input
is int64 ``[N, T]`` read only as the indices of embedding lookups (``ops/embed.py``). The
GPU gather copies a batch's token rows as u32 ids into the input buffer
(``shaders/data_tokens.wgsl``); the numpy engine takes them as float32 ids.
"""

from .. import config as run_config
from ..backends.base import groups_1d

ITEMSIZE = {"uint8": 1, "uint16": 2, "int32": 4, "float32": 4}
TOKEN_DTYPES = ("int32", "uint16")
MAX_VOCAB = 1 << 24  # ids stay exact as the numpy engine's float32


def spec_fields(m: dict, short) -> dict:
    """``DataSpec`` keywords of a tokens manifest ``m``: its shards' ``dtype`` (int32 or
    uint16) and ``vocab_size`` (2..2**24); ValueError naming the field (``short`` cuts
    values)."""
    vocab = m.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 2 <= vocab <= MAX_VOCAB:
        raise ValueError(f"dataset manifest: vocab_size must be an integer 2..{MAX_VOCAB}, "
                         f"got {short(vocab)}")
    try:
        dtype = m["splits"]["train"]["images"]["dtype"]
    except (KeyError, TypeError):
        dtype = None
    if dtype not in TOKEN_DTYPES:
        raise ValueError(f"dataset manifest: token shards must have dtype int32 or uint16, "
                         f"got {short(dtype)}")
    return {"dtype": dtype, "vocab_size": vocab}


def lookup_rows(graph) -> list:
    """The row counts of the tables that the model's token ids index (its Gather nodes)."""
    name = graph.input["name"]
    shapes = {t: d["shape"] for t, d in graph.tensors.items()}
    return [shapes.get(n["inputs"][0], [0])[0] for n in graph.nodes
            if n["op_type"] == "Gather" and n["inputs"][1] == name]


def check_tokens(graph, spec) -> None:
    """Refuse a token model with a non-token dataset and the reverse, and a dataset whose ids
    (0..vocab_size-1) run past an embedding table (ValueError naming both)."""
    inp = graph.input
    model_tokens = inp.get("dtype", "float32") == "int64"
    if model_tokens != (spec.kind == "tokens"):
        what = "takes int64 token ids" if model_tokens else "takes float32 values"
        raise ValueError(f"model input {inp['name']!r} {what}; dataset {spec.name} gives "
                         f"{spec.describe()}: use a model whose input fits the dataset")
    if not model_tokens:
        return
    small = [r for r in lookup_rows(graph) if r < spec.vocab_size]
    if small:
        raise ValueError(f"dataset {spec.name} has token ids 0..{spec.vocab_size - 1} "
                         f"(vocab_size {spec.vocab_size}) but the model's embedding table has "
                         f"{small[0]} rows: use a table of >= {spec.vocab_size} rows")


async def gather(b, plan, spec, count, images, labels, order, out, first=0, total=None) -> None:
    """Record the gather of a batch of token rows (samples ``order[offset + b]``) into the
    model input as u32 ids, and of its labels (shaders/data_tokens.wgsl), from the chunk
    ``images``/``labels`` holding samples ``first .. first + count - 1`` of ``total``."""
    await b.kernel("data_tokens", "gather_tokens", groups_1d(plan.batch * spec.values),
                   params=dict(batch=plan.batch, values=spec.values, count=count,
                               wide=ITEMSIZE[spec.dtype] // 2 - 1, first=first,
                               total=count if total is None else total),
                   st=plan.step, images=images, labels=labels, order=order, x=out,
                   y=plan.labels)


def refuse_in_page(spec) -> None:
    """The page does not train a tokens dataset yet (its live views and Try it show images
    or features): ``ConfigError`` on the field ``dataset`` naming the dataset and the CLI
    command that trains it; nothing for other kinds."""
    if spec.kind == "tokens":
        raise run_config.ConfigError([("dataset", (
            f"{spec.name} holds token ids ({spec.describe()}); the page does not train "
            f"tokens datasets yet: train it with `webgpu-trainer train MODEL.onnx --data "
            f"{spec.name}`"))])
