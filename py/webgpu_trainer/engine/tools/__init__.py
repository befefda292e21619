"""Tools built on a Plan (standard library only): parity.py (the host-independent case
runner), selfcheck.py (the GPU self-check against selfcheck.json), summary.py (the model
summary), playground.py (the kernels playground's convolution)."""
