"""The command line: ``webgpu-trainer serve | data | train | predict | summary | bench``
(main.py dispatches; commands.py runs train/predict/summary natively)."""
