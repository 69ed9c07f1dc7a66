/**
 * Hugging Face Hub repos by name, through the Hub's own cache (shared with Python tools):
 * `resolveHubRepo` for any repo, {@link resolveHubDataset} for a dataset's data files, and the
 * spec helpers a flag parser needs.
 *
 * @module
 */
import { resolveHubRepo, type ResolveHubRepoOptions } from './resolve.ts';
import { isDatasetFile, parseHubSpec } from './spec.ts';

export type { CheckpointSpecOptions } from './checkpoint-spec.ts';
export type { HubErrorCode } from './errors.ts';
export type { HubEnv, HubSettings } from './hub-env.ts';
export type { ProgressSink } from './progress.ts';
export type { ResolvedHubRepo, ResolveHubRepoOptions } from './resolve.ts';
export type { RetryOptions } from './retry.ts';
export type { HubRepoType, HubSpec } from './spec.ts';

export {
  cachedCheckpoint,
  hubCheckpointProblem,
  isCheckpointHubId,
  resolveCheckpointSpec,
} from './checkpoint-spec.ts';
export { HubError, isHubError } from './errors.ts';
export { hubCacheDir, hubSettings, hubToken } from './hub-env.ts';
export { cachedHubSnapshot, resolveHubRepo } from './resolve.ts';
export { isDatasetFile, isHubId, isModelFile, parseHubSpec } from './spec.ts';

/**
 * A Hub dataset `org/name[@rev]` as a local snapshot folder holding its data files (`*.parquet`,
 * `*.jsonl`, `*.json`, `*.csv`) and its `README.md`; the dataset readers take the folder.
 *
 * @example
 * const dir = await resolveHubDataset('openai/gsm8k'); // …/datasets--openai--gsm8k/snapshots/<commit>
 */
export async function resolveHubDataset(
  spec: string,
  o: Omit<ResolveHubRepoOptions, 'repo' | 'revision' | 'repoType'> = {},
): Promise<string> {
  const { repo, revision } = parseHubSpec(spec);
  const { dir } = await resolveHubRepo({
    allow: isDatasetFile,
    ...o,
    repo,
    revision,
    repoType: 'dataset',
  });
  return dir;
}
