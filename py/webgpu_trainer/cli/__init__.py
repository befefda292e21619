"""The command line: ``webgpu-trainer serve | data | train | predict | summary | bench | doctor``
(main.py dispatches; commands.py runs train/predict/summary natively; doctor.py the GPU
self-check, also before train)."""
