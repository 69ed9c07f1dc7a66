/**
 * The local paths of a `train_ppo` command line (agent file, `--pretrain`, datasets), checked
 * against the directory the job will run in, so that `rtjob submit` reports a missing file, a Hub
 * id it cannot fetch offline or an unreadable dataset spec in one line before any cluster starts,
 * and the driver the same way when it starts. Light on imports: the CLI loads it.
 *
 * @module
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hubCheckpointProblem, isCheckpointHubId } from '../../model/hub/index.ts';
import { ppoCheckpointFlags } from '../checkpoint-flags.ts';
import { builtinDatasets } from '../data/arith.ts';
import { DatasetError } from '../data/errors.ts';
import { hubDatasetPart, hubDatasetProblem } from '../data/hub-data.ts';
import { datasetFiles, parseSpec } from '../data/layout.ts';
import { closest } from '../flag-suggest.ts';
import { FlagError } from './flags.ts';
import type { TrainPpoOptions } from './options.ts';

/** The shipped warm-start model. */
export const defaultPretrain = fileURLToPath(
  new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url),
);

/** The checkpoints the package ships, by the short name `--pretrain` accepts. */
export const shippedModels = ['rtjob-tiny-math', 'rtjob-tiny-tool'] as const;

/** `--pretrain` as given: a directory, or the short name of a shipped model. */
export function pretrainDir(p: string, cwd = process.cwd()): string {
  if (existsSync(resolve(cwd, p)) || !(shippedModels as readonly string[]).includes(p)) return p;
  return fileURLToPath(new URL(`../../model/pretrained/${p}`, import.meta.url));
}

const isFile = (p: string): boolean => existsSync(p) && statSync(p).isFile();

/** `./agnt.ts` → ` (did you mean ./agent.ts?)` when a module with a near name is beside it. */
function nearModule(given: string, path: string): string {
  let names: string[];
  try {
    names = readdirSync(dirname(path)).filter((n) => /\.(ts|mts|js|mjs)$/.test(n));
  } catch {
    return '';
  }
  const near = closest(basename(path), names, 3);
  return near ? ` (did you mean ${join(dirname(given), near).replace(/^(?![./])/, './')}?)` : '';
}

/**
 * Why `spec` (comma-separated datasets: built-in names, files, directories) cannot be the dataset
 * of `flag` with `split`, or undefined. Reads no records: the layout only (`train/data/layout.ts`);
 * a Hub dataset only when offline and not cached (its layout is checked once it is fetched).
 */
export function datasetProblem(
  spec: string,
  flag: string,
  cwd = process.cwd(),
  split = 'train',
  env: Record<string, string | undefined> = process.env,
): string | undefined {
  const hub = hubDatasetProblem(spec, flag, env, cwd);
  if (hub) return hub;
  for (const part of spec.split(',').map((s) => s.trim())) {
    if (Object.hasOwn(builtinDatasets, part) || hubDatasetPart(part, cwd)) continue;
    const { path, config } = parseSpec(part);
    try {
      datasetFiles(resolve(cwd, path), { split, ...(config !== undefined ? { config } : {}) });
    } catch (err) {
      if (!(err instanceof DatasetError)) throw err;
      const builtins = Object.keys(builtinDatasets).join(', ');
      return err.code === 'DATASET_NOT_FOUND' && !existsSync(resolve(cwd, path))
        ? `${flag}: '${part}' is neither a built-in dataset (${builtins}) nor a file or directory`
        : `${flag}: ${err.message}`;
    }
  }
  return undefined;
}

/** How an OpenRLHF agent in Python (`AgentInstance` / `AgentExecutor`) ports to an agent module. */
function pythonAgent(file: string): string {
  return (
    `--agent-func: ${file} is Python; rtjob loads a .ts or .js module. An OpenRLHF AgentInstance ports as ` +
    'export async function step(observation, action, label, ctx) returning { reward, done, environmentFeedback? } ' +
    '(its step() with the states dict spread into arguments); a custom AgentExecutor.execute() as export class Workflow, ' +
    'or agent(sample, env) with any OpenAI client (examples/agent.ts; README: Training with your own agent)'
  );
}

