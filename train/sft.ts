/**
 * `train_sft`: supervised fine-tuning with the loss on response tokens only. Trains on JSONL
 * (`{messages}` or `{prompt, response}` per line) or a built-in dataset (`arith`), logs loss and
 * tokens/s, evaluates greedy accuracy on a held-out split, checkpoints and resumes, and writes an
 * HF model directory. `--init-builtin` starts from a fresh built-in tiny model; this is how the
 * shipped warm-start checkpoint is made (model/README.md has the exact command). The evaluation
 * generates on `--engine builtin` (the trained model itself) or `llamacpp` (a GGUF of it, sent the
 * current weights before every evaluation).
 *
 * @example
 * node --import tsx train/sft.ts --init-builtin --dataset arith --save-path /tmp/m
 *
 * @module
 */
import {
  resolveCheckpointFlags,
  resolveDatasetFlags,
  sftCheckpointFlags,
} from './checkpoint-flags.ts';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { initBackend, tf } from '../model/backend.ts';
import type { SaveDtype } from '../model/config.ts';
import type { CausalLM } from '../model/llama.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import { ModelTrainer, maskedNllLoss, padBatch } from '../model/training.ts';
import { LR_SCHEDULERS, type LrScheduler } from '../model/lr-schedule.ts';
import type { LoraSpec } from '../model/lora-spec.ts';
import { loraFlagDefaults, loraFlagSpecs, loraSpecOf, type LoraFlagOptions } from './lora-flags.ts';
import { packBatch } from '../model/batches.ts';
import { packedRows } from '../algorithms/packing.ts';
import { createEngine, type LocalEngineKind } from '../engines/registry.ts';
import type { InferenceEngine } from '../engines/types.ts';
import type { GgufDtype } from '../model/gguf/index.ts';
import { shuffle } from '../algorithms/shuffle.ts';
import { metrics } from '../ops/metrics.ts';
import { builtinDataset } from './data/arith.ts';
import { runName } from './run-name.ts';
import { loadSftModel, saveSft } from './sft-model.ts';
import {
  openTrackers,
  optionSettings,
  trackerFlags,
  type TrackerOptions,
} from './trackers/index.ts';
import {
  encodeConversation,
  evalArith,
  sftConversations,
  type ArithEval,
  type Example,
} from './sft-data.ts';
import {
  checkRolloutDtype,
  flagParser,
  localEngineFlags,
  runIfMain,
  FlagError,
} from './driver-flags.ts';

export { encodeConversation, evalArith, sftConversations, type ArithEval } from './sft-data.ts';

