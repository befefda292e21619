#!/usr/bin/env bash
# The implicit-GEMM convolution's before/after on the lent H200 (device tool; not CI), set up
# as benchmarks/zoo_h200.sh says (.perf20/new: this checkout, .perf20/base: main's py/ shaders/):
#   run(command="bash .perf20/new/benchmarks/conv_h200.sh", carry=[".perf20", ".whl", ".gl"])
# Zoo engine rows (SeedNet, ResNet-8 at 64/1000, ResNet-18 at 64/256) for new and base, the
# PyTorch's rows for the ResNets, then ResNet-18's kernel profile; JSON into $OUT.
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
cd .perf20/new || exit 1
Z="python3 benchmarks/zoo.py --steps 20 --repeats 3"
zoo() {  # label engine-folder extra-args...
  local lab=$1 py=$2; shift 2
  echo "=== $lab"
  timeout 90 $Z --parts engine --engine "$py" --label "$lab" --models seednet resnet8 \
    --json "$OUT/zoo-$lab-a.json" "$@" 2>&1 | grep -v -i warn | grep -v '^|'
  timeout 70 $Z --parts engine --engine "$py" --label "$lab" --models resnet18 --batch 64 256 \
    --json "$OUT/zoo-$lab-b.json" "$@" 2>&1 | grep -v -i warn | grep -v '^|'
}
zoo new py
zoo base ../base/py
echo "=== torch"
timeout 110 $Z --parts eager graph compile --label torch --models resnet8 \
  --json "$OUT/zoo-torch-a.json" 2>&1 | grep -v -i warn | grep -v '^|'
timeout 110 $Z --parts eager graph compile --label torch --models resnet18 --batch 64 256 \
  --json "$OUT/zoo-torch-b.json" 2>&1 | grep -v -i warn | grep -v '^|'
timeout 45 python3 benchmarks/zoo_profile.py --models resnet18 --batch 256 --top 14 \
  --json "$OUT/prof-new.json" 2>&1 | grep -v -i warn
