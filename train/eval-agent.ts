/**
 * `eval_agent`: held-out accuracy of a black-box agent (`export async function agent(sample,
 * env)`) on an HF model directory and the built-in `arith` task, exactly as `train_ppo` evaluates
 * it (the agent runs itself, every turn greedy, right when its reward is 1), plus sampled
 * episodes (temperature 1) split by what the agent reports: with `--split-by used_tool`, how often
 * sampling calls the tool and how often it is right with and without it. This is how the tool
 * warm start's numbers in model/README.md are measured. `--engine llamacpp` generates in llama.cpp
 * instead of the builtin engine.
 *
 * @example
 * node --conditions=rtjob-source --import tsx train/eval-agent.ts model/pretrained/rtjob-tiny-tool \
 *   --agent-func examples/tool-agent.ts --prompts 500 --samples 2 --split-by used_tool
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { runGatewayEpisode } from '../agents/agent-executor.ts';
import { loadAgent } from '../agents/load.ts';
import type { AgentFunction, Sample } from '../agents/types.ts';
import { createEngine, type LocalEngineKind } from '../engines/registry.ts';
import { Gateway } from '../gateway/server.ts';
import { modelCard } from '../gateway/model-card.ts';
import { initBackend } from '../model/backend.ts';
import { loadModel } from '../model/checkpoint.ts';
import type { GgufDtype } from '../model/gguf/index.ts';
import { loadTokenizer, type ChatTokenizer } from '../model/tokenizer.ts';
import { agentTokenizer, type PromptItem } from '../roles/rollout.ts';
import { checkKeys, loadPromptData, PromptSampler } from './ppo/data.ts';
import { trainPpoDefaults } from './ppo/flag-table.ts';
import {
  checkRolloutDtype,
  FlagError,
  flagParser,
  localEngineFlags,
  runIfMain,
} from './driver-flags.ts';
import { checkTrainPpoPaths, pretrainDir, shippedModels } from './ppo/paths.ts';
import { resolveCheckpointSpec } from '../model/hub/index.ts';
import { infoMetrics } from '../algorithms/trajectory.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';

/** One evaluated episode. */
export interface AgentEvalEpisode {
  index: number;
  reward: number;
  info: Record<string, number | string | boolean>;
  /** The episode's tokens (its first trajectory) and which of them the model generated. */
  inputIds: number[];
  lossMask: number[];
  /** Why the episode failed (it then counts as wrong). */
  error?: string;
}

/** What one evaluation pass measures. */
export interface AgentEvalResult {
  correct: number;
  total: number;
  /** Episodes that threw (counted as wrong). */
  failed: number;
  /** `info/<key>` means over the episodes that finished. */
  info: Record<string, number>;
  episodes: AgentEvalEpisode[];
}

/**
 * Runs `agent` once per sample through `gateway` with the training executor, so every episode's
 * tokens and extraInfo are kept (the gateway's `fixedSampling` decides greedy or sampled), and
 * counts the episodes whose reward is 1, as `train_ppo`'s evaluation does. Failed episodes count
 * as wrong, never abort the evaluation.
 */
async function evaluateAgent(
  agent: { file: string; agent: AgentFunction },
  gateway: Gateway,
  samples: Sample[],
): Promise<AgentEvalResult> {
  const episodes = await Promise.all(
    samples.map(async (sample): Promise<AgentEvalEpisode> => {
      const signal = new AbortController().signal;
      try {
        const [t] = await runGatewayEpisode(sample, {
          file: agent.file,
          agent: agent.agent,
          gateway,
          signal,
        });
        return {
          index: sample.index,
          reward: t?.reward ?? 0,
          info: t?.info ?? {},
          inputIds: t?.inputIds ?? [],
          lossMask: t?.lossMask ?? [],
        };
      } catch (err) {
        return {
          index: sample.index,
          reward: 0,
          info: {},
          inputIds: [],
          lossMask: [],
          error: err instanceof Error ? err.message : String(err),
        };
      }
    }),
  );
  const ok = episodes.filter((e) => e.error === undefined);
  return {
    correct: episodes.filter((e) => e.reward === 1).length,
    total: episodes.length,
    failed: episodes.length - ok.length,
    info: infoMetrics(ok),
    episodes,
  };
}