/** Options of {@link trainSft}; the tracker options are `train/trackers/`'s. */
export interface SftOptions extends TrackerOptions {
  /** HF model directory to start from (or `initBuiltin`). */
  pretrain?: string;
  /** Start from a fresh built-in tiny model with the built-in tokenizer. @default false */
  initBuiltin?: boolean;
  /** A built-in dataset name (`arith`) or a JSONL path. @default 'arith' */
  dataset?: string;
  /** Number of built-in training records. @default 20000 */
  datasetSize?: number;
  /**
   * Built-in dataset only: the fraction of records whose response is the direct answer
   * (`The answer is 85.`) instead of the worked one (`47+38=85. The answer is 85.`), drawn per
   * record from `seed`. A warm start trained on a mix knows both strategies. @default 0
   */
  directFraction?: number;
  /** Where the final HF model directory goes. */
  savePath: string;
  /** Tensor dtype of the saved model (checkpoints stay float32). @default 'float32' */
  saveDtype?: SaveDtype;
  /** Checkpoint directory (weights + optimizer + step); resumed from when it exists. */
  ckptPath?: string;
  /** Save a checkpoint every this many steps. @default 100 */
  saveSteps?: number;
  /** Sequences per optimizer step. @default 32 */
  batchSize?: number;
  /** Sequences per forward/backward pass. @default 32 */
  microBatchSize?: number;
  /** Peak learning rate (`--learning-rate`). @default 3e-3 */
  lr?: number;
  /** The schedule's shape (HF transformers' `get_scheduler` names). @default 'cosine_with_min_lr' */
  lrScheduler?: LrScheduler;
  /** @default 50 */
  warmupSteps?: number;
  /** Warmup as a fraction of `maxSteps` (OpenRLHF's `--lr_warmup_ratio`); replaces `warmupSteps`. */
  lrWarmupRatio?: number;
  /** @default 2000 */
  maxSteps?: number;
  /** AdamW weight decay (`--l2`). @default 0.01 */
  weightDecay?: number;
  /** @default 1.0 */
  maxGradNorm?: number;
  /** Recompute each decoder layer's activations in the backward pass (`--gradient-checkpointing`). @default false */
  gradientCheckpointing?: boolean;
  /** Pack each micro-batch's sequences into one row instead of padding (`--packing-samples`). @default false */
  packingSamples?: boolean;
  /** Longest training sequence in tokens (longer ones are dropped). @default 160 */
  maxLen?: number;
  /** @default 42 */
  seed?: number;
  /** @default 10 */
  logSteps?: number;
  /** Evaluate greedy held-out accuracy every this many steps (built-in dataset only); 0 = never. @default 100 */
  evalSteps?: number;
  /** Held-out problems per evaluation. @default 200 */
  evalSize?: number;
  /** Stop once held-out accuracy reaches this (0..1). @default unset */
  stopAtAccuracy?: number;
  /** Engine that generates the evaluation's answers. @default 'builtin' */
  engine?: LocalEngineKind;
  /** GGUF element type of `engine: 'llamacpp'` (f32 gives the builtin engine's tokens). @default 'f32' */
  rolloutDtype?: GgufDtype;
  /** Print progress lines. @default true */
  verbose?: boolean;
  /** Stop after the current step (checkpoint and final model are still written). */
  signal?: AbortSignal;
  /** Told of every held-out evaluation: the step and its accuracy and answers. */
  onEval?: (step: number, ev: ArithEval) => void;
  /** Where each step's metrics go besides the trackers. @default the head's metrics (`metrics.log`) */
  metric?: (step: number, values: Record<string, number>) => void;
  /** The environment trackers read (`WANDB_*`, `MLFLOW_*`). @default process.env */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * Train a LoRA adapter over the frozen model (`--lora-rank` etc., `train/lora-flags.ts`): the
   * adapter alone trains and is saved (a PEFT adapter directory in `savePath`).
   */
  lora?: LoraSpec;
}

/** What {@link trainSft} returns. */
export interface SftResult {
  steps: number;
  finalLoss: number;
  evalAccuracy?: number;
  trainSeconds: number;
  tokensPerSecond: number;
}

/** The tokenised conversations of `--dataset` that fit `maxLen` and train at least one token. */
async function sftExamples(
  o: SftOptions,
  tok: ChatTokenizer,
  maxLen: number,
  seed: number,
): Promise<Example[]> {
  const dataset = o.dataset ?? 'arith';
  const conversations = await sftConversations(
    dataset,
    o.datasetSize ?? 20000,
    o.directFraction ?? 0,
    seed,
  );
  return conversations
    .map((r) => encodeConversation(tok, r.messages, r.tools))
    .filter((e) => e.ids.length <= maxLen && e.mask.some((m) => m));
}

