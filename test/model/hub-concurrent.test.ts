// Two processes fetching one repo at once into one cache: one downloads each blob under its lock,
// the other waits and links the same blob, and both see the whole snapshot. A lock whose holder
// died, or that nobody refreshed (Python's filelock leaves an empty one behind), is taken over.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { rmSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { resolveHubRepo } from '../../model/hub/index.ts';
import { startFakeHub, type FakeHub } from '../fakes/hub-server.ts';

const child = fileURLToPath(new URL('../fixtures/model/hub-resolve.ts', import.meta.url));
const weights = new Uint8Array(3 << 20).map((_, i) => (i * 7) % 256);
const sha = createHash('sha256').update(weights).digest('hex');

let hub: FakeHub;
const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-hub-two-'));
  dirs.push(d);
  return d;
};
test.before(async () => {
  hub = await startFakeHub({
    'org/big': { files: { 'config.json': '{}', 'model.safetensors': weights } },
  });
});
test.after(async () => {
  await hub.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

/** Runs the resolving process to its end; its stdout's last line parsed. */
function resolveIn(env: Record<string, string>): Promise<{ dir: string; commit: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(
      process.execPath,
      ['--conditions=rtjob-source', '--import', 'tsx', child, 'org/big'],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    p.stdout.on('data', (c: Buffer) => (out += String(c)));
    p.stderr.on('data', (c: Buffer) => (err += String(c)));
    p.on('exit', (code) =>
      code === 0
        ? resolve(JSON.parse(out.trim().split('\n').at(-1)!) as { dir: string; commit: string })
        : reject(new Error(`child exited ${code}: ${err}`)),
    );
  });
}

test('two processes resolving one repo at once: one download per blob, both whole', async () => {
  const cache = tmp();
  // The file's bytes wait until both processes have asked for its metadata, so they overlap.
  hub.hold('model.safetensors', 2);
  const from = hub.requests.length;
  const env = { HF_HUB_CACHE: cache, HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: join(cache, 'x') };
  const [a, b] = await Promise.all([resolveIn(env), resolveIn(env)]);
  assert.equal(a, b);
  assert.ok(readFileSync(join(a.dir, 'model.safetensors')).equals(weights));
  const gets = hub.requests.slice(from).filter((q) => q.host === 'cdn' && q.method === 'GET');
  assert.is(gets.length, 1, 'one process fetched the blob, the other waited for it');
  const heads = hub.requests
    .slice(from)
    .filter((q) => q.method === 'HEAD' && q.url.includes('model.safetensors'));
  assert.is(heads.length, 2, 'both processes were fetching at once');
  const repoDir = join(cache, 'models--org--big');
  assert.equal(
    readdirSync(join(repoDir, 'blobs')).filter((f) => f.includes('.')),
    [],
  );
  assert.equal(readdirSync(join(cache, '.locks', 'models--org--big')), [], 'locks released');
});

test('a lock left by a dead process, or an untouched foreign one, is taken over', async () => {
  for (const owner of ['dead', 'foreign'] as const) {
    const cache = tmp();
    const locks = join(cache, '.locks', 'models--org--big');
    mkdirSync(locks, { recursive: true });
    const lock = join(locks, `${sha}.lock`);
    if (owner === 'dead') {
      const gone = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], {
        encoding: 'utf8',
      });
      writeFileSync(lock, JSON.stringify({ pid: Number(gone.stdout.trim()), host: hostname() }));
    } else {
      writeFileSync(lock, '');
      utimesSync(lock, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000));
    }
    const r = await resolveHubRepo({
      repo: 'org/big',
      repoType: 'model',
      env: { HF_HUB_CACHE: cache, HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: join(cache, 'x') },
      log: { tty: false, write: () => {} },
    });
    assert.ok(readFileSync(join(r.dir, 'model.safetensors')).equals(weights), owner);
    assert.not.ok(existsSync(lock), owner);
  }
});

test.run();