/** Options of {@link evalAgentModel}. */
export interface EvalAgentOptions {
  /** Held-out prompts: a built-in name or a JSONL file, as train_ppo's `--eval-dataset`. @default 'arith:test' */
  dataset?: string;
  /** Record fields holding the prompt and the label. @default train_ppo's (`prompt`, `solution`) */
  inputKey?: string;
  labelKey?: string;
  /** Held-out prompts evaluated (the dataset's first n). @default 500 */
  prompts?: number;
  /** Sampled episodes per problem at temperature 1. @default 0 */
  samples?: number;
  /** New tokens per completion. @default 48 */
  maxNewTokens?: number;
  /** Context cap (prompt + completion) of each completion. @default the model's */
  contextLength?: number;
  /** Engine behind the gateway. @default 'builtin' */
  engine?: LocalEngineKind;
  /** GGUF element type of `engine: 'llamacpp'`. @default 'f32' */
  rolloutDtype?: GgufDtype;
}

/** What {@link evalAgentModel} measures. */
export interface EvalAgentReport {
  greedy: AgentEvalResult;
  sampled?: AgentEvalResult;
}

/** Evaluates the agent in `agentFile` on the model in `dir`. */
export async function evalAgentModel(
  dir: string,
  agentFile: string,
  o: EvalAgentOptions = {},
): Promise<EvalAgentReport> {
  await initBackend();
  const { model, tokenizer } = await loadModel(dir);
  if (!tokenizer) throw new InvalidArgumentError(`eval_agent: ${dir} has no tokenizer.json`);
  const maxNewTokens = o.maxNewTokens ?? 48;
  const agent = await loadAgent(resolve(agentFile), {
    tokenizer: agentTokenizer(tokenizer),
    gconfig: { maxNewTokens },
    nSamples: 1,
    maxLength: 256,
  });
  if (agent.kind !== 'agent')
    throw new InvalidArgumentError(
      `eval_agent: ${agentFile} exports no agent(sample, env) function`,
    );
  const card = modelCard(dir);
  const contextLength = o.contextLength ?? card.contextLength ?? 256;
  const engine = await createEngine(o.engine, {
    model,
    tokenizer,
    seed: 1,
    dtype: o.rolloutDtype,
    maxBatchSize: 256,
    maxSequences: 64,
    contextSize: contextLength,
  });
  const gateway = (temperature: number): Promise<Gateway> =>
    Gateway.start({
      engine,
      tokenizer,
      model: card.name,
      contextLength,
      maxNewTokens,
      fixedSampling: { temperature, topP: 1 },
    });
  const [greedyGw, sampledGw] = await Promise.all([gateway(0), gateway(1)]);
  try {
    const items = await heldOutItems(o);
    const samples = (rep: number): Sample[] =>
      items.map((it) => ({
        ...it,
        promptIds: [],
        nSamples: 1,
        groupId: `eval-${rep}-${it.index}`,
        record: { ...it.record },
      }));
    const greedy = await evaluateAgent(agent, greedyGw, samples(0));
    const n = o.samples ?? 0;
    if (n === 0) return { greedy };
    const runs = await Promise.all(
      Array.from({ length: n }, (_, k) => evaluateAgent(agent, sampledGw, samples(k + 1))),
    );
    const episodes = runs.flatMap((r) => r.episodes);
    const info: Record<string, number> = {};
    for (const k of new Set(runs.flatMap((r) => Object.keys(r.info))))
      info[k] = runs.reduce((s, r) => s + (r.info[k] ?? 0), 0) / runs.length;
    return {
      greedy,
      sampled: {
        correct: episodes.filter((e) => e.reward === 1).length,
        total: episodes.length,
        failed: runs.reduce((s, r) => s + r.failed, 0),
        info,
        episodes,
      },
    };
  } finally {
    await Promise.all([greedyGw.close(), sampledGw.close()]);
    await engine.close();
    model.dispose();
  }
}

