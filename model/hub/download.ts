/**
 * One blob's bytes into the cache: written to `blobs/<etag>.incomplete`, resumed with an HTTP
 * `Range` after a dropped connection, retried with backoff, checked against its ETag (sha256 for
 * an LFS file, the git blob sha1 otherwise) and its size, and only then renamed to
 * `blobs/<etag>`, so a half-written file is never taken for a whole one.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream, renameSync, rmSync, statSync, truncateSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { authHeaders, errorOf, unreachable, type HubRequest } from './api.ts';
import { HubError } from './errors.ts';
import type { FileMeta } from './file-meta.ts';
import { withRetries, type ResolvedRetry } from './retry.ts';

/** How one blob is fetched. */
export interface BlobDownload {
  readonly request: HubRequest;
  readonly path: string;
  readonly meta: FileMeta;
  /** `blobs/<etag>`. */
  readonly blob: string;
  readonly retry: ResolvedRetry;
  /** A request that sends no byte for this long is dropped and resumed. */
  readonly idleTimeoutMs: number;
  /** Called with each chunk's size, resumed bytes included once. */
  readonly onBytes: (n: number) => void;
  /** Aborts the download (another file of the repo failed). */
  readonly signal?: AbortSignal;
}

const sizeOf = (p: string): number => {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
};

/** Fetches the blob (resuming a `.incomplete` one), checks it and moves it into place. */
export async function downloadBlob(d: BlobDownload): Promise<void> {
  const partial = `${d.blob}.incomplete`;
  const { size } = d.meta;
  if (size !== undefined && sizeOf(partial) > size) truncateSync(partial, 0);
  d.onBytes(sizeOf(partial));
  await withRetries(() => fetchRest(d, partial), d.retry, d.signal);
  const got = sizeOf(partial);
  const digest = await hashOf(partial, d.meta.etag, got);
  if ((size !== undefined && got !== size) || (digest !== undefined && digest !== d.meta.etag)) {
    rmSync(partial, { force: true });
    throw new HubError(
      'HUB_CORRUPT',
      `${d.request.repo}: ${d.path} came corrupt (${got} bytes, ${digest ? `hash ${digest.slice(0, 12)}…` : 'size'} where the Hub gave ${size ?? '?'} bytes, ${d.meta.etag.slice(0, 12)}…); nothing was cached, try again`,
      { repo: d.request.repo },
    );
  }
  renameSync(partial, d.blob);
}

/** One try: GET from where `partial` ends, append to it; a short body is a retryable drop. */
async function fetchRest(d: BlobDownload, partial: string): Promise<void> {
  const have = sizeOf(partial);
  if (d.meta.size !== undefined && have === d.meta.size) return;
  const idle = new AbortController();
  let timer = setTimeout(() => idle.abort(), d.idleTimeoutMs);
  const req = { ...d.request, path: d.path };
  try {
    const res = await fetch(d.meta.url, {
      headers: {
        ...(d.meta.onHub ? authHeaders(d.request.settings) : {}),
        ...(have > 0 ? { range: `bytes=${have}-` } : {}),
        'accept-encoding': 'identity',
      },
      signal: d.signal ? AbortSignal.any([idle.signal, d.signal]) : idle.signal,
    }).catch((e: unknown) => {
      throw unreachable(e, req, d.meta.url);
    });
    if (!res.ok) {
      await res.body?.cancel();
      throw errorOf(res, req);
    }
    // A server that ignores Range sends the whole file again: start the file over.
    const from = res.status === 206 ? have : 0;
    if (from === 0 && have > 0) d.onBytes(-have);
    const file = await open(partial, from === 0 ? 'w' : 'a');
    try {
      const reader = res.body?.getReader();
      for (let r = await reader?.read(); reader && r && !r.done; r = await reader.read()) {
        clearTimeout(timer);
        timer = setTimeout(() => idle.abort(), d.idleTimeoutMs);
        await file.write(r.value);
        d.onBytes(r.value.byteLength);
      }
    } finally {
      await file.close();
    }
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOSPC')
      throw new HubError(
        'HUB_DISK_FULL',
        `disk full writing ${partial} (${d.request.repo}: ${d.path}, ${d.meta.size ?? '?'} bytes): free space or set HF_HUB_CACHE to another disk`,
        { repo: d.request.repo, cause: e },
      );
    // A file system error (EACCES on the cache) says itself; anything else is the network's.
    if (typeof (e as NodeJS.ErrnoException).syscall === 'string') throw e;
    throw unreachable(e, req, d.meta.url);
  } finally {
    clearTimeout(timer);
  }
  const got = sizeOf(partial);
  if (d.meta.size !== undefined && got < d.meta.size)
    throw new HubError(
      'HUB_NETWORK',
      `${d.path}: the connection ended at ${got} of ${d.meta.size} bytes`,
      {
        repo: d.request.repo,
      },
    );
}

/**
 * The file's digest in the ETag's own kind: sha256 for a 64-hex ETag (LFS), the git blob sha1 for
 * a 40-hex one; undefined for an ETag that is neither (a mirror's own), which is then not checked.
 */
async function hashOf(path: string, etag: string, size: number): Promise<string | undefined> {
  const kind = /^[0-9a-f]{64}$/.test(etag) ? 'sha256' : /^[0-9a-f]{40}$/.test(etag) ? 'sha1' : '';
  if (!kind) return undefined;
  const h = createHash(kind);
  if (kind === 'sha1') h.update(`blob ${size}\0`);
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}
