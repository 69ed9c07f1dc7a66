/**
 * A stand-in Hugging Face Hub on loopback, written from the Hub's documented API: repo info
 * (`/api/{models|datasets}/{repo}[/revision/{rev}]`), the tree listing and `paths-info`, and
 * `resolve` (small files straight from the Hub with their git blob sha1 as `ETag`; LFS files by a
 * 302 to a CDN on another origin that honours `Range`, with `X-Linked-Etag` = sha256 and
 * `X-Linked-Size`), errors by status and `X-Error-Code`, gated repos behind a bearer token. It
 * records every request, and faults a test asks for: a connection dropped part way through a
 * file, corrupt bytes, 5xx answers, a body held until other clients have asked for the file.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

/** One repo the fake serves, at one commit (named by branch `main` and any `tags`). */
export interface FakeRepo {
  /** @default 'model' */
  type?: 'model' | 'dataset';
  /** Path in the repo → bytes. */
  files: Record<string, Uint8Array | string>;
  /** Gated: only `Authorization: Bearer <token>` may read it. */
  gatedToken?: string;
  /** Other names of the commit (`v1.0`). */
  tags?: string[];
}

/** A request as the fake saw it. */
export interface SeenRequest {
  method: string;
  /** The path and query. */
  url: string;
  /** `hub` or `cdn`. */
  host: 'hub' | 'cdn';
  range: string | undefined;
  authorization: string | undefined;
}

export interface FakeHub {
  /** `HF_ENDPOINT`. */
  endpoint: string;
  requests: SeenRequest[];
  /** The commit a repo's `main` points to. */
  commitOf(repo: string): string;
  /** The next `times` byte answers for `path` end the connection after `afterBytes`. */
  dropAfter(path: string, afterBytes: number, times?: number): void;
  /** The next `times` byte answers for `path` send corrupt bytes of the right length. */
  corrupt(path: string, times?: number): void;
  /** The next `times` requests for `path` (any route) answer `status`. */
  fail(path: string, status: number, times?: number): void;
  /** Byte answers for `path` wait until `heads` HEAD requests for it have arrived. */
  hold(path: string, heads: number): void;
  close(): Promise<void>;
}

/** Every file under `dir` (sub-folders included), as a {@link FakeRepo}'s `files`. */
export function filesOf(dir: string, base = ''): Record<string, Uint8Array> {
  const out: Record<string, Uint8Array> = {};
  for (const name of readdirSync(join(dir, base))) {
    const rel = base ? `${base}/${name}` : name;
    if (statSync(join(dir, rel)).isDirectory()) Object.assign(out, filesOf(dir, rel));
    else out[rel] = readFileSync(join(dir, rel));
  }
  return out;
}

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const gitSha1 = (b: Uint8Array): string =>
  createHash('sha1').update(`blob ${b.byteLength}\0`).update(b).digest('hex');
const isLfs = (path: string, b: Uint8Array): boolean =>
  /\.(safetensors|parquet|bin|gguf)$/.test(path) || b.byteLength > 1 << 20;

interface Entry {
  path: string;
  bytes: Uint8Array;
  oid: string;
  lfs: { oid: string; size: number; pointerSize: number } | undefined;
}

interface Served {
  type: 'model' | 'dataset';
  repo: string;
  commit: string;
  revisions: Set<string>;
  entries: Map<string, Entry>;
  gatedToken: string | undefined;
}

function served(repo: string, r: FakeRepo): Served {
  const entries = new Map<string, Entry>();
  for (const [path, raw] of Object.entries(r.files)) {
    const bytes = typeof raw === 'string' ? new TextEncoder().encode(raw) : raw;
    const lfs = isLfs(path, bytes)
      ? { oid: sha256(bytes), size: bytes.byteLength, pointerSize: 134 }
      : undefined;
    entries.set(path, { path, bytes, oid: gitSha1(bytes), lfs });
  }
  const commit = createHash('sha1')
    .update([...entries.values()].map((e) => `${e.path}:${e.oid}`).join('\n'))
    .digest('hex');
  const revisions = new Set(['main', commit, ...(r.tags ?? [])]);
  return { type: r.type ?? 'model', repo, commit, revisions, entries, gatedToken: r.gatedToken };
}

type Fault =
  | { kind: 'drop'; afterBytes: number }
  | { kind: 'corrupt' }
  | { kind: 'status'; status: number };