/** The held-out prompts, read as train_ppo reads its `--eval-dataset` (one loader, same keys). */
async function heldOutItems(o: EvalAgentOptions): Promise<PromptItem[]> {
  const prompts = o.prompts ?? trainPpoDefaults.evalPrompts;
  const records = await loadPromptData(
    o.dataset ?? trainPpoDefaults.evalDataset,
    '--eval-dataset',
    {
      size: prompts,
      split: trainPpoDefaults.evalSplit,
      maxSamples: prompts,
    },
  );
  const keys = {
    input: o.inputKey ?? trainPpoDefaults.inputKey,
    label: o.labelKey ?? trainPpoDefaults.labelKey,
  };
  checkKeys(records, keys.input, keys.label, '--eval-dataset');
  const sampler = new PromptSampler(records, keys, 0);
  return records.slice(0, prompts).map((_, i) => sampler.item(i, `eval-${i}`));
}

/** The episode's text with the generated runs of tokens in ⟪ ⟫. */
function transcript(tok: ChatTokenizer, e: AgentEvalEpisode): string {
  let out = '';
  for (let i = 0; i < e.inputIds.length; ) {
    let j = i;
    while (j < e.inputIds.length && e.lossMask[j] === e.lossMask[i]) j++;
    const text = tok.decode(e.inputIds.slice(i, j), { skipSpecialTokens: false });
    out += e.lossMask[i] ? `⟪${text}⟫` : text;
    i = j;
  }
  return out;
}

const pct = (a: number, b: number): string => (b ? `${((a / b) * 100).toFixed(1)}%` : '  -  ');

function describe(name: string, r: AgentEvalResult, splitBy: string | undefined): string[] {
  const failed = r.failed ? ` (${r.failed} failed)` : '';
  const lines = [
    // The greedy line reads as train_ppo's own eval line.
    name === 'greedy'
      ? `held-out accuracy ${pct(r.correct, r.total)} (${r.total} prompts, greedy)${failed}`
      : `${name.padEnd(8)} ${pct(r.correct, r.total)} right on ${r.total} episodes${failed}`,
  ];
  // The agent's own extraInfo; the gateway's bookkeeping (gateway/…) only in --json.
  const info = Object.entries(r.info)
    .filter(([k]) => k.startsWith('info/'))
    .map(([k, v]) => `${k.slice('info/'.length)} ${v.toFixed(3)}`);
  if (info.length) lines.push(`         mean ${info.join(', ')}`);
  if (splitBy) {
    for (const v of [
      ...new Set(r.episodes.map((e) => e.info[splitBy]).filter((x) => x !== undefined)),
    ].sort()) {
      const part = r.episodes.filter((e) => e.info[splitBy] === v);
      lines.push(
        `         ${splitBy}=${String(v)}: ${part.length} episodes (${pct(part.length, r.total)}), ${pct(part.filter((e) => e.reward === 1).length, part.length)} right`,
      );
    }
  }
  return lines;
}

const evalAgentFlags = (program: string) =>
  flagParser<{
    agentFunc?: string;
    evalDataset: string;
    inputKey: string;
    labelKey: string;
    prompts: number;
    samples: number;
    maxNewTokens: number;
    engine: LocalEngineKind;
    rolloutDtype: GgufDtype;
    splitBy?: string;
    show: number;
    json: boolean;
  }>(
    program,
    [
      { key: 'agentFunc', kind: 'string', help: 'the agent file', required: true },
      {
        key: 'evalDataset',
        kind: 'string',
        help: "held-out prompts: a built-in name or a JSONL file (train_ppo's --eval-dataset)",
      },
      { key: 'inputKey', kind: 'string', help: 'record field holding the prompt' },
      { key: 'labelKey', kind: 'string', help: 'record field handed to the agent as the label' },
      {
        key: 'prompts',
        kind: 'int',
        help: "held-out prompts evaluated, the dataset's first n (arith:test has 500 distinct)",
        min: 1,
      },
      {
        key: 'samples',
        kind: 'int',
        help: 'sampled episodes per problem at temperature 1',
        min: 0,
      },
      { key: 'maxNewTokens', kind: 'int', help: 'new tokens per completion', min: 1 },
      ...localEngineFlags('engine behind the gateway'),
      {
        key: 'splitBy',
        kind: 'string',
        help: "split episodes by this extraInfo key's values (e.g. used_tool)",
      },
      {
        key: 'show',
        kind: 'int',
        help: 'print the first n greedy episodes token for token, generated parts in ⟪ ⟫',
        min: 0,
      },
      { key: 'json', kind: 'bool', help: 'print the report as JSON' },
    ],
    {
      evalDataset: trainPpoDefaults.evalDataset,
      inputKey: trainPpoDefaults.inputKey,
      labelKey: trainPpoDefaults.labelKey,
      prompts: trainPpoDefaults.evalPrompts,
      samples: 0,
      maxNewTokens: 48,
      engine: 'builtin',
      rolloutDtype: 'f32',
      show: 0,
      json: false,
    },
    { positionals: '<model-dir>' },
  );

