#!/usr/bin/env bash
# Build the self-contained payload of the Dawn-in-Node benchmark for a GPU machine without Node
# (the lent H200 of the device tool): .dawnpay/ (git-ignored), under 64 MiB with the wheels.
#   payload.tar.xz  Node (this machine's /usr/bin/node, stripped), and at their repo paths:
#                   benchmarks/node_modules/webgpu (index.js + dist/linux-x64/dawn.node),
#                   the peers' bundles (jax-js dist, TF.js + its WebGPU backend, minified),
#                   web/node_modules/pyodide (the runtime files loadPyodide reads)
#                   and .dawnpay/site (benchmarks/dawn/site.py): the engine wheel, the zoo
#                   (zoo.py's files), random datasets `random` (1x28x28) and `random-rgb32`
#   whl/            wgpu-py and its dependencies for CPython 3.12 (the native side)
# Then: run(command="bash benchmarks/dawn/device.sh", carry=[".dawnpay", ".gl"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=.dawnpay
N=${N:-1024}
# the models of the site: the zoo (benchmarks/zoo.py's files). Its own models (the MLP, the
# encoder, the ResNets) are exported here with every parameter 0: bench.py's runs initialise
# the weights themselves (init "scratch"), and zeros compress, so ResNet-18's 45 MB fit.
ZOO_MODELS=${ZOO_MODELS:-seednet mlp encoder resnet8 resnet18 vit mobilenetv2 lstm}
rm -rf "$OUT/site" "$OUT/stage" && mkdir -p "$OUT/stage/bin" "$OUT/whl"
ZOODIR=$(mktemp -d)
"$PY" - "$ZOODIR" $ZOO_MODELS <<'PYEOF'
import sys, shutil
from pathlib import Path
sys.path[:0] = ["benchmarks", "py"]
import zoo
folder = Path(sys.argv[1])
for name, shape in (("seednet", (1, 28, 28)), ("mlp", (1, 28, 28)), ("encoder", (1, 28, 28)),
                    ("resnet8", (3, 32, 32)), ("resnet18", (3, 32, 32)), ("vit", None),
                    ("mobilenetv2", None), ("lstm", None)):
    if name not in sys.argv[2:]:
        continue
    src = zoo.export(name, shape or zoo.shape_of(name, (1, 28, 28)), folder,
                     zeros=name != "seednet")
    if src.parent != folder:
        shutil.copyfile(src, folder / f"{name}.onnx")
PYEOF
"$PY" benchmarks/dawn/site.py "$OUT/site" --random "$N" \
  $(for m in $ZOO_MODELS; do echo --model $m=$ZOODIR/$m.onnx; done) \
  >/dev/null
"$PY" benchmarks/dawn/site.py "$OUT/site" --model seednet --random "$N" --shape 3 32 32 \
  --name random-rgb32 >/dev/null
rm -rf "$ZOODIR"
cp /usr/bin/node "$OUT/stage/bin/node" && strip "$OUT/stage/bin/node"
files=(benchmarks/node_modules/webgpu/index.js benchmarks/node_modules/webgpu/package.json
       benchmarks/node_modules/webgpu/dist/linux-x64/dawn.node
       benchmarks/node_modules/@jax-js/jax/package.json benchmarks/node_modules/@jax-js/jax/dist
       benchmarks/node_modules/@tensorflow/tfjs/dist/tf.min.js
       benchmarks/node_modules/@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js)
for f in package.json pyodide.mjs pyodide.asm.mjs pyodide.asm.wasm python_stdlib.zip \
         pyodide-lock.json; do files+=("web/node_modules/pyodide/$f"); done
tar -cf - "${files[@]}" "$OUT/site" -C "$OUT/stage" bin | xz -T0 -6 > "$OUT/payload.tar.xz"
rm -rf "$OUT/stage" "$OUT/site"  # the site travels in the payload (device.sh unpacks it)
if ! ls "$OUT"/whl/wgpu-*.whl >/dev/null 2>&1; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$OUT/whl" \
    wgpu==0.32.0 cffi==2.1.1 pycparser==3.12 rendercanvas==2.7.2 sniffio==1.3.1
fi
du -sh "$OUT" "$OUT"/*
