#!/usr/bin/env bash
# The torch backend on a GPU machine with PyTorch + CUDA, in one run of at most ~8 minutes:
# builds the addon against python3's torch, checks parity (fp32) against the cpu oracle, times a
# Qwen3-0.6B-shaped training step (8 x 512 tokens, forward + backward + AdamW) and batched decode
# at TF32 and at bf16, and the same with the PyTorch-eager reference that `npm run bench -- torch`
# runs on CPU (bench/torch_reference.py, one-shot mode: same model, same shapes, same GPU, same
# run). Writes $OUT/gpu-torch-bench.json (or ./gpu-torch-bench.json). The rtjob side has the
# torch backend's fused kernels as the CPU bench does (AdamW in place on the trainer's variables).
#
# The GPU machine has no Node.js and no network: first, on a machine with the checkout,
#   scripts/gpu-torch-bench.sh pack
# writes the two things to carry (both ignored by git): .gpu-carry/node.tar.xz (this Node binary
# and its N-API headers) and model/backends/torch/gpu-bench.bundle.mjs (the bench and TF.js in one
# file). Then on the GPU machine, from the checkout root:
#   scripts/gpu-torch-bench.sh
# GPU_BENCH_LAYERS, GPU_BENCH_BATCH, GPU_BENCH_SEQ, GPU_BENCH_STEPS, GPU_BENCH_DECODE_BATCH change
# the shapes (defaults: all 28 layers, 8, 512, 3, 32).
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=model/backends/torch/gpu-bench.bundle.mjs

if [ "${1:-}" = pack ]; then
  mkdir -p .gpu-carry/node/bin .gpu-carry/node/include/node
  cp "$(command -v node)" .gpu-carry/node/bin/node
  inc="$(dirname "$(command -v node)")/../include/node"
  [ -e "$inc/node_api.h" ] || inc=/usr/include/node
  cp "$inc"/{node_api.h,node_api_types.h,js_native_api.h,js_native_api_types.h} .gpu-carry/node/include/node/
  tar -C .gpu-carry -cJf .gpu-carry/node.tar.xz node && rm -rf .gpu-carry/node
  node_modules/.bin/esbuild scripts/gpu-torch-bench.ts --bundle --platform=node --format=esm \
    --target=node20 --outfile="$bundle" --log-level=warning \
    --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);"
  du -h .gpu-carry/node.tar.xz "$bundle"
  echo "carry: .gpu-carry $bundle"
  exit 0
fi

out="${OUT:-.}"
mkdir -p "$out"
NODE="$(command -v node || true)"
if [ -z "$NODE" ] && [ -e .gpu-carry/node.tar.xz ]; then
  tar -C .gpu-carry -xJf .gpu-carry/node.tar.xz
  NODE="$PWD/.gpu-carry/node/bin/node"
fi
[ -n "$NODE" ] || { echo "no node: run 'scripts/gpu-torch-bench.sh pack' where Node is, and carry .gpu-carry"; exit 1; }
[ -e "$bundle" ] || { echo "no $bundle: run 'scripts/gpu-torch-bench.sh pack' first"; exit 1; }
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' \
  || echo "python3 has no torch: the addon builds against RTJOB_LIBTORCH or Debian's, and no reference runs"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

export RTJOB_QUIET_BACKEND=1
# Build first (a minute or two), so that the timings below do not include it.
timeout 200 "$NODE" "$bundle" --build-only
config=test/fixtures/model/configs/qwen3-0.6b.json
layers="${GPU_BENCH_LAYERS:-28}"
args=(--layers "$layers" --batch "${GPU_BENCH_BATCH:-8}" --seq "${GPU_BENCH_SEQ:-512}"
  --steps "${GPU_BENCH_STEPS:-3}" --decode-batch "${GPU_BENCH_DECODE_BATCH:-32}")
for precision in tf32 bf16; do
  echo "== rtjob torch backend, $precision"
  RTJOB_TORCH_PRECISION=$precision timeout 150 "$NODE" "$bundle" "$out/rtjob-$precision.json" >/dev/null \
    || echo "rtjob $precision: exit $?"
  echo "== PyTorch eager, $precision"
  timeout 80 python3 bench/torch_reference.py "$config" "${args[@]}" --precision $precision \
    >"$out/pytorch-$precision.json" || echo "pytorch $precision: exit $?"
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(n):
    try:
        return json.load(open(os.path.join(out, n)))
    except Exception as e:
        return {"error": str(e)}
r = {p: {"rtjob": load(f"rtjob-{p}.json"), "pytorch": load(f"pytorch-{p}.json")} for p in ("tf32", "bf16")}
for p, v in r.items():
    try:
        v["trainRatio"] = v["rtjob"]["train"]["tokensPerSecond"] / v["pytorch"]["train"]["tokensPerSecond"]
        v["decodeRatio"] = v["rtjob"]["decode"]["tokensPerSecond"] / v["pytorch"]["decode"]["tokensPerSecond"]
    except Exception:
        pass
json.dump(r, open(os.path.join(out, "gpu-torch-bench.json"), "w"), indent=2)
for p, v in r.items():
    print(p, "train tok/s rtjob", v["rtjob"].get("train", {}).get("tokensPerSecond"),
          "pytorch", v["pytorch"].get("train", {}).get("tokensPerSecond"), "ratio", v.get("trainRatio"))
PY
