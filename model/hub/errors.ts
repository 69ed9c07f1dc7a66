/**
 * Errors of the Hub resolver: each is one line a person can act on (which repo, which revision,
 * what to set), with a stable `code`. Checked by `code`, never by `instanceof` across a boundary.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** Why a Hub repo could not be resolved to a local snapshot. */
export type HubErrorCode =
  /** No such repo on the Hub (or a private one this token cannot see). */
  | 'HUB_REPO_NOT_FOUND'
  /** The repo is gated or private and the request carried no token that may read it. */
  | 'HUB_GATED'
  /** The repo exists but has no such branch, tag or commit. */
  | 'HUB_REVISION_NOT_FOUND'
  /** A file the repo lists could not be fetched (`EntryNotFound`). */
  | 'HUB_ENTRY_NOT_FOUND'
  /** `HF_HUB_OFFLINE=1` and the revision is not in the cache. */
  | 'HUB_OFFLINE'
  /** The disk holding the cache is full (`ENOSPC`). */
  | 'HUB_DISK_FULL'
  /** A downloaded file's bytes do not match the hash or size the Hub gave for it. */
  | 'HUB_CORRUPT'
  /** Another process held a blob's lock past the wait. */
  | 'HUB_LOCKED'
  /** The Hub could not be reached, or kept failing after every retry. */
  | 'HUB_NETWORK'
  /** A repo spec that is not `org/name[@revision]`. */
  | 'HUB_SPEC';

/** An error of the Hub resolver, with the repo (and file) it concerns. */
export class HubError extends RtjobError<HubErrorCode> {
  override get name(): string {
    return 'HubError';
  }

  /** `org/name`, as given. */
  readonly repo: string | undefined;
  /** The HTTP status of the answer that failed, if one came. */
  readonly status: number | undefined;

  constructor(
    code: HubErrorCode,
    message: string,
    opts: { repo?: string; status?: number; cause?: unknown } = {},
  ) {
    super(code, message, { cause: opts.cause, context: { repo: opts.repo } });
    this.repo = opts.repo;
    this.status = opts.status;
  }

  /** Whether the same request may succeed if sent again (a reset, a 5xx, a 429). */
  get retryable(): boolean {
    if (this.code !== 'HUB_NETWORK') return false;
    return this.status === undefined || this.status >= 500 || this.status === 429;
  }
}

/** What to tell a person whose request carried no token, or one that cannot read the repo. */
export const tokenHint = 'set HF_TOKEN or run `hf auth login`';

/** What `HF_HUB_OFFLINE=1` says of a revision the cache lacks. */
export function offlineMessage(
  repo: string,
  revision: string,
  cacheDir: string,
  dataset: boolean,
): string {
  const hf = `hf download ${dataset ? '--repo-type dataset ' : ''}${repo}`;
  return `${repo}@${revision} is not in the Hub cache (${cacheDir}) and HF_HUB_OFFLINE=1 forbids fetching it: run once online, or ${hf}`;
}

/** Whether `e` is a {@link HubError} with `code` (by name and code, so across module copies). */
export function isHubError(e: unknown, code?: HubErrorCode): e is HubError {
  if (!(e instanceof Error) || (e as { code?: unknown }).code === undefined) return false;
  return e.name === 'HubError' && (code === undefined || (e as HubError).code === code);
}
