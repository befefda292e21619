"""The native backend's replay list (``wgpu_native._replay``): a dispatch whose pipeline and
bind group are those already set skips the C call, every other one keeps it, in order;
``Device.run_step`` (a training step's write + submit as C calls). That the
replayed steps compute the same numbers as the checked first submit is tests/test_golden.py's
(50 SeedNet steps bit for bit)."""

from types import SimpleNamespace

import pytest

wgpu_native = pytest.importorskip("webgpu_trainer.engine.backends.wgpu_native")


def _h(name):
    return SimpleNamespace(_internal=name)


def test_replay_skips_only_state_already_set():
    a, b, g1, g2 = _h("pipeA"), _h("pipeB"), _h("bg1"), _h("bg2")
    prog = [((a, "bgl"), g1, (1, 2, 3)), ((a, "bgl"), g1, (4, 1, 1)),
            ((a, "bgl"), g2, (5, 1, 1)), ((b, "bgl"), g2, (6, 1, 1)),
            ((a, "bgl"), g2, (7, 1, 1)), ((a, "bgl"), g2, (8, 1, 1))]
    prog = [(p[0], g, xyz) for p, g, xyz in prog]
    assert wgpu_native._replay(prog) == [
        ("pipeA", "bg1", 1, 2, 3),
        (None, None, 4, 1, 1),      # same pipeline, same bind group: dispatch only
        (None, "bg2", 5, 1, 1),     # same pipeline, another bind group
        ("pipeB", "bg2", 6, 1, 1),  # another pipeline: its bind group set again
        ("pipeA", "bg2", 7, 1, 1),
        (None, None, 8, 1, 1)]


def test_replay_of_an_empty_program_is_empty():
    assert wgpu_native._replay([]) == []


def test_run_step_writes_the_uniform_then_replays_through_c_calls(device):
    """``Device.run_step``: the first step of a program goes through wgpu-py's checked calls,
    later ones through ``_Step``'s C calls; each writes its bytes before the submit."""
    from conftest import run
    buf = device.buffer(32, "step")  # a storage buffer: readable, unlike a uniform
    prog = device.program([])
    device.run_step(prog, buf, bytes(range(32)))
    assert prog.raw == []  # checked once: the replay list is set
    for first in (32, 64):
        data = bytes(range(first, first + 32))
        device.run_step(prog, buf, data)
        assert run(device.read(buf)) == data


def test_run_step_refuses_an_oversized_write_and_keeps_working(device):
    """A write past the buffer raises wgpu's validation error (libf: as through wgpu-py, not
    wgpu-native's abort); the buffer keeps its bytes and the next step runs."""
    from conftest import run
    buf = device.buffer(32, "step")
    prog = device.program([])
    device.run_step(prog, buf, bytes(32))
    device.run_step(prog, buf, b"\x07" * 32)
    with pytest.raises(Exception, match="In wgpuQueueWriteBuffer\n.*64 bytes would end up "
                       "overrunning the bounds of the Destination buffer of size 32") as err:
        device.run_step(prog, buf, b"\x09" * 64)
    assert type(err.value).__name__ == "GPUValidationError", err.value
    assert run(device.read(buf)) == b"\x07" * 32
    device.run_step(prog, buf, b"\x05" * 32)
    assert run(device.read(buf)) == b"\x05" * 32
