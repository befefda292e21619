"""The native backend gives a process without a usable XDG_RUNTIME_DIR a private one before
wgpu looks for adapters (``wgpu_native._runtime_dir``): Mesa's drivers then print no
"XDG_RUNTIME_DIR is invalid or not set" error lines for a run that works, and the directory
is gone when the process ends. One that exists is left as it is."""

import os
import subprocess
import sys

PROBE = ("import os; from webgpu_trainer.engine.backends.wgpu_native import Device; "
         "d = Device(); print(os.environ['XDG_RUNTIME_DIR']); print(d.info['device'])")


def _run(env):
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=120)


def test_no_runtime_dir_gets_a_private_one_and_no_error_lines(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    for value in (None, str(tmp_path / "missing")):
        if value is not None:
            env["XDG_RUNTIME_DIR"] = value
        out = _run(env)
        assert out.returncode == 0, out.stderr
        assert "XDG_RUNTIME_DIR" not in out.stderr, out.stderr
        path = out.stdout.splitlines()[0]
        assert path != value and "webgpu-trainer-runtime-" in path
        assert not os.path.exists(path)  # removed at exit


def test_an_existing_runtime_dir_is_kept(tmp_path):
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    out = _run(env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(tmp_path) and tmp_path.is_dir()
