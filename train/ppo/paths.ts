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
import { closest } from '../driver-flags.ts';
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

/** Why `spec` cannot be the dataset of `flag`, or undefined (a built-in name or a readable file). */
export function datasetProblem(
  spec: string,
  flag: string,
  cwd = process.cwd(),
): string | undefined {
  if (Object.hasOwn(builtinDatasets, spec)) return undefined;
  const path = resolve(cwd, spec);
  if (isFile(path)) return undefined;
  const builtins = Object.keys(builtinDatasets).join(', ');
  if (/^[\w-]+@/.test(spec) && !existsSync(path))
    return `${flag}: '${spec}' is OpenRLHF's TYPE@DIR form (datasets.load_dataset), which rtjob does not read: give a JSONL file, one JSON object per line (--input-key, --label-key), or a built-in dataset (${builtins})`;
  if (existsSync(path))
    return `${flag}: ${spec} is a directory: give a JSONL file in it, one JSON object per line`;
  return `${flag}: '${spec}' is neither a built-in dataset (${builtins}) nor a readable JSONL file`;
}

/**
 * Checks the agent file, the model directory and the datasets of `o` against `cwd`, the directory
 * the job runs in; throws a {@link FlagError} naming the flag.
 */
export function checkTrainPpoPaths(
  o: Pick<TrainPpoOptions, 'agentFunc' | 'pretrain' | 'promptData' | 'evalDataset'>,
  cwd = process.cwd(),
  env: Record<string, string | undefined> = process.env,
): void {
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
  for (const [flag, spec] of [
    ['--prompt-data', o.promptData],
    ['--eval-dataset', o.evalDataset],
  ] as const) {
    const problem = spec ? datasetProblem(spec, flag, cwd) : undefined;
    if (problem) throw new FlagError(flag, problem);
  }
}