/** Runs SFT; see {@link SftOptions}. */
export async function trainSft(o: SftOptions): Promise<SftResult> {
  const log = (s: string): void => {
    if (o.verbose !== false) console.log(s);
  };
  checkRolloutDtype(o);
  const env = o.env ?? process.env;
  const trackers = openTrackers(o, {
    program: 'train_sft',
    defaultRunName: runName(env),
    settings: optionSettings({ ...o }),
    env,
  });
  for (const t of trackers.list) if (t.where()) log(`train_sft: ${t.kind}: ${t.where()}`);
  // The one place a step's metrics go: the head's history and every tracker.
  const metric = o.metric ?? ((step: number, v: Record<string, number>) => metrics.log(step, v));
  const logStep = (step: number, values: Record<string, number>): void => {
    metric(step, values);
    trackers.log(step, values);
  };
  let outcome: 'finished' | 'failed' = 'failed';
  try {
    const result = await sftRun(o, log, logStep);
    outcome = 'finished';
    return result;
  } finally {
    await trackers.close(outcome);
    for (const t of trackers.list)
      if (t.kind !== 'tensorboard' && t.where()) log(`train_sft: ${t.kind}: ${t.where()}`);
    await metrics.flush();
  }
}

async function sftRun(
  o: SftOptions,
  log: (s: string) => void,
  logStep: (step: number, values: Record<string, number>) => void,
): Promise<SftResult> {
  await initBackend();
  const seed = o.seed ?? 42;
  const { model, tok, tokFiles } = await loadSftModel(o, seed, log);
  const maxLen = Math.min(o.maxLen ?? 160, model.config.max_position_embeddings);
  const dataset = o.dataset ?? 'arith';
  const examples = await sftExamples(o, tok, maxLen, seed);
  if (!examples.length) throw new FlagError('--dataset', 'train_sft: no usable training examples');
  log(`train_sft: ${examples.length} examples from ${dataset}`);
  const saveFrom = tokFiles ? { tokenizerFiles: tokFiles } : { tokenizerFrom: o.pretrain };
  const maxSteps = o.maxSteps ?? 2000;
  const trainer = sftTrainer(o, model, maxSteps, log);
  const batchSize = o.batchSize ?? 32;
  const micro = Math.min(o.microBatchSize ?? 32, batchSize);
  const stepsPerEpoch = Math.floor(examples.length / batchSize);
  const orderFor = (epoch: number): number[] =>
    shuffle(
      examples.map((_, i) => i),
      seed * 7919 + epoch,
    );
  const { evalRecords, evalSteps, engine } = await sftEvaluation(o, dataset, model, tok, maxLen);
  const started = performance.now();
  let tokens = 0;
  let windowTokens = 0;
  let windowStart = performance.now();
  let lastLoss = NaN;
  let evalAccuracy: number | undefined;
  let order = orderFor(Math.floor(trainer.stepCount / stepsPerEpoch));
  while (trainer.stepCount < maxSteps) {
    const stepStart = performance.now();
    const step = trainer.stepCount;
    if (step % stepsPerEpoch === 0) order = orderFor(Math.floor(step / stepsPerEpoch));
    const base = (step % stepsPerEpoch) * batchSize;
    const batch = order.slice(base, base + batchSize).map((i) => examples[i]!);
    // Micro-batches of similar length waste less compute on padding.
    if (micro < batch.length) batch.sort((a, b) => a.ids.length - b.ids.length);
    const stepTokens = batch.reduce((n, e) => n + e.ids.length, 0);
    const lossSum = await accumulateBatch(trainer, model, batch, micro, o.packingSamples ?? false);
    [tokens, windowTokens] = [tokens + stepTokens, windowTokens + stepTokens];
    const st = await trainer.stepAsync();
    lastLoss = lossSum / Math.ceil(batch.length / micro);
    const stepEnd = performance.now();
    logStep(st.step, {
      loss: lastLoss,
      lr: st.lr,
      grad_norm: st.gradNorm,
      tokens: stepTokens,
      step_s: (stepEnd - stepStart) / 1000,
      tokens_per_s: (stepTokens * 1000) / (stepEnd - stepStart),
    });
    if (st.step % (o.logSteps ?? 10) === 0 || st.step === 1) {
      const now = performance.now();
      log(
        `step ${st.step}/${maxSteps} loss ${lastLoss.toFixed(4)} lr ${st.lr.toExponential(2)} ` +
          `gnorm ${st.gradNorm.toFixed(3)} tok/s ${((windowTokens * 1000) / (now - windowStart)).toFixed(0)} ` +
          `elapsed ${((now - started) / 1000).toFixed(0)}s`,
      );
      windowTokens = 0;
      windowStart = now;
    }
    const last = st.step === maxSteps;
    if (evalSteps && engine && (st.step % evalSteps === 0 || last))
      evalAccuracy = await evaluateSft(engine, model, tok, evalRecords, st.step, o, log, logStep);
    if (o.ckptPath && (st.step % (o.saveSteps ?? 100) === 0 || last)) {
      await trainer.readToHost();
      trainer.saveCheckpoint(o.ckptPath, { dataset }, saveFrom);
    }
    if (o.signal?.aborted) {
      log(`train_sft: stopping at step ${st.step} on request`);
      if (o.ckptPath) {
        await trainer.readToHost();
        trainer.saveCheckpoint(o.ckptPath, { dataset }, saveFrom);
      }
      break;
    }
    if (st.step % evalSteps === 0 && reachedTarget(o, evalAccuracy, log)) break;
  }
  const trainSeconds = (performance.now() - started) / 1000;
  const result: SftResult = {
    steps: trainer.stepCount,
    finalLoss: lastLoss,
    evalAccuracy,
    trainSeconds,
    tokensPerSecond: tokens / trainSeconds,
  };
  await model.readToHost();
  saveSft(o, model, saveFrom, result);
  log(`train_sft: saved ${o.savePath} after ${result.steps} steps in ${trainSeconds.toFixed(0)}s`);
  await engine?.close();
  trainer.dispose();
  model.dispose();
  return result;
}

