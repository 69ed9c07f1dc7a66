#!/usr/bin/env bash
# Rebuilds the shipped warm-start model model/pretrained/rtjob-tiny-math from nothing:
#   npm run warm-start            (about 25 min on a 2-core machine; resumable: rerun after a stop)
# Phase 1+2 teach the worked answer ("47+38=85. The answer is 85."): 600 steps, then a warm restart
# of the cosine schedule that stops at the first evaluation reaching 30% held-out greedy accuracy.
# Phase 3 fine-tunes on a mix where 70% of answers are direct ("The answer is 85."), so the model
# knows both strategies and greedy decoding prefers the weaker, direct one: RL's job is to find out
# that working it out pays (README "Learning").
# WORK (default /tmp/rtjob-warm-start) keeps the checkpoints; OUT is the model directory written.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/rtjob-warm-start}
OUT=${OUT:-actors/model/pretrained/rtjob-tiny-math}
sft() { node --import tsx train/sft.ts --dataset arith --batch-size 32 --eval-steps 50 --eval-size 200 "$@"; }
mkdir -p "$WORK"
echo "== phase 1/3: worked answers, 600 steps"
sft --init-builtin --save-path "$WORK/worked" --ckpt-path "$WORK/worked-ckpt" \
  --lr 3e-3 --warmup-steps 50 --max-steps 600 --stop-at-accuracy 0.35 --seed 42
echo "== phase 2/3: warm restart until 30% held-out"
sft --init-builtin --save-path "$WORK/worked" --ckpt-path "$WORK/worked-ckpt" \
  --lr 3e-3 --warmup-steps 50 --max-steps 1500 --stop-at-accuracy 0.3 --seed 42
echo "== phase 3/3: 70% direct answers, 300 steps"
sft --pretrain "$WORK/worked" --save-path "$OUT" --ckpt-path "$WORK/mix-ckpt" \
  --direct-fraction 0.7 --lr 1e-3 --warmup-steps 20 --max-steps 300 --seed 7
echo "warm start written to $OUT"
