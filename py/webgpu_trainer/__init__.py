"""webgpu_trainer: train neural networks in the browser (Python under Pyodide driving WebGPU).

The same package runs natively (wgpu-py) and serves the page (server, CLI, data, ONNX I/O).
"""

__version__ = "0.1.0"