/** The optimizer of the run (its schedule from the flags), resumed from `--ckpt-path` if saved there. */
function sftTrainer(
  o: SftOptions,
  model: CausalLM,
  maxSteps: number,
  log: (s: string) => void,
): ModelTrainer {
  const trainer = new ModelTrainer(model, {
    lr: o.lr ?? 3e-3,
    scheduler: o.lrScheduler ?? 'cosine_with_min_lr',
    warmupSteps:
      o.lrWarmupRatio !== undefined ? Math.ceil(maxSteps * o.lrWarmupRatio) : (o.warmupSteps ?? 50),
    totalSteps: maxSteps,
    weightDecay: o.weightDecay ?? 0.01,
    maxGradNorm: o.maxGradNorm ?? 1.0,
  });
  if (o.ckptPath && existsSync(join(o.ckptPath, 'trainer_state.json'))) {
    const st = trainer.loadCheckpoint(o.ckptPath);
    log(`train_sft: resumed from ${o.ckptPath} at step ${String(st.step)}`);
  }
  return trainer;
}

/** The held-out problems (arith datasets only), how often they are evaluated, and the engine. */
async function sftEvaluation(
  o: SftOptions,
  dataset: string,
  model: CausalLM,
  tok: ChatTokenizer,
  maxLen: number,
): Promise<{
  evalRecords: Parameters<typeof evalArith>[2];
  evalSteps: number;
  engine: InferenceEngine | undefined;
}> {
  const evalRecords = dataset.startsWith('arith')
    ? builtinDataset('arith:test', { size: o.evalSize ?? 200 })!
    : [];
  const evalSteps = evalRecords.length ? (o.evalSteps ?? 100) : 0;
  const engine = evalSteps
    ? await createEngine(o.engine, {
        model,
        tokenizer: tok,
        dtype: o.rolloutDtype,
        maxBatchSize: 256,
        // Every held-out problem at once, up to llama.cpp's cap; a problem and its answer fit maxLen.
        maxSequences: 64,
        contextSize: maxLen,
      })
    : undefined;
  return { evalRecords, evalSteps, engine };
}

