// Every way a Hub resolve fails is one line with a code and what to do: repo not found, gated or
// private (naming HF_TOKEN and `hf auth login`), revision not found, offline and not cached, the
// Hub unreachable, disk full. A token from the file `hf auth login` writes opens a gated repo.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isHubError, resolveHubRepo, type HubErrorCode } from '../../model/hub/index.ts';
import { startFakeHub, type FakeHub } from '../fakes/hub-server.ts';

const weights = new Uint8Array(4096).map((_, i) => i % 251);
const files = { 'config.json': '{"model_type":"llama"}', 'model.safetensors': weights };

let hub: FakeHub;
const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-hub-err-'));
  dirs.push(d);
  return d;
};
test.before(async () => {
  hub = await startFakeHub({
    'org/open': { files },
    'org/gated': { files, gatedToken: 'hf_secret' },
  });
});
test.after(async () => {
  await hub.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const quiet = { tty: false, write: () => {} };
const resolve = (repo: string, env: Record<string, string>, revision?: string) =>
  resolveHubRepo({
    repo,
    repoType: 'model',
    ...(revision ? { revision } : {}),
    env: { HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: '/nonexistent/token', ...env },
    retry: { retries: 1, baseDelayMs: 1, maxDelayMs: 2 },
    log: quiet,
  });

async function failure(p: Promise<unknown>, code: HubErrorCode): Promise<string> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  assert.ok(isHubError(e, code), `expected ${code}, got ${String(e)}`);
  const message = (e as Error).message;
  assert.not.match(message, /\n/, 'one line');
  return message;
}

test('a repo that does not exist names the repo, and the token when none was sent', async () => {
  const m = await failure(resolve('org/nope', { HF_HUB_CACHE: tmp() }), 'HUB_REPO_NOT_FOUND');
  assert.match(
    m,
    /no model repo org\/nope on http:\/\/127\.0\.0\.1:\d+ \(if it is private or gated, set HF_TOKEN or run `hf auth login`\)/,
  );
});

test('a gated repo without a token says to set HF_TOKEN or run hf auth login', async () => {
  const m = await failure(resolve('org/gated', { HF_HUB_CACHE: tmp() }), 'HUB_GATED');
  assert.is(m, 'model repo org/gated is gated or private: set HF_TOKEN or run `hf auth login`');
  const wrong = await failure(
    resolve('org/gated', { HF_HUB_CACHE: tmp(), HF_TOKEN: 'hf_wrong' }),
    'HUB_GATED',
  );
  assert.match(wrong, /this token may not read it/);
});

test('the token file hf auth login writes (HF_HOME/token) opens a gated repo', async () => {
  const home = tmp();
  writeFileSync(join(home, 'token'), 'hf_secret\n');
  const from = hub.requests.length;
  const r = await resolveHubRepo({
    repo: 'org/gated',
    repoType: 'model',
    env: { HF_ENDPOINT: hub.endpoint, HF_HOME: home },
    log: quiet,
  });
  assert.ok(r.dir.startsWith(join(home, 'hub', 'models--org--gated', 'snapshots')));
  const seen = hub.requests.slice(from);
  assert.ok(
    seen.filter((q) => q.host === 'hub').every((q) => q.authorization === 'Bearer hf_secret'),
  );
  assert.ok(seen.filter((q) => q.host === 'cdn').every((q) => q.authorization === undefined));
});

test('a revision that does not exist names it', async () => {
  const m = await failure(
    resolve('org/open', { HF_HUB_CACHE: tmp() }, 'v9'),
    'HUB_REVISION_NOT_FOUND',
  );
  assert.is(m, "model repo org/open has no revision 'v9' (a branch, tag or commit)");
});

test('offline and not cached says how to get it, with no request', async () => {
  const from = hub.requests.length;
  const m = await failure(
    resolve('org/open', { HF_HUB_CACHE: tmp(), HF_HUB_OFFLINE: '1' }),
    'HUB_OFFLINE',
  );
  assert.match(
    m,
    /org\/open@main is not in the Hub cache \(.*\) and HF_HUB_OFFLINE=1 forbids fetching it: run once online, or hf download org\/open/,
  );
  assert.is(hub.requests.length, from);
});

test('an unreachable Hub is one line that names HF_HUB_OFFLINE', async () => {
  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>((r) => closed.close(() => r()));
  const m = await failure(
    resolve('org/open', { HF_HUB_CACHE: tmp(), HF_ENDPOINT: `http://127.0.0.1:${port}` }),
    'HUB_NETWORK',
  );
  assert.match(
    m,
    /cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\) for org\/open; with HF_HUB_OFFLINE=1/,
  );
});

test('a full disk (ENOSPC) is one line naming the file and HF_HUB_CACHE', async () => {
  const cache = tmp();
  const blobs = join(cache, 'models--org--open', 'blobs');
  mkdirSync(blobs, { recursive: true });
  // Linux's /dev/full answers every write with ENOSPC.
  const sha = createHash('sha256').update(weights).digest('hex');
  symlinkSync('/dev/full', join(blobs, `${sha}.incomplete`));
  const m = await failure(resolve('org/open', { HF_HUB_CACHE: cache }), 'HUB_DISK_FULL');
  assert.match(
    m,
    /^disk full writing .*\.incomplete \(org\/open: model\.safetensors, 4096 bytes\): free space or set HF_HUB_CACHE to another disk$/,
  );
  assert.not.ok(readdirSync(blobs).includes(sha));
});

test.run();
