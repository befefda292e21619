"""The Web Worker's Python side (Pyodide only): web/worker.js imports ``worker.main``.

main.py (boot, the message loop, training runs, profile / bench / parity / selfcheck),
bridge.py (the one module that touches ``js`` / ``pyodide``: the worker's ``STATE``, ``post``,
JS buffers), load.py (the model and MNIST fetched for a run), storage.py (checkpoints,
resume, snapshot, the device's loss), views.py (inspect, predict, prepare), kernels.py
(convolve), bench.py (timed steps). Each handler module registers its messages in ``HANDLERS``.
"""