/** Whether `--stop-at-accuracy` is reached by the last evaluation (said in the log). */
function reachedTarget(
  o: SftOptions,
  accuracy: number | undefined,
  log: (s: string) => void,
): boolean {
  if (o.stopAtAccuracy === undefined || accuracy === undefined || accuracy < o.stopAtAccuracy)
    return false;
  log(
    `train_sft: held-out accuracy ${(accuracy * 100).toFixed(1)}% reached the target ${(o.stopAtAccuracy * 100).toFixed(1)}%; stopping`,
  );
  return true;
}

/**
 * Held-out greedy accuracy of the model as trained so far, on the evaluation engine: logged as
 * `eval_accuracy` and a line, passed to `onEval`, and returned.
 */
async function evaluateSft(
  engine: InferenceEngine,
  model: CausalLM,
  tok: ChatTokenizer,
  records: Parameters<typeof evalArith>[2],
  step: number,
  o: SftOptions,
  log: (s: string) => void,
  logStep: (step: number, values: Record<string, number>) => void,
): Promise<number> {
  const t0 = performance.now();
  // The in-place update path of every engine: the builtin engine computes with `model` already,
  // llama.cpp gets the tensors written into its GGUF.
  // With LoRA the adapter alone moves (the builtin engine already computes with it).
  await model.readToHost();
  await engine.updateWeights(
    model.lora
      ? { kind: 'lora', adapter: model.lora.exportAdapter() }
      : { kind: 'tensors', tensors: model.exportWeights() },
    step,
  );
  const ev = await evalArith(engine, tok, records);
  const seconds = (performance.now() - t0) / 1000;
  logStep(step, { eval_accuracy: ev.accuracy, eval_s: seconds });
  o.onEval?.(step, ev);
  log(
    `eval step ${step} (${engine.kind}) held-out greedy accuracy ${(ev.accuracy * 100).toFixed(1)}% (${records.length} problems, ${seconds.toFixed(1)}s) e.g. ${JSON.stringify(ev.samples[0]?.output)}`,
  );
  return ev.accuracy;
}

/** One optimizer step's gradients over `batch`, in micro-batches of `micro`; the summed losses. */
async function accumulateBatch(
  trainer: ModelTrainer,
  model: CausalLM,
  batch: readonly Example[],
  micro: number,
  packing: boolean,
): Promise<number> {
  let lossSum = 0;
  for (let m = 0; m < batch.length; m += micro) {
    const mb = batch.slice(m, m + micro);
    lossSum += await trainer.accumulateAsync(() => {
      if (packing) {
        const p = packBatch(mb.map((e) => e.ids));
        // Token 0 of each sequence is never a target (the packed row would train it across).
        const mask = packedRows(
          mb.map((e) => e.mask.slice(1)),
          p.lengths,
        ).data;
        return maskedNllLoss(model, p.ids, tf.tensor2d([0, ...mask], [1, p.ids.size]), p);
      }
      const { ids } = padBatch(
        mb.map((e) => e.ids),
        model.config.pad_token_id ?? 0,
      );
      const mask = padBatch(
        mb.map((e) => e.mask),
        0,
      ).ids.toFloat() as tf.Tensor2D;
      return maskedNllLoss(model, ids, mask);
    });
  }
  return lossSum;
}

type SftFlagOptions = Omit<
  SftOptions,
  'verbose' | 'signal' | 'savePath' | 'onEval' | 'metric' | 'env' | 'lora'
> &
  LoraFlagOptions & {
    savePath?: string;
  };

