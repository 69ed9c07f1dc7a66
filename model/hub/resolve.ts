/**
 * `org/name[@rev]` to a local snapshot folder, through the Hub's own cache: a revision already
 * cached whole is used with no request (so a model `huggingface-cli` fetched costs nothing, and
 * `HF_HUB_OFFLINE=1` works), else the Hub names the commit, and the files a load needs are
 * fetched into `blobs/`, several at once, each under its lock, and linked into
 * `snapshots/<commit>/`. `refs/<rev>` is written last, once the snapshot is whole.
 *
 * @module
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Semaphore } from '../../runtime/semaphore.ts';
import { revisionInfo, type HubRequest } from './api.ts';
import { blobPath, cachedCommit, linkSnapshotFile, repoCache, snapshotComplete } from './cache.ts';
import { snapshotDir, writeRef, type RepoCache } from './cache.ts';
import { downloadBlob } from './download.ts';
import { HubError, offlineMessage } from './errors.ts';
import { fileMeta, type FileMeta } from './file-meta.ts';
import { hubSettings, type HubEnv } from './hub-env.ts';
import { lockBlob } from './lock.ts';
import { progress, stderrSink, type Progress, type ProgressSink } from './progress.ts';
import { retryDefaults, withRetries, type RetryOptions } from './retry.ts';
import { isDatasetFile, isModelFile, type HubRepoType } from './spec.ts';

/** What to resolve, and how. */
export interface ResolveHubRepoOptions {
  /** `org/name`. */
  repo: string;
  /** A branch, tag or commit. @default 'main' */
  revision?: string;
  repoType: HubRepoType;
  /** Which of the repo's files to fetch. @default the files a model load or dataset read needs */
  allow?: (path: string) => boolean;
  /** Where progress goes. @default stderr (a redrawn line on a terminal, else a line per file) */
  log?: ProgressSink;
  /** The environment (`HF_HUB_CACHE`, `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`, …). @default process.env */
  env?: HubEnv;
  /** Files fetched at once. @default 4 */
  concurrency?: number;
  /** Retries of a reset, a 5xx or a 429. @default {@link retryDefaults} */
  retry?: RetryOptions;
  /** A request silent this long is dropped and resumed. @default 60_000 */
  idleTimeoutMs?: number;
  /** Another process's blob lock untouched this long is taken over. @default 60_000 */
  lockStaleMs?: number;
}

/** A resolved repo: the snapshot folder and the commit it is. */
export interface ResolvedHubRepo {
  /** `<cache>/models--org--name/snapshots/<commit>`. */
  readonly dir: string;
  readonly commit: string;
}

/**
 * Resolves a Hub repo to a local snapshot, fetching what the cache lacks.
 *
 * @example
 * const { dir, commit } = await resolveHubRepo({ repo: 'Qwen/Qwen3-0.6B', repoType: 'model' });
 */
export async function resolveHubRepo(o: ResolveHubRepoOptions): Promise<ResolvedHubRepo> {
  const settings = hubSettings(o.env ?? process.env);
  const revision = o.revision ?? 'main';
  const cache = repoCache(settings.cacheDir, o.repoType, o.repo);
  const cached = cachedHubSnapshot(o);
  if (cached) return cached;
  if (settings.offline)
    throw new HubError(
      'HUB_OFFLINE',
      offlineMessage(o.repo, revision, settings.cacheDir, o.repoType === 'dataset'),
      { repo: o.repo },
    );
  const retry = { ...retryDefaults, ...o.retry };
  const request: HubRequest = { settings, repoType: o.repoType, repo: o.repo, revision };
  const info = await withRetries(() => revisionInfo(request), retry);
  const allow = o.allow ?? (o.repoType === 'dataset' ? isDatasetFile : isModelFile);
  const files = info.files.filter((f) => allow(f));
  if (files.length === 0)
    throw new HubError(
      'HUB_ENTRY_NOT_FOUND',
      `${o.repo}@${revision} holds none of the files a ${o.repoType} load reads (it has ${info.files.slice(0, 5).join(', ') || 'no files'})`,
      { repo: o.repo },
    );
  const pinned: HubRequest = { ...request, revision: info.commit };
  const fetch = new Fetcher(o, cache, pinned, retry);
  await fetch.all(files.filter((f) => !existsSync(join(snapshotDir(cache, info.commit), f))));
  writeRef(cache, revision, info.commit);
  return { dir: snapshotDir(cache, info.commit), commit: info.commit };
}

