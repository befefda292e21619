"""The WGSL loader (engine/backends/shaders.py): includes from shaders/lib and generated preludes,
binding and ``struct Params`` reflection with the WGSL uniform layout rules, packing by field
name, and ``Builder.kernel``'s errors for fields and slots that do not fit."""

import re
import struct

import pytest

from conftest import run
from webgpu_trainer.engine import ops
from webgpu_trainer.engine.backends import shaders
from webgpu_trainer.engine.backends.shaders import ParamsError

KERNELS = sorted(p.stem for p in shaders.shader_dir().glob("*.wgsl"))


@pytest.fixture
def fake_shader(monkeypatch):
    """Install WGSL text as shader "fake" (its cached source and layout dropped afterwards)."""
    def install(text):
        monkeypatch.setitem(shaders._SOURCES, "fake", text)
        shaders._LAYOUTS.pop("fake", None)
    yield install
    shaders._LAYOUTS.pop("fake", None)


def test_known_struct_packs_to_hand_computed_bytes(fake_shader):
    # offsets by the WGSL spec: a at 0, v (vec2, align 8) at 8, w (vec3, align 16) at 16,
    # s right after w's 12 bytes at 28, rows (array, align 16, stride 16) at 32, size 64
    fake_shader("struct Params {\n  a: u32, v: vec2<f32>,  // comment, with a comma\n"
                "  w: vec3<i32>, s: f32, _pad: u32,\n  rows: array<vec4<u32>, 2>,\n}\n"
                "@group(0) @binding(0) var<uniform> p: Params;\n")
    fields, size = shaders.params_layout("fake")
    assert [(f, o) for f, _, o in fields] == [("a", 0), ("v", 8), ("w", 16), ("s", 28),
                                             ("_pad", 32), ("rows", 48)]
    assert size == 80
    got = shaders.pack("fake", {"a": 7, "v": [0.5, -2.0], "w": [-1, 2, -3], "s": 1.25,
                                "rows": [[1, 2, 3, 4], [5, 6, 7, 0xFFFFFFFF]]})
    want = (struct.pack("<I", 7) + bytes(4) + struct.pack("<2f", 0.5, -2.0)
            + struct.pack("<3i", -1, 2, -3) + struct.pack("<f", 1.25) + bytes(16)
            + struct.pack("<8I", 1, 2, 3, 4, 5, 6, 7, 0xFFFFFFFF))
    assert got == want


def test_every_kernel_params_layout_is_packed_words():
    """Every shader's Params: 4-byte fields back to back (vec4 rows at multiples of 16), a
    multiple of 16 bytes, and binding 0 is the uniform ``p: Params``."""
    for name in KERNELS:
        fields, size = shaders.params_layout(name)
        assert size % 16 == 0 and fields[0][2] == 0, name
        assert shaders.slots(name)[0][1:] == ("uniform", "p", "Params"), name


def test_missing_field_names_shader_and_field():
    with pytest.raises(ParamsError, match=r"^shader 'unary': struct Params field 'alpha' is "
                                          r"not set$"):
        shaders.pack("unary", dict(n=1, op=0, flags=0, aux=0, beta=0.0, lo=0.0, hi=0.0))


def test_unknown_field_names_shader_and_field():
    with pytest.raises(ParamsError, match=r"^shader 'elementwise': struct Params has no field "
                                          r"'count' \(fields: n, mask\)$"):
        shaders.pack("elementwise", {"n": 4, "count": 1})
    with pytest.raises(ParamsError, match="no field '_p0'"):  # padding is not settable
        shaders.pack("elementwise", {"n": 4, "_p0": 1})


@pytest.mark.parametrize("value, what", [(-1, "-1"), (1.5, "1.5"), (2 ** 32, "4294967296"),
                                         ("7", "7")])
def test_value_the_field_cannot_hold(value, what):
    with pytest.raises(ParamsError, match=rf"^shader 'elementwise': field 'n' \(u32\) cannot "
                                          rf"hold '{re.escape(what)}'$"):
        shaders.pack("elementwise", {"n": value})
    with pytest.raises(ParamsError, match=r"field 'alpha' \(f32\) cannot hold 'x'"):
        shaders.pack("unary", dict(n=1, op=0, flags=0, aux=0, alpha="x", beta=0.0, lo=0.0,
                                   hi=0.0))


def test_array_field_needs_its_length():
    fields = dict(n=1, rank=0, nred=0, total=1, chunk=1, nan_bits=0, relu=0,
                  dims=[[1, 0, 0, 0]] * 5,
                  red=[[1, 0, 0, 0]] * 6)
    with pytest.raises(ParamsError, match=r"field 'dims' \(array<vec4<u32>, 6>\) needs 6 "
                                          r"values, got 5"):
        shaders.pack("binary", fields)


def test_generated_prelude_holds_the_python_op_codes():
    """The op codes the shaders switch on are the Python tables' (typed once)."""
    src = shaders.source("unary")
    for op, code in ops.unary.CODES.items():
        assert re.search(rf"const UNARY_{op.upper()}: u32 = {code}u;", src), op
    src = shaders.source("binary")
    for op, code in ops.binary.CODES.items():
        assert f"const BINARY_{op.upper()}: u32 = {code}u;" in src, op


