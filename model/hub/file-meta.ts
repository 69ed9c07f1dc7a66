/**
 * What the Hub says of one file before it is fetched (`HEAD /{repo}/resolve/{commit}/{path}`): its
 * ETag, which names its blob (`X-Linked-Etag`, the sha256, for an LFS file; the git blob sha1
 * otherwise), its size and where its bytes are (the CDN an LFS file redirects to).
 *
 * @module
 */
import { authHeaders, errorOf, resolveUrl, unreachable, type HubRequest } from './api.ts';
import { HubError } from './errors.ts';

/** One file's metadata. */
export interface FileMeta {
  /** The blob's name in `blobs/`, unquoted. */
  readonly etag: string;
  /** Bytes, when the Hub said (`X-Linked-Size`, else `Content-Length`). */
  readonly size: number | undefined;
  /** Where to GET the bytes. */
  readonly url: string;
  /** Whether `url` is on the Hub itself (it then gets the token; a CDN never does). */
  readonly onHub: boolean;
}

const unquote = (etag: string): string => etag.replace(/^W\//, '').replace(/^"|"$/g, '');

/**
 * `HEAD` the file, following relative redirects (a renamed repo) and stopping at the first one to
 * another origin or the first that carries `X-Linked-Etag` (an LFS file's CDN URL).
 */
export async function fileMeta(
  r: HubRequest,
  path: string,
  signal?: AbortSignal,
): Promise<FileMeta> {
  let url = resolveUrl(r, path);
  const origin = new URL(url).origin;
  const req = { ...r, path };
  for (let hop = 0; hop < 5; hop++) {
    const res = await fetch(url, {
      method: 'HEAD',
      redirect: 'manual',
      headers: { ...authHeaders(r.settings), 'accept-encoding': 'identity' },
      signal,
    }).catch((e: unknown) => {
      throw unreachable(e, req, url);
    });
    const etag = res.headers.get('x-linked-etag') ?? res.headers.get('etag');
    const size = Number(
      res.headers.get('x-linked-size') ?? res.headers.get('content-length') ?? NaN,
    );
    const meta = (to: string): FileMeta => {
      if (!etag)
        throw new HubError('HUB_NETWORK', `${url} answered without an ETag`, { repo: r.repo });
      return {
        etag: unquote(etag),
        size: Number.isFinite(size) ? size : undefined,
        url: to,
        onHub: new URL(to).origin === origin,
      };
    };
    if (res.status >= 300 && res.status < 400) {
      const to = new URL(res.headers.get('location') ?? '', url).href;
      if (res.headers.get('x-linked-etag') || new URL(to).origin !== origin) return meta(to);
      url = to;
      continue;
    }
    if (!res.ok) throw errorOf(res, req);
    return meta(url);
  }
  throw new HubError('HUB_NETWORK', `too many redirects for ${resolveUrl(r, path)}`, {
    repo: r.repo,
  });
}
