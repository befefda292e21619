#!/usr/bin/env bash
# The Dawn-in-Node benchmark on the lent NVIDIA H200 (device tool; not CI). Here first:
# bash benchmarks/dawn/pack.sh, and the Vulkan loader .debs in .gl (device README); then
#   run(command="bash benchmarks/dawn/device.sh", carry=[".dawnpay", ".gl"])
# There: unpacks the loader, Node, dawn.node, Pyodide and the peers (payload.tar.xz) at their
# repo paths, installs wgpu-py, runs benchmarks/dawn/bench.py into $OUT/dawn.json.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
tar -xJf .dawnpay/payload.tar.xz -C . || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .dawnpay/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/py PYTHONUNBUFFERED=1 NODE=$PWD/bin/node
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
"$NODE" --version | tee -a "$OUT/gpu.txt"
python3 benchmarks/dawn/bench.py --site .dawnpay/site --json "$OUT/dawn.json" ${ARGS:-} 2>&1 \
  | grep -v XDG_RUNTIME | tee "$OUT/dawn.log"
