"""Training on a compiled Plan (standard library only): loop.py (``Trainer``, THE training loop)
over an engine (engine.py: the ``Engine`` protocol; gpu_engine.py: ``GpuEngine``), data.py
(splits, held-out images, the checks against the data), evaluate.py (evaluation in chunks,
validation points), optim.py (optimizers), schedulers.py (LR schedules), guard.py (the NaN/Inf
guard), checkpoint.py (a run's checkpoint), verdict.py (a finished run in words), probe.py
(what the live views read)."""