/** The flags of `train_sft`; defaults are {@link trainSft}'s. */
const sftFlags = flagParser<SftFlagOptions>(
  'train_sft',
  [
    { key: 'pretrain', kind: 'string', help: 'HF model directory to start from' },
    { key: 'initBuiltin', kind: 'bool', help: 'start from a fresh built-in tiny model' },
    { key: 'dataset', kind: 'string', help: "built-in dataset ('arith') or JSONL file" },
    { key: 'datasetSize', kind: 'int', help: 'built-in training records', min: 1 },
    {
      key: 'directFraction',
      kind: 'float',
      help: 'built-in only: fraction of records answered directly, without the worked equation',
    },
    { key: 'savePath', kind: 'string', help: 'output HF model directory', required: true },
    {
      key: 'saveDtype',
      kind: 'string',
      help: 'tensor dtype of the saved model',
      choices: ['float32', 'bfloat16'],
    },
    { key: 'ckptPath', kind: 'string', help: 'checkpoint directory (resumed from when present)' },
    { key: 'saveSteps', kind: 'int', help: 'checkpoint interval', min: 1 },
    { key: 'batchSize', kind: 'int', help: 'sequences per step', min: 1 },
    { key: 'microBatchSize', kind: 'int', help: 'sequences per forward/backward', min: 1 },
    {
      key: 'lr',
      kind: 'float',
      help: 'peak learning rate',
      min: 0,
      aliases: ['learning-rate'],
    },
    {
      key: 'lrScheduler',
      kind: 'string',
      help: "learning-rate schedule, as HF transformers' get_scheduler (as train_ppo's)",
      choices: LR_SCHEDULERS,
    },
    { key: 'warmupSteps', kind: 'int', help: 'warmup steps', min: 0 },
    {
      key: 'lrWarmupRatio',
      kind: 'float',
      help: 'warmup as a fraction of --max-steps (replaces --warmup-steps)',
      min: 0,
    },
    { key: 'maxSteps', kind: 'int', help: 'optimizer steps', min: 1 },
    {
      key: 'weightDecay',
      kind: 'float',
      help: 'AdamW weight decay',
      min: 0,
      aliases: ['l2'],
    },
    { key: 'maxGradNorm', kind: 'float', help: 'clip threshold', min: 0 },
    {
      key: 'gradientCheckpointing',
      kind: 'bool',
      help: "recompute each decoder layer's activations, and the LM head's logits 256 tokens at a time, in the backward pass (less memory: a LoRA step of Qwen3-0.6B at 2,048 tokens peaks at 1.45x its weights; ~1/3 more compute)",
    },
    {
      key: 'packingSamples',
      kind: 'bool',
      help: "pack each micro-batch's sequences into one row (attention within each, positions restarting) instead of padding",
    },
    { key: 'maxLen', kind: 'int', help: 'longest sequence in tokens', min: 1 },
    { key: 'seed', kind: 'int', help: 'seed', min: 0 },
    { key: 'logSteps', kind: 'int', help: 'log interval', min: 1 },
    { key: 'evalSteps', kind: 'int', help: 'held-out eval interval (0 = never)', min: 0 },
    { key: 'evalSize', kind: 'int', help: 'held-out problems per eval', min: 1 },
    {
      key: 'stopAtAccuracy',
      kind: 'float',
      help: 'stop once held-out accuracy reaches x (0..1)',
      min: 0,
    },
    ...localEngineFlags('engine of the held-out evaluation'),
    ...trackerFlags,
    ...loraFlagSpecs,
  ],
  { dataset: 'arith', ...loraFlagDefaults },
);

/** Parses `train_sft` command-line arguments and runs it. */
export async function main(argv: string[]): Promise<void> {
  const { options: parsed, given } = sftFlags.parse(argv);
  const opts = await resolveDatasetFlags(await resolveCheckpointFlags(parsed, sftCheckpointFlags), {
    dataset: '--dataset',
  });
  if (opts.pretrain) opts.pretrain = resolve(opts.pretrain);
  const lora = loraSpecOf(opts, opts.pretrain ?? '', given as Set<string>, opts.seed ?? 42);
  // SIGINT/SIGTERM end the run after the current step, with the checkpoint and model written.
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await trainSft({
      ...opts,
      ...(lora ? { lora } : {}),
      savePath: resolve(opts.savePath!),
      signal: stop.signal,
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

runIfMain(import.meta.url, 'train_sft', main, () => sftFlags.help());
