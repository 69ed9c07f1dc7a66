/**
 * Flags of OpenRLHF's launch scripts that the drivers do not take, each with what rtjob does
 * instead or why it does not apply, so that an unknown flag from a copied script says what to
 * do rather than only that it is unknown. Keys are kebab case, as the parser normalises names.
 *
 * @module
 */

const noDeepSpeed =
  'not applicable: rtjob has no DeepSpeed; each trainer rank holds the whole model on its TF.js backend (more ranks: --actor-num-replicas)';
const vllmServerFlag = (flag: string): string =>
  `a vLLM server option: put ${flag} in the server command of --engine-launch (--engine vllm)`;
const rewardsFromAgent =
  'no reward model: rewards come from the agent file (--agent-func), which scores each episode';

const greedyEval =
  'rtjob evaluates greedily, one answer per held-out prompt (held-out accuracy, --eval-prompts of --eval-dataset): no flag to set';
const isCorrection = (kind: string): string =>
  `--is-correction ${kind}: rtjob's one flag for the rollout correction (tis, icepop, seq-tis, seq-mis, geo-rs; bounds: --is-threshold)`;

/**
 * A note that quotes the flag's values (`--eps_clip_low_high 0.2 0.28` → `--eps-clip 0.2
 * --eps-clip-high 0.28`); `values` are the arguments that followed the flag.
 */
type Note = string | ((values: readonly string[]) => string);

/**
 * What rtjob does instead of each OpenRLHF flag it does not take: where rtjob has the feature
 * under another name (a near miss), the note starts with that spelling.
 */
export const foreignFlagNotes: Readonly<Record<string, Note>> = {
  'use-icepop': isCorrection('icepop'),
  'enable-vllm-is-correction': isCorrection('tis'),
  'is-correction-enable': isCorrection('tis'),
  'eps-clip-low-high': (v) => {
    const [lo, hi] = v.join(' ').split(/[\s,]+/);
    return `--eps-clip ${lo ?? 'LOW'} --eps-clip-high ${hi ?? 'HIGH'} (rtjob takes the two bounds as two flags)`;
  },
  'use-dynamic-batch':
    '--train-max-tokens-per-gpu N alone turns it on: micro-batches are packed to N tokens (OpenRLHF: 16192); drop --use-dynamic-batch',
  'rollout-max-tokens-per-gpu':
    'experience making runs in --micro-rollout-batch-size chunks; there is no token budget for it',
  'vllm-generate-batch-size':
    'each step dispatches its --rollout-batch-size prompts at once; oversampling is --dynamic-filtering with a larger --rollout-batch-size',
  'input-template':
    "no prompt template: write the template's text into the data, or build the prompt in the agent file; --apply-chat-template renders the tokenizer's chat template",
  'eval-temperature': greedyEval,
  'eval-n-samples-per-prompt': greedyEval,
  'max-len':
    "OpenRLHF v0.11's --data.max_len is the total length: rtjob limits the prompt (--prompt-max-len) and the answer (--generate-max-len) apart",
  'disable-ds-ckpt': noDeepSpeed,
  'ds-tensor-parallel-size': noDeepSpeed,
  'max-ckpt-mem': 'checkpoints are bounded by count: --max-ckpt-num',
  'vllm-sync-with-ray':
    'not applicable: weights reach vLLM/SGLang as files the servers reload (--engine-weights-path), with no NCCL group',
  bf16: 'the torch backend computes in bf16 with the env RTJOB_TORCH_PRECISION=bf16 (rtjob submit --env RTJOB_TORCH_PRECISION=bf16, CUDA); a bf16 saved policy: --save-dtype bfloat16',
  'zero-stage':
    'train_ppo takes it (--zero_stage 1|2 shards AdamW over its data-parallel ranks); this driver trains on one rank, which holds all of it',
  'adam-offload': noDeepSpeed,
  'deepspeed-enable-sleep': `${noDeepSpeed}; --colocate-all-models lets the engine sleep while training`,
  zpg: noDeepSpeed,
  'overlap-comm': noDeepSpeed,
  'ref-reward-offload': noDeepSpeed,
  'grad-accum-dtype': noDeepSpeed,
  'flash-attn':
    "not applicable: attention is the backend's own fused kernel (libtorch's scaled_dot_product_attention with RTJOB_TF_BACKEND=torch)",
  'use-liger-kernel': "not applicable: kernels are the TF.js backend's own (RTJOB_TF_BACKEND)",
  'ring-attn-size': 'not applicable: no sequence parallelism; one rank holds a whole sequence',
  'vllm-gpu-memory-utilization': vllmServerFlag('--gpu-memory-utilization'),
  'enforce-eager': vllmServerFlag('--enforce-eager'),
  'enable-prefix-caching': vllmServerFlag('--enable-prefix-caching'),
  'vllm-enable-sleep': '--colocate-all-models puts the engine to sleep while the trainer trains',
  'colocate-actor-ref': '--colocate-all-models places every role in one placement group',
  'colocate-critic-reward': '--colocate-all-models places every role in one placement group',
  'ref-num-nodes': 'the reference model is one actor: --ref-num-gpus-per-node',
  'reward-num-nodes': rewardsFromAgent,
  'reward-num-gpus-per-node': rewardsFromAgent,
  'reward-pretrain': rewardsFromAgent,
  'remote-rm-url': rewardsFromAgent,
  'critic-pretrain':
    'the critic starts from --pretrain (with a new value head) when --advantage-estimator gae',
  'save-hf-ckpt': 'the final policy is always written in HF format to --save-path',
  'pretrain-data': 'no PPO-ptx pretraining loss: only the RL loss is trained',
  'ptx-coef': 'no PPO-ptx pretraining loss: only the RL loss is trained',
  'local-rank': 'launch with rtjob submit -- train_ppo, not deepspeed or torchrun',
};

/**
 * OpenRLHF flags whose feature rtjob has under another spelling (kebab name → rtjob's flags), for
 * `--help` and the README's porting table; each one's note above starts with that spelling.
 */
export const nearMissFlags: Readonly<Record<string, string>> = {
  'use-icepop': '--is-correction icepop',
  'enable-vllm-is-correction': '--is-correction tis',
  'eps-clip-low-high': '--eps-clip LOW --eps-clip-high HIGH',
  'use-dynamic-batch': '--train-max-tokens-per-gpu N',
};

/** The note for an unknown flag (kebab name without `--`) given with `values`, or undefined. */
export function foreignFlagNote(name: string, values: readonly string[] = []): string | undefined {
  if (!Object.hasOwn(foreignFlagNotes, name)) return undefined;
  const note = foreignFlagNotes[name]!;
  return typeof note === 'string' ? note : note(values);
}