/** Starts the fake Hub (and its CDN) on loopback ports. */
export async function startFakeHub(repos: Record<string, FakeRepo>): Promise<FakeHub> {
  const table = new Map(Object.entries(repos).map(([k, r]) => [k, served(k, r)]));
  const faults: { path: string; fault: Fault; left: number }[] = [];
  const holds = new Map<string, { heads: number; seen: number; waiters: (() => void)[] }>();
  const takeFault = (path: string, kinds: Fault['kind'][]): Fault | undefined => {
    const f = faults.find((x) => x.path === path && x.left > 0 && kinds.includes(x.fault.kind));
    if (f) f.left--;
    return f?.fault;
  };
  const ctx: Ctx = { table, takeFault, holds, cdnOrigin: '' };
  const hub = createServer((req, res) => void route(ctx, 'hub', req, res, fake));
  const cdn = createServer((req, res) => void route(ctx, 'cdn', req, res, fake));
  const listen = (s: Server): Promise<number> =>
    new Promise((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));
  const [hubPort, cdnPort] = [await listen(hub), await listen(cdn)];
  ctx.cdnOrigin = `http://127.0.0.1:${cdnPort}`;
  const fake: FakeHub = {
    endpoint: `http://127.0.0.1:${hubPort}`,
    requests: [],
    commitOf: (repo) => table.get(repo)!.commit,
    dropAfter: (path, afterBytes, times = 1) =>
      void faults.push({ path, fault: { kind: 'drop', afterBytes }, left: times }),
    corrupt: (path, times = 1) =>
      void faults.push({ path, fault: { kind: 'corrupt' }, left: times }),
    fail: (path, status, times = 1) =>
      void faults.push({ path, fault: { kind: 'status', status }, left: times }),
    hold: (path, heads) => void holds.set(path, { heads, seen: 0, waiters: [] }),
    close: async () => {
      for (const s of [hub, cdn]) {
        s.closeAllConnections();
        await new Promise<void>((r) => s.close(() => r()));
      }
    },
  };
  return fake;
}

interface Ctx {
  table: Map<string, Served>;
  takeFault: (path: string, kinds: Fault['kind'][]) => Fault | undefined;
  holds: Map<string, { heads: number; seen: number; waiters: (() => void)[] }>;
  cdnOrigin: string;
}

function fail(
  res: ServerResponse,
  status: number,
  code: string | undefined,
  message: string,
): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    ...(code ? { 'x-error-code': code } : {}),
    'x-error-message': message,
  });
  res.end(JSON.stringify({ error: message }));
}

