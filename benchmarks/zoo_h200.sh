#!/usr/bin/env bash
# The zoo and GEMM benchmarks on the lent NVIDIA H200 (the device tool of this workplace; not CI).
# Here: copy this checkout's py/ shaders/ benchmarks/ models/seednet.onnx into the lead
# checkout's .perf20/new/ (and another engine's py/ shaders/ into .perf20/base/ for a
# before/after), fetch the wheels (.whl) and the Vulkan loader .debs (.gl) as h200.sh says; then
#   run(command="bash .perf20/new/benchmarks/zoo_h200.sh", carry=[".perf20", ".whl", ".gl"])
# There: the GEMM shapes (benchmarks/gemm.py) and the zoo's engine rows for base and new, and
# PyTorch's rows (eager, CUDA graph, torch.compile + whole-step graph) once; JSON into $OUT.
# ENGINES="base new", GEMM=0 (no GEMM part), TORCH=0 (no PyTorch rows) choose the parts.
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
cd .perf20/new || exit 1
for e in ${ENGINES:-base new}; do
  [ "${GEMM:-1}" = 1 ] || break
  [ -d "../$e/py" ] || [ "$e" = new ] || continue
  py=$( [ "$e" = new ] && echo py || echo "../$e/py" )
  echo "=== gemm $e"
  timeout 120 python3 benchmarks/gemm.py --engine "$py" --label "$e" --force 0 16 \
    $( [ "$e" = new ] && echo --cublas ) --json "$OUT/gemm-$e.json" 2>&1 | grep -v -i warn
done
for e in ${ENGINES:-base new}; do
  [ -d "../$e/py" ] || [ "$e" = new ] || continue
  py=$( [ "$e" = new ] && echo py || echo "../$e/py" )
  echo "=== zoo engine $e"
  timeout 150 python3 benchmarks/zoo.py --parts engine --engine "$py" --label "$e" \
    --json "$OUT/zoo-$e.json" 2>&1 | grep -v -i warn
done
if [ "${TORCH:-1}" = 1 ]; then
  echo "=== zoo torch"
  timeout 200 python3 benchmarks/zoo.py --parts eager graph compile --label torch \
    --json "$OUT/zoo-torch.json" 2>&1 | grep -v -i warn
fi
python3 benchmarks/zoo.py --table "$OUT"/zoo-*.json
