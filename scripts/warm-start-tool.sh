#!/usr/bin/env bash
# Rebuilds the shipped tool warm start model/pretrained/rtjob-tiny-tool from the math warm
# start (model/pretrained/rtjob-tiny-math, or FROM=...):
#   npm run warm-start:tool       (about 9 min on a shared 2-core machine; resumable)
# 1. init: the math model's weights and tokenizer, extended with the tool role, the <tool_call>
#    tags and JSON pieces as added tokens (new embedding rows), and the tool chat template.
# 2. SFT, every problem through one calculator call (call -> result -> "The answer is N."), 100
#    steps: the call format, copying the expression out of the problem and the result back.
# 3. SFT on a mix where 80% of the problems are answered directly, 100 steps: the model keeps the
#    format but greedy decoding answers directly, the weaker way. RL's job is to find out that
#    calling the tool pays.
# 4. eval_agent: examples/tool-agent.ts on 500 held-out problems, greedy and sampled.
# WORK (default /tmp/rtjob-warm-start-tool) keeps the checkpoints; OUT is the model directory written.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/rtjob-warm-start-tool}
OUT=${OUT:-actors/model/pretrained/rtjob-tiny-tool}
FROM=${FROM:-actors/model/pretrained/rtjob-tiny-math}
tool() { node --import tsx scripts/tool-warm-start.ts "$@"; }
sft() { node --import tsx train/sft.ts --batch-size 32 --warmup-steps 10 --max-steps 100 --eval-steps 0 --seed 7 "$@"; }
mkdir -p "$WORK"
echo "== 1/4: extend $FROM with tool tokens and the tool chat template"
tool init --from "$FROM" --out "$WORK/base"
tool data --out "$WORK/tool.jsonl" --tool-fraction 1 --seed 11
tool data --out "$WORK/mix.jsonl" --tool-fraction 0.2 --seed 11
echo "== 2/4: every answer through the calculator, 100 steps"
sft --pretrain "$WORK/base" --dataset "$WORK/tool.jsonl" --save-path "$WORK/tool" --ckpt-path "$WORK/tool-ckpt" --lr 2e-3
echo "== 3/4: 80% direct answers, 100 steps"
sft --pretrain "$WORK/tool" --dataset "$WORK/mix.jsonl" --save-path "$OUT" --ckpt-path "$WORK/mix-ckpt" --lr 1e-3
echo "== 4/4: held-out accuracy of examples/tool-agent.ts"
node --import tsx train/eval-agent.ts "$OUT" --agent-func examples/tool-agent.ts --prompts 500 --samples 2 --split-by used_tool
echo "tool warm start written to $OUT"
