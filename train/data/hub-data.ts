/**
 * Hub datasets by name in `--prompt_data`, `--eval_dataset` and the SFT/RM data: a part
 * `org/name[@config]` that names no local file or folder is a Hub dataset repo, fetched through
 * the one Hub resolver (`model/hub/`: its data files and README only, into the Hub's own cache)
 * and replaced by its snapshot folder `…/snapshots/<commit>`, so every reader after the driver
 * reads one commit. `@config` picks the config folder, as for a local folder (`openai/gsm8k@main`
 * reads `main/train-00000-of-00001.parquet`); the repo is read at its default branch.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { offlineMessage } from '../../model/hub/errors.ts';
import {
  cachedHubSnapshot,
  HubError,
  hubSettings,
  isHubError,
  isCheckpointHubId,
  resolveHubDataset,
  type HubEnv,
} from '../../model/hub/index.ts';
import { builtinDatasets } from './arith.ts';

/** The repo and config of a part that names a Hub dataset, or undefined for anything else. */
export function hubDatasetPart(
  part: string,
  cwd = process.cwd(),
): { repo: string; config?: string } | undefined {
  if (Object.hasOwn(builtinDatasets, part) || existsSync(resolve(cwd, part))) return undefined;
  const at = part.indexOf('@');
  const repo = at < 0 ? part : part.slice(0, at);
  if (!isCheckpointHubId(repo, cwd)) return undefined;
  return at < 0 ? { repo } : { repo, config: part.slice(at + 1) };
}

const parts = (specs: string) =>
  specs
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/**
 * `specs` (comma-separated datasets) with each Hub dataset fetched when the cache lacks it and
 * replaced by `snapshot[@config]`; other parts as given. A Hub failure is one line starting with
 * `flag`.
 *
 * @example
 * await resolveDatasetSpecs('openai/gsm8k@main', '--prompt-data'); // '…/snapshots/<sha>@main'
 */
export async function resolveDatasetSpecs(
  specs: string,
  flag: string,
  o: { env?: HubEnv; cwd?: string } = {},
): Promise<string> {
  const out: string[] = [];
  for (const part of parts(specs)) {
    const hub = hubDatasetPart(part, o.cwd);
    if (!hub) {
      out.push(part);
      continue;
    }
    try {
      const dir = await resolveHubDataset(hub.repo, o.env ? { env: o.env } : {});
      out.push(hub.config === undefined ? dir : `${dir}@${hub.config}`);
    } catch (e) {
      if (!isHubError(e)) throw e;
      throw new HubError(e.code, `${flag}: ${e.message}`, {
        repo: hub.repo,
        status: e.status,
        cause: e,
      });
    }
  }
  return out.join(',');
}

/**
 * Why a Hub dataset of `specs` cannot be read here and now, with no request (offline and not
 * cached); undefined when every one can, or none is a Hub dataset. The submitter's early check.
 */
export function hubDatasetProblem(
  specs: string,
  flag: string,
  env: HubEnv = process.env,
  cwd = process.cwd(),
): string | undefined {
  if (!hubSettings(env).offline) return undefined;
  for (const part of parts(specs)) {
    const hub = hubDatasetPart(part, cwd);
    if (hub && !cachedHubSnapshot({ repo: hub.repo, repoType: 'dataset', env }))
      return `${flag}: ${offlineMessage(hub.repo, 'main', hubSettings(env).cacheDir, true)}`;
  }
  return undefined;
}