/**
 * The snapshot the cache already holds whole for `o`'s revision, with no request (what
 * `HF_HUB_OFFLINE=1` reads); undefined when it holds none.
 */
export function cachedHubSnapshot(
  o: Pick<ResolveHubRepoOptions, 'repo' | 'revision' | 'repoType' | 'env'>,
): ResolvedHubRepo | undefined {
  const cache = repoCache(hubSettings(o.env ?? process.env).cacheDir, o.repoType, o.repo);
  const commit = cachedCommit(cache, o.revision ?? 'main');
  if (!commit || !snapshotComplete(snapshotDir(cache, commit), o.repoType)) return undefined;
  return { dir: snapshotDir(cache, commit), commit };
}

/** The fetch of one snapshot's missing files: metadata, then blobs, a few at once. */
class Fetcher {
  private readonly abort = new AbortController();
  private readonly slots: Semaphore;

  constructor(
    private readonly o: ResolveHubRepoOptions,
    private readonly cache: RepoCache,
    private readonly request: HubRequest,
    private readonly retry: Required<RetryOptions>,
  ) {
    this.slots = new Semaphore(o.concurrency ?? 4);
  }

  async all(files: readonly string[]): Promise<void> {
    if (files.length === 0) return;
    const metas = await this.each(files, (f) =>
      withRetries(
        () => fileMeta(this.request, f, this.abort.signal),
        this.retry,
        this.abort.signal,
      ),
    );
    const fresh = metas.filter((m) => !existsSync(blobPath(this.cache, m.etag)));
    const total = fresh.reduce((n, m) => n + (m.size ?? 0), 0);
    const label = `${this.o.repo}@${this.request.revision.slice(0, 8)}`;
    const p = progress(label, files.length, total, this.o.log ?? stderrSink);
    await this.each(files, (f, i) => this.one(f, metas[i]!, p));
    p.finish();
  }

  /** Runs `fn` over `items` within the slots; the first failure aborts the rest, and is thrown. */
  private async each<T, R>(items: readonly T[], fn: (x: T, i: number) => Promise<R>): Promise<R[]> {
    const runs = items.map((x, i) => this.slots.with(() => this.guard(() => fn(x, i))));
    const settled = await Promise.allSettled(runs);
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw this.abort.signal.reason ?? failed.reason;
    return settled.map((s) => (s as PromiseFulfilledResult<R>).value);
  }

  private async guard<R>(fn: () => Promise<R>): Promise<R> {
    if (this.abort.signal.aborted) throw new HubError('HUB_NETWORK', 'aborted');
    try {
      return await fn();
    } catch (e) {
      this.abort.abort(e);
      throw e;
    }
  }

  /** One file: its blob fetched under the blob's lock (unless whole already), then linked. */
  private async one(path: string, meta: FileMeta, p: Progress): Promise<void> {
    const blob = blobPath(this.cache, meta.etag);
    const started = Date.now();
    let fetched = 0;
    const lock = await lockBlob(join(this.cache.locks, `${meta.etag}.lock`), {
      done: () => existsSync(blob),
      ...(this.o.lockStaleMs !== undefined ? { staleMs: this.o.lockStaleMs } : {}),
    });
    try {
      mkdirSync(dirname(blob), { recursive: true });
      if (lock && !existsSync(blob))
        await downloadBlob({
          request: this.request,
          path,
          meta,
          blob,
          retry: this.retry,
          idleTimeoutMs: this.o.idleTimeoutMs ?? 60_000,
          onBytes: (n) => {
            fetched += n;
            p.bytes(n);
          },
          signal: this.abort.signal,
        });
    } finally {
      lock?.release();
    }
    linkSnapshotFile(this.cache, this.request.revision, path, meta.etag);
    p.fileDone(path, fetched, Date.now() - started);
  }
}
