#!/usr/bin/env bash
# Rebuilds the shipped tool warm start actors/model/pretrained/rtjob-tiny-tool from the math warm
# start (actors/model/pretrained/rtjob-tiny-math, or FROM=...):
#   npm run warm-start:tool       (about 10 min on a 2-core machine; resumable: rerun after a stop)
# 1. init: the math model's weights and tokenizer, extended with the tool role, the <tool_call>
#    tags and JSON pieces as added tokens (new embedding rows), and the tool chat template.
# 2. data: SFT conversations from the arith train split, all offered the calculator; 20% answer
#    through one call (call -> result -> "The answer is N."), the rest directly. The model learns
#    the format but greedy decoding answers directly: RL's job is to find out that the tool pays.
# 3. train_sft on them (loss on every assistant turn).
# WORK (default /tmp/rtjob-warm-start-tool) keeps the checkpoints; OUT is the model directory written.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/rtjob-warm-start-tool}
OUT=${OUT:-actors/model/pretrained/rtjob-tiny-tool}
FROM=${FROM:-actors/model/pretrained/rtjob-tiny-math}
TOOL_FRACTION=${TOOL_FRACTION:-0.2}
STEPS=${STEPS:-200}
tool() { node --import tsx scripts/tool-warm-start.ts "$@"; }
mkdir -p "$WORK"
echo "== 1/3: extend $FROM with tool tokens and the tool chat template"
tool init --from "$FROM" --out "$WORK/base"
echo "== 2/3: SFT data, $TOOL_FRACTION of the answers through the calculator"
tool data --out "$WORK/tool-sft.jsonl" --tool-fraction "$TOOL_FRACTION" --size 20000 --seed 11
echo "== 3/3: train_sft, $STEPS steps"
node --import tsx algorithms/train-sft.ts --pretrain "$WORK/base" --dataset "$WORK/tool-sft.jsonl" \
  --save-path "$OUT" --ckpt-path "$WORK/ckpt" --batch-size 32 --lr 1e-3 --warmup-steps 20 \
  --max-steps "$STEPS" --eval-steps 0 --seed 7
echo "tool warm start written to $OUT"
