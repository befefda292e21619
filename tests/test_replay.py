"""The native backend's replay list (``wgpu_native._replay``): a dispatch whose pipeline and
bind group are those already set skips the C call, every other one keeps it, in order. That the
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