async function route(
  ctx: Ctx,
  host: 'hub' | 'cdn',
  req: IncomingMessage,
  res: ServerResponse,
  fake: FakeHub,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://x');
  fake.requests.push({
    method: req.method ?? 'GET',
    url: req.url ?? '/',
    host,
    range: req.headers.range,
    authorization: req.headers.authorization,
  });
  let body = '';
  for await (const c of req) body += String(c);
  const parts = url.pathname.split('/').slice(1).map(decodeURIComponent);
  if (host === 'cdn') return cdnFile(ctx, req, res, parts);
  const api = parts[0] === 'api' && (parts[1] === 'models' || parts[1] === 'datasets');
  const type = (api ? parts[1] === 'datasets' : parts[0] === 'datasets') ? 'dataset' : 'model';
  const rest = api ? parts.slice(2) : parts[0] === 'datasets' ? parts.slice(1) : parts;
  const repoName = rest.slice(0, 2).join('/');
  const repo = ctx.table.get(repoName);
  const auth = req.headers.authorization;
  if (!repo || repo.type !== type)
    // The Hub answers 401 to an anonymous caller, so a private repo cannot be told from none.
    return fail(res, auth ? 404 : 401, 'RepoNotFound', 'Repository not found');
  if (repo.gatedToken && auth !== `Bearer ${repo.gatedToken}`)
    return fail(res, auth ? 403 : 401, 'GatedRepo', `Access to ${repoName} is restricted`);
  const [verb, rev = 'main', ...pathParts] = rest.slice(2);
  const path = pathParts.join('/');
  if (verb !== undefined && !repo.revisions.has(rev))
    return fail(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`);
  const status = path ? ctx.takeFault(path, ['status']) : undefined;
  if (status?.kind === 'status') return fail(res, status.status, undefined, 'injected');
  if (api) return apiRoute(repo, verb, path, body, url, res);
  if (verb !== 'resolve') return fail(res, 404, undefined, `no route ${url.pathname}`);
  return resolveFile(ctx, repo, path, req, res);
}

const sendJson = (res: ServerResponse, body: unknown): void => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

const treeEntry = (e: Entry): Record<string, unknown> => ({
  type: 'file',
  oid: e.oid,
  size: e.bytes.byteLength,
  path: e.path,
  ...(e.lfs ? { lfs: e.lfs } : {}),
});

function apiRoute(
  repo: Served,
  verb: string | undefined,
  path: string,
  body: string,
  url: URL,
  res: ServerResponse,
): void {
  const files = [...repo.entries.values()];
  if (verb === undefined || verb === 'revision')
    return sendJson(res, {
      id: repo.repo,
      sha: repo.commit,
      private: false,
      gated: repo.gatedToken ? 'manual' : false,
      lastModified: '2024-01-01T00:00:00.000Z',
      siblings: files.map((e) => ({ rfilename: e.path })),
    });
  if (verb === 'tree') {
    const under = path ? `${path}/` : '';
    const recursive =
      url.searchParams.get('recursive') === 'true' || url.searchParams.get('recursive') === '1';
    const inside = files.filter((e) => e.path.startsWith(under));
    const dirs = new Set<string>();
    const out: Record<string, unknown>[] = [];
    for (const e of inside) {
      const tail = e.path.slice(under.length).split('/');
      if (tail.length === 1 || recursive) out.push(treeEntry(e));
      if (tail.length > 1) dirs.add(under + tail[0]);
    }
    for (const d of dirs) out.unshift({ type: 'directory', oid: '0'.repeat(40), size: 0, path: d });
    return sendJson(res, out);
  }
  if (verb === 'paths-info') {
    const asked = body.trim().startsWith('{')
      ? ((JSON.parse(body) as { paths?: string[] }).paths ?? [])
      : new URLSearchParams(body).getAll('paths');
    return sendJson(
      res,
      asked.flatMap((p) => (repo.entries.has(p) ? [treeEntry(repo.entries.get(p)!)] : [])),
    );
  }
  return fail(res, 404, undefined, `no api route ${verb}`);
}

function resolveFile(
  ctx: Ctx,
  repo: Served,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): void {
  const e = repo.entries.get(path);
  if (!e) return fail(res, 404, 'EntryNotFound', `${path} does not exist on "${repo.commit}"`);
  const hold = ctx.holds.get(path);
  if (req.method === 'HEAD' && hold && ++hold.seen >= hold.heads)
    hold.waiters.splice(0).forEach((f) => f());
  const common = { 'x-repo-commit': repo.commit, 'accept-ranges': 'bytes' };
  if (e.lfs) {
    res.writeHead(302, {
      ...common,
      location: `${ctx.cdnOrigin}/lfs/${repo.type}/${repo.repo}/${e.lfs.oid}?path=${encodeURIComponent(path)}`,
      etag: `"${e.oid}"`,
      'x-linked-etag': `"${e.lfs.oid}"`,
      'x-linked-size': String(e.lfs.size),
      'content-length': '0',
    });
    return void res.end();
  }
  return void sendBytes(ctx, path, e.bytes, req, res, { ...common, etag: `"${e.oid}"` });
}

function cdnFile(
  ctx: Ctx,
  req: IncomingMessage,
  res: ServerResponse,
  parts: string[],
): Promise<void> | void {
  const [, type, org, name, oid] = parts;
  const repo = ctx.table.get(`${org}/${name}`);
  const e = [...(repo?.entries.values() ?? [])].find((x) => x.lfs?.oid === oid);
  if (!repo || repo.type !== type || !e) return fail(res, 404, undefined, 'NoSuchKey');
  return sendBytes(ctx, e.path, e.bytes, req, res, { etag: `"${oid}"`, 'accept-ranges': 'bytes' });
}

/** The file's bytes (a `Range` honoured with 206), with any fault asked for it. */
async function sendBytes(
  ctx: Ctx,
  path: string,
  bytes: Uint8Array,
  req: IncomingMessage,
  res: ServerResponse,
  headers: Record<string, string>,
): Promise<void> {
  const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
  const start = m ? Number(m[1]) : 0;
  const end = m && m[2] ? Number(m[2]) + 1 : bytes.byteLength;
  if (start >= bytes.byteLength && bytes.byteLength > 0) {
    res.writeHead(416, { 'content-range': `bytes */${bytes.byteLength}` });
    return void res.end();
  }
  const range = m ? { 'content-range': `bytes ${start}-${end - 1}/${bytes.byteLength}` } : {};
  res.writeHead(m ? 206 : 200, { ...headers, ...range, 'content-length': String(end - start) });
  if (req.method === 'HEAD') return void res.end();
  const hold = ctx.holds.get(path);
  if (hold && hold.seen < hold.heads) await new Promise<void>((r) => hold.waiters.push(r));
  const fault = ctx.takeFault(path, ['drop', 'corrupt']);
  let body = Buffer.from(bytes.subarray(start, end));
  if (fault?.kind === 'corrupt') body = Buffer.from(body.map((b) => b ^ 0x5a));
  if (fault?.kind === 'drop') {
    const cut = Math.max(0, fault.afterBytes - start);
    return void res.write(body.subarray(0, cut), () => res.socket?.destroy());
  }
  res.end(body);
}
