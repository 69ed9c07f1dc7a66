/**
 * The Hub's HTTP API, the few routes a download needs: repo info at a revision
 * (`/api/{models|datasets}/{repo}/revision/{rev}`, giving the commit and the file list) and a
 * file's metadata (`HEAD /{repo}/resolve/{commit}/{path}`: `ETag`/`X-Linked-Etag`,
 * `X-Linked-Size`, `X-Repo-Commit`, and for LFS files a redirect to the CDN). Failures become
 * one-line {@link HubError}s from the status and the Hub's `X-Error-Code`.
 *
 * @module
 */
import { HubError, tokenHint } from './errors.ts';
import type { HubSettings } from './hub-env.ts';
import type { HubRepoType } from './spec.ts';

/** Which request failed, for its error's message. */
export interface HubRequest {
  readonly settings: HubSettings;
  readonly repoType: HubRepoType;
  readonly repo: string;
  readonly revision: string;
  /** The file, for a `resolve` request. */
  readonly path?: string;
}

/** The URL of `path` at `revision` (`/datasets/` before dataset repos). */
export function resolveUrl(r: HubRequest, path: string): string {
  const prefix = r.repoType === 'dataset' ? '/datasets' : '';
  const rev = encodeURIComponent(r.revision);
  return `${r.settings.endpoint}${prefix}/${r.repo}/resolve/${rev}/${path.split('/').map(encodeURIComponent).join('/')}`;
}

/** Headers of every request to the Hub itself (never to a CDN a redirect names). */
export const authHeaders = (s: HubSettings): Record<string, string> =>
  s.token ? { authorization: `Bearer ${s.token}` } : {};

/** The one-line error an answer that is not 2xx/3xx stands for. */
export function errorOf(res: Response, r: HubRequest): HubError {
  const code = res.headers.get('x-error-code') ?? '';
  const kind = r.repoType === 'dataset' ? 'dataset' : 'model';
  const opts = { repo: r.repo, status: res.status };
  const where = r.settings.endpoint;
  if (code === 'GatedRepo' || (res.status === 403 && code !== 'RepoNotFound'))
    return new HubError(
      'HUB_GATED',
      r.settings.token
        ? `${kind} repo ${r.repo} is gated and this token may not read it: accept its terms on ${where}/${r.repo} with the token's account`
        : `${kind} repo ${r.repo} is gated or private: ${tokenHint}`,
      opts,
    );
  if (code === 'RevisionNotFound')
    return new HubError(
      'HUB_REVISION_NOT_FOUND',
      `${kind} repo ${r.repo} has no revision '${r.revision}' (a branch, tag or commit)`,
      opts,
    );
  if (code === 'EntryNotFound')
    return new HubError(
      'HUB_ENTRY_NOT_FOUND',
      `${kind} repo ${r.repo}@${r.revision} has no file ${r.path ?? '?'}`,
      opts,
    );
  if (code === 'RepoNotFound' || res.status === 401 || res.status === 404)
    return new HubError(
      'HUB_REPO_NOT_FOUND',
      r.settings.token
        ? `no ${kind} repo ${r.repo} on ${where} that this token may read`
        : `no ${kind} repo ${r.repo} on ${where} (if it is private or gated, ${tokenHint})`,
      opts,
    );
  return new HubError(
    'HUB_NETWORK',
    `${where} answered ${res.status} for ${kind} repo ${r.repo}`,
    opts,
  );
}

/** A request that did not get an answer, as a retryable one-line error. */
export function unreachable(err: unknown, r: HubRequest, url: string): HubError {
  if (err instanceof HubError) return err;
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code ?? cause?.message ?? (err as Error).message;
  return new HubError(
    'HUB_NETWORK',
    `cannot reach ${new URL(url).origin} (${why}) for ${r.repo}; with HF_HUB_OFFLINE=1 rtjob uses the cache only`,
    { repo: r.repo, cause: err },
  );
}

/** The commit a revision names and the files the repo holds there. */
export interface RevisionInfo {
  readonly commit: string;
  readonly files: readonly string[];
}

/** `GET /api/{models|datasets}/{repo}/revision/{rev}`. */
export async function revisionInfo(r: HubRequest, signal?: AbortSignal): Promise<RevisionInfo> {
  const space = r.repoType === 'dataset' ? 'datasets' : 'models';
  const url = `${r.settings.endpoint}/api/${space}/${r.repo}/revision/${encodeURIComponent(r.revision)}`;
  const res = await fetch(url, { headers: authHeaders(r.settings), signal }).catch((e: unknown) => {
    throw unreachable(e, r, url);
  });
  if (!res.ok) {
    await res.body?.cancel();
    throw errorOf(res, r);
  }
  const body = (await res.json()) as { sha?: unknown; siblings?: { rfilename?: unknown }[] };
  if (typeof body.sha !== 'string')
    throw new HubError('HUB_NETWORK', `${url} answered without a commit sha`, { repo: r.repo });
  const files = (body.siblings ?? []).map((s) => s.rfilename).filter((f) => typeof f === 'string');
  return { commit: body.sha, files: files as string[] };
}
