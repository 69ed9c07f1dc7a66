/**
 * The one door every flag and command that takes a checkpoint (`--pretrain`, `--reward-pretrain`,
 * `--teacher-pretrain`, `--load-lora`, `rtjob serve`, `rtjob eval`, `rtjob merge-lora`,
 * train_sft, train_rm) goes through: a local path stays as given, a Hub id becomes its local
 * snapshot folder, pinned to a commit (the folder is `snapshots/<commit>`), so whatever the
 * caller hands on names one commit whichever node reads it.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { HubError, isHubError, offlineMessage } from './errors.ts';
import { hubSettings, type HubEnv } from './hub-env.ts';
import { cachedHubSnapshot, resolveHubRepo, type ResolveHubRepoOptions } from './resolve.ts';
import { isHubId, parseHubSpec } from './spec.ts';

/** How a checkpoint spec is resolved. */
export type CheckpointSpecOptions = Omit<
  ResolveHubRepoOptions,
  'repo' | 'revision' | 'repoType'
> & {
  /** Where a relative local path is looked for. @default process.cwd() */
  cwd?: string;
};

/**
 * Whether `spec` names a Hub repo rather than a local path: it reads as `org/name[@rev]` and no
 * file or folder of that name exists under `cwd` (a local one wins).
 *
 * @example
 * isCheckpointHubId('Qwen/Qwen3-0.6B'); // true, unless ./Qwen/Qwen3-0.6B exists
 */
export function isCheckpointHubId(spec: string, cwd = process.cwd()): boolean {
  return isHubId(spec) && !existsSync(resolve(cwd, spec));
}

/**
 * `spec` as a local checkpoint folder: a Hub id resolved (and fetched when the cache lacks it),
 * anything else returned as given for the caller's own checks. A failure is a one-line
 * {@link HubError} that starts with `flag`.
 *
 * @example
 * const dir = await resolveCheckpointSpec('Qwen/Qwen3-0.6B@main', '--pretrain');
 */
export async function resolveCheckpointSpec(
  spec: string,
  flag: string,
  o: CheckpointSpecOptions = {},
): Promise<string> {
  const { cwd, ...rest } = o;
  if (!isCheckpointHubId(spec, cwd)) return spec;
  const { repo, revision } = parseHubSpec(spec);
  try {
    return (await resolveHubRepo({ ...rest, repo, revision, repoType: 'model' })).dir;
  } catch (e) {
    if (!isHubError(e)) throw e;
    throw new HubError(e.code, `${flag}: ${e.message}`, { repo, status: e.status, cause: e });
  }
}

/**
 * The snapshot folder the cache already holds for the Hub id `spec`, with no request; undefined
 * for a local path or a Hub id not cached whole.
 */
export function cachedCheckpoint(
  spec: string,
  env: HubEnv = process.env,
  cwd = process.cwd(),
): string | undefined {
  if (!isCheckpointHubId(spec, cwd)) return undefined;
  const { repo, revision } = parseHubSpec(spec);
  return cachedHubSnapshot({ repo, revision, repoType: 'model', env })?.dir;
}

/**
 * Why the Hub id `spec` cannot be resolved here and now, with no request: offline
 * (`HF_HUB_OFFLINE=1`) and not in the cache; undefined when it can (or is no Hub id). What a
 * submitter checks before it starts a cluster.
 */
export function hubCheckpointProblem(
  spec: string,
  flag: string,
  env: HubEnv = process.env,
  cwd = process.cwd(),
): string | undefined {
  if (!isCheckpointHubId(spec, cwd) || !hubSettings(env).offline) return undefined;
  const { repo, revision } = parseHubSpec(spec);
  if (cachedHubSnapshot({ repo, revision, repoType: 'model', env })) return undefined;
  return `${flag}: ${offlineMessage(repo, revision, hubSettings(env).cacheDir, false)}`;
}
