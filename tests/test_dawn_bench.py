"""benchmarks/dawn/bench.py's pure parts (no Node, no GPU): the per-kernel comparison of a
profiled run and the command line's refusals."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "dawn"))
import bench  # noqa: E402


def _rows(**ms):
    return [["forward", f"{k}:run:", [1, 1, 1], v] for k, v in ms.items()]


def test_kernel_diff_largest_differences_either_way():
    """Kernels sorted by |native - dawn|: one 5x slower through Dawn comes before one 2x
    faster; sums per shader:entry over repeated dispatches; non-model keys and a missing side
    are skipped."""
    out = {"dawn": {"adapter": None, "boot_s": 2.0,
                    "m": {"64": {"profile": _rows(a=1.0, b=5.0) + _rows(b=5.0)}}},
           "native": {"adapter": {"vendor": "x"},
                      "m": {"64": {"profile": _rows(a=2.0, b=1.0)}, "1000": {"profile": []}}}}
    lines = bench.kernel_diff(out, top=1)
    assert lines[0] == "m 64: summed dawn 11.000 native 3.000 ms"
    assert lines[1].split() == ["b:run", "dawn", "10.0000", "native", "1.0000"]
    assert len(lines) == 2
    assert bench.kernel_diff({"native": {"adapter": None}}) == []


@pytest.mark.parametrize("args,message", [
    (["--models", "nosuch"], "--models ['nosuch']: not in plan h200"),
    (["--plan", "zoo", "--parts", "dawn,nope"], "--parts 'dawn,nope': each of dawn, native, peers"),
    (["--in-flight", "0"], "--in-flight 0: at least 1"),
    (["--in-flight", "-2"], "--in-flight -2: at least 1"),
])
def test_command_line_refusals(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--site", str(tmp_path), *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
