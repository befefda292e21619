#!/usr/bin/env bash
# The benchmark on the lent NVIDIA H200 (the device tool of this workplace; not CI).
# Here: copy py/ shaders/ benchmarks/ into the lead checkout's .perf/ and fetch the wheels
# (.whl: wgpu, cffi, pycparser, rendercanvas, sniffio for CPython 3.12) and the Vulkan loader
# .debs (.gl) as /work/.library/device/README.md says; then
#   run(command="bash .perf/benchmarks/h200.sh", carry=[".perf", ".whl", ".gl"])
# There: unpacks the loader, installs the wheels, runs benchmarks/run.py (the engine of .perf,
# and the lead checkout's engine as "base" when BASE=1), writing JSON into $OUT.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,power.draw \
  --format=csv | tee "$OUT/nvidia-smi.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$OUT/nvidia-smi.txt"
if [ "${BASE:-0}" = 1 ]; then
  echo "=== base (lead checkout's engine)"
  python3 .perf/benchmarks/run.py --only native --engine py --label base --no-torch --profile 30 \
    ${BASE_ARGS:-} --json "$OUT/base.json" 2>&1 | tee "$OUT/base.log"
fi
echo "=== perf (.perf engine)"
python3 .perf/benchmarks/run.py --only native --label perf --profile 30 ${ARGS:-} --json "$OUT/perf.json" \
  2>&1 | tee "$OUT/perf.log"
