"""The training engine: standard library only, so it runs in Pyodide (browser) and CPython.

backends/ (WebGPU in the browser, wgpu-py natively), ops/ (forward + backward per op family),
graph.py + plan.py (the compiled training step), optim.py, schedulers.py, guard.py, train.py
(the training loop), summary.py, parity.py, selfcheck.py (the GPU self-check against
selfcheck.json), browser.py (the Web Worker's entry).
"""
