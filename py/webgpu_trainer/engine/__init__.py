"""The engine: standard library only, so it runs in Pyodide (browser) and CPython.

Its root is the compiler: graph.py (model description -> shapes), plan.py + builder.py (the
compiled training step), init.py (PyTorch's default init), errors.py, config/ (the run
configuration), ops/ (forward + backward per op family) and backends/ (the device: WebGPU in the
browser, wgpu-py natively; shaders.py). On top of it: train/ (the training loop, its engines,
optimizers, schedules, guard, checkpoints) and tools/ (parity, the self-check, the summary, the
kernels playground). The Web Worker's entry is the package ``webgpu_trainer.worker``.
"""
