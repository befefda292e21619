"""Which convolutions ops/conv.py hands to the implicit GEMM (ops/conv_gemm.gemm_tile) and how
the sum is split: the plan's choices, without a device."""

import types

import pytest

from webgpu_trainer.engine.ops import conv_gemm
from webgpu_trainer.engine.plan import Builder


def _b(tiled=True, least=128):
    return types.SimpleNamespace(tiled=tiled, CONV_GEMM_MIN=least)


@pytest.mark.parametrize("m,n,kd,grp,tiled,least,want", [
    (256, 50176, 2304, 1, True, 128, (16, 16)),   # ResNet-18's 256-channel 3x3 forward
    (64, 200704, 576, 1, True, 128, None),        # its 64-channel stage: direct by default
    (64, 200704, 576, 1, True, 32, (8, 16)),      # ... 64 x 128 tiles when allowed
    (127, 200704, 576, 1, True, 32, (8, 16)),     # ... up to 127 rows
    (32, 200704, 288, 1, True, 32, (8, 8)),       # 32 rows: 64 x 64
    (512, 100, 4096, 1, True, 1, (8, 8)),         # 100 columns: 64 x 64
    (512, 4608, 4096, 1, False, 128, None),       # CPU adapters (SwiftShader, lavapipe)
    (512, 4608, 4096, 2, True, 128, None),        # groups > 1: direct
    (512, 4608, 4096, 1, True, None, None),       # switched off
    (130, 162, 333, 1, True, 1, (16, 16)),        # a test's edges (tests/test_ops_tiled.py)
    (128, 128 * 65536, 64, 1, True, 1, None),     # more tiles than one dispatch holds
    (128, 128 * 65535, 64, 1, True, 1, (16, 16)),  # ... the last count that fits
    (64, 128 * 65536, 64, 1, True, 1, None),      # ... on 64 x 128 tiles
])
def test_gemm_tile(m, n, kd, grp, tiled, least, want):
    assert conv_gemm.gemm_tile(_b(tiled, least), m, n, kd, grp) == want


def test_default_leaves_thin_layers_direct():
    """The default sends 64-channel layers to 64 x 128 tiles and leaves 32-channel ones on the
    direct kernels (measured slower on 64 x 64 tiles: Builder.CONV_GEMM_MIN's comment)."""
    assert Builder.CONV_GEMM_MIN == 64
    b = _b(least=Builder.CONV_GEMM_MIN)
    assert conv_gemm.gemm_tile(b, 64, 49000, 576) == (8, 16)
    assert conv_gemm.gemm_tile(b, 32, 196000, 288) is None
    assert conv_gemm.gemm_tile(b, 64, 49000, 32) is None  # a 1x1 layer of 32 in channels


@pytest.mark.parametrize("tiles,m,n,kd,tw,want", [
    (512, 512, 4096, 4608, 16, 1),       # enough workgroups: no split
    (128, 512, 4096, 4608, 16, 4),       # ResNet-18 stage 4's input gradient: 4 parts
    (4, 130, 333, 162, 16, 5),           # parts of at least 4 steps of BK = 8
    (1, 4096, 4096, 1 << 20, 16, 1),     # parts [splits, m, n] capped at 2^24 values
    (1, 128, 128, 10, 16, 1),            # a sum shorter than two steps: one part
])
def test_splits(tiles, m, n, kd, tw, want):
    assert conv_gemm._splits(tiles, m, n, kd, tw) == want
