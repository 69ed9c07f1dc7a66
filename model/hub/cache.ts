/**
 * The Hub's cache layout, the one huggingface_hub writes, so Python tools and rtjob share it:
 *
 * ```
 * <cache>/models--org--name/
 *   blobs/<etag>                  each file's bytes once, named by its ETag (sha256 for LFS)
 *   snapshots/<commit>/<path>     relative symlinks into ../../blobs/
 *   refs/<revision>               the commit a branch or tag pointed to when it was fetched
 * <cache>/.locks/models--org--name/<etag>.lock
 * ```
 *
 * @module
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { isCommit, type HubRepoType } from './spec.ts';

/** The paths of one repo in the cache. */
export interface RepoCache {
  /** `<cache>/models--org--name`. */
  readonly dir: string;
  /** `<cache>/.locks/models--org--name`. */
  readonly locks: string;
}

/** The cache folder of `repo` (`models--org--name`, `datasets--org--name`). */
export function repoCache(cacheDir: string, repoType: HubRepoType, repo: string): RepoCache {
  const folder = `${repoType}s--${repo.split('/').join('--')}`;
  return { dir: join(cacheDir, folder), locks: join(cacheDir, '.locks', folder) };
}

/** The file a blob's bytes live in once whole. */
export const blobPath = (c: RepoCache, etag: string): string => join(c.dir, 'blobs', etag);

/** The snapshot folder of a commit. */
export const snapshotDir = (c: RepoCache, commit: string): string =>
  join(c.dir, 'snapshots', commit);

/** The commit `revision` names in the cache: itself when a commit, else `refs/<revision>`. */
export function cachedCommit(c: RepoCache, revision: string): string | undefined {
  if (isCommit(revision)) return revision;
  try {
    const commit = readFileSync(join(c.dir, 'refs', revision), 'utf8').trim();
    return isCommit(commit) ? commit : undefined;
  } catch {
    return undefined;
  }
}

/** Writes `refs/<revision>` (atomically: a reader sees the old commit or the new one). */
export function writeRef(c: RepoCache, revision: string, commit: string): void {
  if (revision === commit) return;
  const path = join(c.dir, 'refs', revision);
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, commit);
  renameSync(tmp, path);
}

/**
 * Puts `snapshots/<commit>/<path>` in place as a relative symlink to the blob, replacing any link
 * there by a rename, so a reader never sees the path missing or half-made.
 */
export function linkSnapshotFile(c: RepoCache, commit: string, path: string, etag: string): void {
  const link = join(snapshotDir(c, commit), path);
  mkdirSync(dirname(link), { recursive: true });
  const tmp = `${link}.${process.pid}.tmp`;
  rmSync(tmp, { force: true });
  symlinkSync(relative(dirname(link), blobPath(c, etag)), tmp);
  renameSync(tmp, link);
}

/**
 * Whether a snapshot holds a loadable whole: for a model, a config (or a PEFT adapter config),
 * safetensors weights and every shard its index names; for a dataset, any file. A link whose
 * blob is gone counts as missing.
 */
export function snapshotComplete(dir: string, repoType: HubRepoType): boolean {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => existsSync(join(dir, n)));
  } catch {
    return false;
  }
  if (repoType === 'dataset') return names.length > 0;
  if (!names.includes('config.json') && !names.includes('adapter_config.json')) return false;
  if (!names.some((n) => n.endsWith('.safetensors'))) return false;
  if (!names.includes('model.safetensors.index.json')) return true;
  try {
    const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8')) as {
      weight_map?: Record<string, string>;
    };
    return Object.values(index.weight_map ?? {}).every((f) => existsSync(join(dir, f)));
  } catch {
    return false;
  }
}
