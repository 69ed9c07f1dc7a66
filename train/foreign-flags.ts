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

/** What rtjob does instead of each OpenRLHF flag it does not take. */
export const foreignFlagNotes: Readonly<Record<string, string>> = {
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
  'vllm-sync-backend':
    'not applicable: weights reach vLLM/SGLang as files the servers reload (--engine-weights-path), with no NCCL group',
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

/** The note for an unknown flag (kebab name without `--`), or undefined. */
export function foreignFlagNote(name: string): string | undefined {
  return Object.hasOwn(foreignFlagNotes, name) ? foreignFlagNotes[name] : undefined;
}