def test_includes_resolve_once_and_name_a_missing_one():
    text = shaders.source("loss")
    assert "//!include" not in text and text.count("fn det_exp(") == 1
    assert text.count("struct Step {") == 1 and text.count("fn flat_index(") == 1
    twice = shaders._expand("x", "//!include index\n//!include index\n", set())
    assert twice.count("fn flat_index(") == 1
    with pytest.raises(FileNotFoundError, match="shader 'nope' not found"):
        shaders.source("nope")
    with pytest.raises(FileNotFoundError, match=r"shader 'fake': //!include nolib: no "):
        shaders._expand("fake", "//!include nolib\n", set())


class _Dev:
    """Records what a Builder hands the device (no GPU). A CPU adapter unless ``is_cpu`` is
    False: the Builder's choices that depend on the adapter (``Builder.tiled``, sinks per
    dispatch) are then the CPU adapters' ones, whatever the class defaults."""

    def __init__(self, is_cpu=True):
        self.written = []
        self.is_cpu = is_cpu

    async def pipeline(self, shader, entry, constants):
        return (shader, entry)

    def buffer(self, nbytes, label, uniform=False):
        return f"{label}:{nbytes}"

    def write(self, buf, data):
        self.written.append(data)

    def bind(self, pipe, binds):
        return list(binds)


def _builder(is_cpu=True):
    from webgpu_trainer.engine.builder import Builder
    plan = type("P", (), {"dev": _Dev(is_cpu), "P": "P", "G": "G", "step": "step"})()
    return Builder(plan)


def test_kernel_fills_unbound_slots_and_binds_by_name():
    b = _builder()
    run(b.kernel("unary", "unary_forward", (1, 1, 1),
                 params=dict(n=3, op=1, flags=0, aux=0, alpha=0.0, beta=0.0, lo=0.0, hi=0.0),
                 x="X", out="OUT"))
    _, binds, groups = b.current[0]
    # p, x, y, dy, lo_t, hi_t (read-only: dummy), out (read_write)
    assert binds == ["unary.unary_forward.params:32", "X", b.dummy, b.dummy, b.dummy, b.dummy,
                     "OUT"] and groups == (1, 1, 1)
    run(b.kernel("pool", "avg_forward", (1, 1, 1), params=dict(
        total=1, H=1, W=1, OH=1, OW=1, KH=1, KW=1, sh=1, sw=1, pt=0, pl=0, dh=1, dw=1, end_h=1,
        end_w=1, flags=0), src="S", dst="D"))
    # arg: array<u32>, read_write; m (the fused ReLU's mask source): read-only
    assert b.current[1][1][1:] == ["S", "D", b.dummy_u32, b.dummy]
    run(b.kernel("batchnorm", "sum_x", (1, 1, 1), params=dict(
        outer=1, C=1, inner=1, gamma=0, beta=0, rmean=0, rvar=0, parts=1, eps=0.0,
        momentum=0.0, mask=0, want_dx=0, relu=0, bw=0, bg=0, bpp=0, clip=0, lo=0.0, hi=0.0),
        x="X", P="P", save="S", part="T"))
    binds = b.current[2][1][1:]
    assert binds[:4] == ["X", b.dummy, "P", "S"] and binds[6] == "T"
    # three unbound read_write slots: a sink each (Dawn refuses aliased writable bindings)
    assert binds[4] is b.sink and binds[5] is not b.sink and binds[5] == "sink6:16"
    assert binds[7] not in (b.sink, binds[5]) and binds[7] == "sink8:16"


def test_gpu_adapter_gemm_sinks_are_per_dispatch():
    """On a GPU adapter the gemm shader's unbound read_write slots (bsum, out0) get a sink of
    their own in each dispatch (Builder.SINK_PER_DISPATCH); other shaders keep one per
    binding."""
    b = _builder(is_cpu=False)
    params = dict(M=4, N=4, K=4, splits=1, sam=4, sak=1, sbk=4, sbn=1, bias_mode=0, alpha=1.0,
                  beta=1.0, relu=0, vec=0, mask=0, part0=0)
    for _ in range(2):
        run(b.kernel("gemm", "matmul", (1, 1, 1), params=params, constants={"WX": 1}, a="A",
                     bm="B", out="O"))
    for k in (8, 9):
        first, second = b.current[0][1][k], b.current[1][1][k]
        assert first == second == f"sink{k}:16" and first is not second


def test_kernel_errors_name_the_shader_and_slot():
    b = _builder()
    params = dict(n=3, mask=0)
    with pytest.raises(ParamsError, match=r"^shader 'elementwise': no binding named 'z' "
                                          r"\(slots: a, b, c, d\)$"):
        run(b.kernel("elementwise", "relu_forward", (1, 1, 1), params=params, a="A", z="Z"))
    with pytest.raises(ParamsError, match=r"^shader 'dropout': uniform slot 'st' is not bound$"):
        run(b.kernel("dropout", "apply", (1, 1, 1),
                     params=dict(n=1, salt=1, ratio=0.5, scale=2.0, relu=0), x="X", y="Y"))
    with pytest.raises(ParamsError, match=r"^shader 'elementwise': binding 0 must be"):
        run(b.kernel("elementwise", "relu_forward", (1, 1, 1), params=params, p="P"))
    with pytest.raises(ParamsError, match=r"^shader 'elementwise': struct Params field 'n'"):
        run(b.kernel("elementwise", "relu_forward", (1, 1, 1), params={}, a="A"))
    assert b.current == []
