#!/usr/bin/env bash
# The zoo benchmark (benchmarks/zoo.py) on the lent NVIDIA H200 (the device tool of this
# workplace; not CI). Here: copy this checkout's py/ shaders/ benchmarks/ models/ scripts/
# tests/fixtures/zoo/ into .perf20/new/ (and another engine's py/ shaders/ into .perf20/base/
# for a before/after), the wgpu-py wheels into .whl (benchmarks/dawn/pack.sh fetches them into
# .dawnpay/whl) and the Vulkan loader .debs into .gl (the device README); then
#   run(command="PART=engine bash .perf20/new/benchmarks/zoo_h200.sh", carry=[".perf20", ".whl", ".gl"])
# PART=engine: the engine's rows of every zoo model (1x28x28 models, the ResNets at 3x32x32,
#   the make_zoo models at their own shapes) for each ENGINES (default "new") and each
#   VARIANTS entry ("-": the committed Builder; "CONV_GEMM_MIN=64": a Builder override, on the
#   ResNets only). PART=torch: PyTorch eager, CUDA graph, torch.compile + whole-step graph.
# ZOO_SETS="a b" picks model groups (see zoo()), to keep one call under the tool's 10 minutes.
# PART=prof: the kernel profile (benchmarks/zoo_profile.py) of every zoo model at PROF_BATCH.
# PART may list several ("engine prof": one call).
# PART=gemm: the GEMM shapes (benchmarks/gemm.py) with cuBLAS. JSON into $OUT; then the table.
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
cd .perf20/new || exit 1
Z="python3 benchmarks/zoo.py --steps ${STEPS:-20} --repeats ${REPEATS:-3}"
zoo() {  # json-stem zoo-args...: ZOO_SETS of models (default all): a the 1x28x28 models,
  local stem=$1 g m; shift  # b ResNet-8 and c ResNet-18 at 3x32x32, d the make_zoo models
  for g in ${ZOO_SETS:-a b c d}; do
    case $g in
      a) m=(--models seednet mlp encoder) ;;
      b) m=(--models resnet8 --shape 3 32 32) ;;
      c) m=(--models resnet18 --shape 3 32 32 --batch 64 256) ;;
      d) m=(--models vit mobilenetv2 lstm) ;;
    esac
    timeout 240 $Z "$@" "${m[@]}" --json "$OUT/$stem-$g.json" 2>&1 | grep -v -i warn | grep -v '^|'
  done
}
for part in ${PART:-engine}; do
case $part in
  engine)
    for e in ${ENGINES:-new}; do
      py=$( [ "$e" = new ] && echo py || echo "../$e/py" )
      for v in ${VARIANTS:--}; do
        if [ "$v" = - ]; then echo "=== engine $e"; zoo "zoo-$e" --parts engine --engine "$py" --label "$e"
        else
          echo "=== engine $e $v"
          for m in resnet8 resnet18; do
            b=$( [ $m = resnet18 ] && echo "64 256" || echo "64 1000" )
            timeout 150 $Z --parts engine --engine "$py" --label "$e $v" --builder "$v" \
              --models $m --shape 3 32 32 --batch $b --json "$OUT/zoo-$e-${v//=/-}-$m.json" 2>&1 \
              | grep -v -i warn | grep -v '^|'
          done
        fi
      done
    done ;;
  torch) echo "=== torch"; zoo zoo-torch --parts eager graph compile --label torch ;;
  gemm) timeout 200 python3 benchmarks/gemm.py --engine py --label new --force 0 16 --cublas \
          --json "$OUT/gemm-new.json" 2>&1 | grep -v -i warn ;;
  prof)
    P="python3 benchmarks/zoo_profile.py --batch ${PROF_BATCH:-1000} --top 8"
    timeout 200 $P --models seednet mlp encoder vit lstm --json "$OUT/prof-a.json" 2>&1 | grep -v -i warn
    timeout 200 $P --models resnet8 resnet18 mobilenetv2 --shape 3 32 32 --json "$OUT/prof-b.json" \
      2>&1 | grep -v -i warn ;;
esac
done
python3 benchmarks/zoo.py --table "$OUT"/zoo-*.json