/**
 * The model directory `given` names: a directory with a `config.json`, a job id whose policy
 * `train_ppo` saved to `./ckpt/<job id>`, or a shipped model's short name (as `--pretrain` takes);
 * a Hub id is resolved to its snapshot before.
 */
function modelDirOf(given: string): string {
  const dir = pretrainDir(given);
  for (const d of [dir, join('ckpt', given)])
    if (existsSync(join(d, 'config.json'))) return resolve(d);
  throw new FlagError(
    '<model-dir>',
    existsSync(dir)
      ? `${given} holds no config.json: give an HF model directory (the policy train_ppo saved, e.g. ./ckpt/JOB)`
      : `no model directory at ${given} (the policy train_ppo saved, e.g. ./ckpt/JOB; shipped: ${shippedModels.join(', ')})`,
  );
}

/** `eval_agent`'s flag help, headed by the program's name (`eval_agent`, or `rtjob eval`). */
export function evalAgentHelp(program = 'eval_agent'): string {
  return evalAgentFlags(program).help();
}

/**
 * Parses `eval_agent` arguments, evaluates and prints a report (`--json` for machine output).
 * `program` names the command in errors (`rtjob eval` runs this too).
 */
export async function main(argv: string[], program = 'eval_agent'): Promise<void> {
  const { options: o, positionals } = evalAgentFlags(program).parse(argv);
  if (positionals.length !== 1) {
    throw new FlagError(
      '<model-dir>',
      `give one HF model directory, e.g. ${program} ./ckpt/JOB --agent-func ./agent.ts`,
    );
  }
  checkRolloutDtype(o);
  checkTrainPpoPaths({
    agentFunc: o.agentFunc!,
    pretrain: '',
    promptData: '',
    evalDataset: o.evalDataset,
  });
  const modelDir = modelDirOf(await resolveCheckpointSpec(positionals[0]!, '<model-dir>'));
  const r = await evalAgentModel(modelDir, o.agentFunc!, {
    dataset: o.evalDataset,
    inputKey: o.inputKey,
    labelKey: o.labelKey,
    prompts: o.prompts,
    samples: o.samples,
    maxNewTokens: o.maxNewTokens,
    engine: o.engine,
    rolloutDtype: o.rolloutDtype,
  });
  if (o.json) {
    console.log(JSON.stringify(r, null, 2));
    return;
  }
  for (const l of describe('greedy', r.greedy, o.splitBy)) console.log(l);
  if (o.show > 0) {
    const tok = loadTokenizer(modelDir);
    for (const e of r.greedy.episodes.slice(0, o.show))
      console.log(`episode ${e.index}, reward ${e.reward}: ${transcript(tok, e)}`);
  }
  if (r.sampled) for (const l of describe('sampled', r.sampled, o.splitBy)) console.log(l);
}

/**
 * Runs the evaluation as the main of the module at `moduleUrl` under the name `program`: `rtjob
 * eval`'s process (`cli/eval-main.ts`) runs it so; run directly, this file is `eval_agent`.
 */
export function runEvalAgent(moduleUrl: string, program = 'eval_agent'): void {
  runIfMain(
    moduleUrl,
    program,
    (argv) => main(argv, program),
    () => evalAgentHelp(program),
  );
}

runEvalAgent(import.meta.url);