/**
 * Checks the agent file, the model directory and the datasets of `o` against `cwd`, the directory
 * the job runs in; throws a {@link FlagError} naming the flag.
 */
export function checkTrainPpoPaths(
  o: Pick<TrainPpoOptions, 'agentFunc' | 'pretrain' | 'promptData' | 'evalDataset'> &
    Partial<Pick<TrainPpoOptions, 'promptSplit' | 'evalSplit'>>,
  cwd = process.cwd(),
  env: Record<string, string | undefined> = process.env,
): void {
  if (o.agentFunc?.endsWith('.py')) throw new FlagError('--agent-func', pythonAgent(o.agentFunc));
  if (o.agentFunc) {
    const path = isAbsolute(o.agentFunc) ? o.agentFunc : resolve(cwd, o.agentFunc);
    if (existsSync(path) && !isFile(path))
      throw new FlagError(
        '--agent-func',
        `--agent-func: ${o.agentFunc} is a directory: give the agent module itself, e.g. ${join(o.agentFunc, 'agent.ts')}`,
      );
    if (!existsSync(path))
      throw new FlagError(
        '--agent-func',
        `--agent-func: no such file ${o.agentFunc}${nearModule(o.agentFunc, path)}`,
      );
  }
  // A Hub id is resolved by the driver; here only what must fail with no request (offline).
  for (const [key, flag] of Object.entries(ppoCheckpointFlags)) {
    const spec = (o as Partial<Record<string, unknown>>)[key];
    const problem =
      typeof spec === 'string' ? hubCheckpointProblem(spec, flag, env, cwd) : undefined;
    if (problem) throw new FlagError(flag, problem);
  }
  const pretrain = o.pretrain ? pretrainDir(o.pretrain, cwd) : defaultPretrain;
  if (!existsSync(resolve(cwd, pretrain)) && !isCheckpointHubId(pretrain, cwd)) {
    throw new FlagError(
      '--pretrain',
      `--pretrain: no model directory at ${pretrain} (a local HF-format directory, a Hugging Face Hub id org/name[@revision]; shipped: ${shippedModels.join(', ')})`,
    );
  }
  for (const [flag, spec, split] of [
    ['--prompt-data', o.promptData, o.promptSplit ?? 'train'],
    ['--eval-dataset', o.evalDataset, o.evalSplit ?? 'test'],
  ] as const) {
    const problem = spec ? datasetProblem(spec, flag, cwd, split, env) : undefined;
    if (problem) throw new FlagError(flag, problem);
  }
}

/**
 * Checks `--input-key` and `--label-key` against the first record of each local dataset of
 * `--prompt-data` and `--eval-dataset` (a built-in set has its own keys, a Hub dataset is checked
 * once it is fetched), so a wrong key fails before any cluster starts, naming the flag and the
 * fields there are. Reads one record per dataset.
 */
export async function checkTrainPpoKeys(
  o: Pick<
    TrainPpoOptions,
    'promptData' | 'evalDataset' | 'inputKey' | 'labelKey' | 'applyChatTemplate'
  > &
    Partial<Pick<TrainPpoOptions, 'promptSplit' | 'evalSplit'>>,
  cwd = process.cwd(),
): Promise<void> {
  const [{ readRecords }, { checkKeys }] = await Promise.all([
    import('../data/read.ts'),
    import('./data.ts'),
  ]);
  for (const [flag, spec, split] of [
    ['--prompt-data', o.promptData, o.promptSplit ?? 'train'],
    ['--eval-dataset', o.evalDataset, o.evalSplit ?? 'test'],
  ] as const) {
    for (const part of spec.split(',').map((s) => s.trim())) {
      if (!part || Object.hasOwn(builtinDatasets, part) || hubDatasetPart(part, cwd)) continue;
      const first: Record<string, unknown>[] = [];
      try {
        for await (const r of readRecords(resolve(cwd, part), { split, maxSamples: 1 }))
          first.push(r);
      } catch (err) {
        if (err instanceof DatasetError) throw new FlagError(flag, `${flag}: ${err.message}`);
        throw err;
      }
      if (first.length > 0) checkKeys(first, o.inputKey, o.labelKey, flag, o.applyChatTemplate);
    }
  }
}
