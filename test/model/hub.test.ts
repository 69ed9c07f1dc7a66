// The Hub resolver against the stand-in Hub: a download lands in the Hub's own cache layout, a
// second resolve and a Python-written cache make no request, offline mode reads the cache only,
// and a dropped connection resumes with Range while a corrupt file never reaches the cache.
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync } from 'node:fs';
import { readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  isHubError,
  isHubId,
  parseHubSpec,
  resolveHubDataset,
  resolveHubRepo,
  type ProgressSink,
} from '../../model/hub/index.ts';
import { filesOf, startFakeHub, type FakeHub } from '../fakes/hub-server.ts';

const tiny = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url));
const weights = readFileSync(join(tiny, 'model.safetensors'));
const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

let hub: FakeHub;
const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-hub-'));
  dirs.push(d);
  return d;
};
test.before(async () => {
  hub = await startFakeHub({
    'org/tiny': {
      files: { ...filesOf(tiny), 'pytorch_model.bin': 'x'.repeat(100), 'onnx/model.onnx': 'y' },
      tags: ['v1.0'],
    },
    'org/data': {
      type: 'dataset',
      files: { 'README.md': '# data', 'main/train-00000-of-00001.parquet': 'PAR1', 'load.py': '' },
    },
  });
});
test.after(async () => {
  await hub.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const lines: string[] = [];
const sink: ProgressSink = { tty: false, write: (t) => void lines.push(t) };
const quick = { retry: { baseDelayMs: 1, maxDelayMs: 5 }, log: sink };
const envOf = (cache: string, more: Record<string, string> = {}) => ({
  HF_HUB_CACHE: cache,
  HF_ENDPOINT: hub.endpoint,
  HF_TOKEN_PATH: join(cache, 'no-token'),
  ...more,
});

test('hub ids are told from paths, and a revision rides after @', () => {
  assert.ok(isHubId('Qwen/Qwen3-0.6B'));
  assert.ok(isHubId('openai/gsm8k@main'));
  for (const p of ['./ckpt/a', '/abs/x', 'a/b/c', 'model', '../a/b', 'a/b@', 'org/na..me'])
    assert.not.ok(isHubId(p), p);
  assert.equal(parseHubSpec('org/name@refs/pr/1'), { repo: 'org/name', revision: 'refs/pr/1' });
  assert.equal(parseHubSpec('org/name'), { repo: 'org/name', revision: 'main' });
});

test('a model lands in the Hub cache layout, only the files a load needs', async () => {
  const cache = tmp();
  lines.length = 0;
  const r = await resolveHubRepo({
    repo: 'org/tiny',
    repoType: 'model',
    env: envOf(cache),
    ...quick,
  });
  const repoDir = join(cache, 'models--org--tiny');
  assert.is(r.commit, hub.commitOf('org/tiny'));
  assert.is(r.dir, join(repoDir, 'snapshots', r.commit));
  assert.is(readFileSync(join(repoDir, 'refs', 'main'), 'utf8'), r.commit);
  const link = join(r.dir, 'model.safetensors');
  assert.ok(lstatSync(link).isSymbolicLink());
  assert.is(readlinkSync(link), `../../blobs/${sha256(weights)}`);
  assert.ok(readFileSync(link).equals(weights));
  assert.equal(readdirSync(r.dir).sort(), [
    'config.json',
    'generation_config.json',
    'model.safetensors',
    'tokenizer.json',
    'tokenizer_config.json',
  ]);
  assert.not.ok(readdirSync(join(repoDir, 'blobs')).some((b) => b.endsWith('.incomplete')));
  assert.is(lines.length, 5, 'one line per file off a terminal');
  assert.ok(lines.every((l) => l.startsWith(`org/tiny@${r.commit.slice(0, 8)}: `)));
  const before = hub.requests.length;
  const again = await resolveHubRepo({
    repo: 'org/tiny',
    repoType: 'model',
    env: envOf(cache),
    ...quick,
  });
  assert.equal(again, r);
  assert.is(hub.requests.length, before, 'a cached revision costs no request');
});

test('a tag and a commit resolve to the same snapshot; the tag gets its ref', async () => {
  const cache = tmp();
  const env = envOf(cache);
  const a = await resolveHubRepo({
    repo: 'org/tiny',
    revision: 'v1.0',
    repoType: 'model',
    env,
    ...quick,
  });
  assert.is(readFileSync(join(cache, 'models--org--tiny', 'refs', 'v1.0'), 'utf8'), a.commit);
  const before = hub.requests.length;
  const b = await resolveHubRepo({
    repo: 'org/tiny',
    revision: a.commit,
    repoType: 'model',
    env,
    ...quick,
  });
  assert.equal(b, a);
  assert.is(hub.requests.length, before);
});

test('a cache written in Python layout by hand is used without a request', async () => {
  const cache = tmp();
  const commit = 'c'.repeat(40);
  const repoDir = join(cache, 'models--py--made');
  mkdirSync(join(repoDir, 'blobs'), { recursive: true });
  mkdirSync(join(repoDir, 'snapshots', commit), { recursive: true });
  mkdirSync(join(repoDir, 'refs'));
  for (const f of ['config.json', 'model.safetensors', 'tokenizer.json']) {
    const bytes = readFileSync(join(tiny, f));
    writeFileSync(join(repoDir, 'blobs', sha256(bytes)), bytes);
    symlinkSync(`../../blobs/${sha256(bytes)}`, join(repoDir, 'snapshots', commit, f));
  }
  writeFileSync(join(repoDir, 'refs', 'main'), commit);
  const before = hub.requests.length;
  const r = await resolveHubRepo({
    repo: 'py/made',
    repoType: 'model',
    env: envOf(cache),
    ...quick,
  });
  assert.equal(r, { dir: join(repoDir, 'snapshots', commit), commit });
  assert.is(hub.requests.length, before);
});

test('offline: the cache only, and one line naming what to do when it lacks the repo', async () => {
  const cache = tmp();
  await resolveHubRepo({ repo: 'org/tiny', repoType: 'model', env: envOf(cache), ...quick });
  const before = hub.requests.length;
  const env = envOf(cache, { HF_HUB_OFFLINE: '1', HF_ENDPOINT: 'http://127.0.0.1:9' });
  const r = await resolveHubRepo({ repo: 'org/tiny', repoType: 'model', env, ...quick });
  assert.ok(existsSync(join(r.dir, 'config.json')));
  const e = await resolveHubRepo({ repo: 'org/other', repoType: 'model', env, ...quick }).catch(
    (x) => x,
  );
  assert.ok(isHubError(e, 'HUB_OFFLINE'), String(e));
  assert.match(e.message, /org\/other@main is not in the Hub cache .*HF_HUB_OFFLINE=1/);
  assert.is(hub.requests.length, before, 'offline sends nothing');
});

test('a connection dropped half way resumes with Range into the .incomplete blob', async () => {
  const cache = tmp();
  hub.dropAfter('model.safetensors', 600_000);
  const from = hub.requests.length;
  const r = await resolveHubRepo({
    repo: 'org/tiny',
    repoType: 'model',
    env: envOf(cache),
    ...quick,
  });
  const gets = hub.requests.slice(from).filter((q) => q.host === 'cdn' && q.method === 'GET');
  assert.equal(
    gets.map((q) => q.range),
    [undefined, 'bytes=600000-'],
  );
  assert.ok(
    gets.every((q) => q.authorization === undefined),
    'the CDN never gets the token',
  );
  assert.ok(readFileSync(join(r.dir, 'model.safetensors')).equals(weights));
});

test('a corrupt file is rejected: nothing in blobs/ or snapshots/, and a retry fetches it whole', async () => {
  const cache = tmp();
  hub.corrupt('model.safetensors');
  const env = envOf(cache);
  const e = await resolveHubRepo({ repo: 'org/tiny', repoType: 'model', env, ...quick }).catch(
    (x) => x,
  );
  assert.ok(isHubError(e, 'HUB_CORRUPT'), String(e));
  assert.not.match(e.message, /\n/);
  const repoDir = join(cache, 'models--org--tiny');
  assert.not.ok(existsSync(join(repoDir, 'blobs', sha256(weights))));
  assert.not.ok(readdirSync(join(repoDir, 'blobs')).some((b) => b.endsWith('.incomplete')));
  assert.not.ok(
    existsSync(join(repoDir, 'snapshots', hub.commitOf('org/tiny'), 'model.safetensors')),
  );
  assert.not.ok(
    existsSync(join(repoDir, 'refs', 'main')),
    'no ref to a snapshot that is not whole',
  );
  const r = await resolveHubRepo({ repo: 'org/tiny', repoType: 'model', env, ...quick });
  assert.ok(readFileSync(join(r.dir, 'model.safetensors')).equals(weights));
});

test('5xx answers are retried with backoff', async () => {
  const cache = tmp();
  hub.fail('config.json', 503, 2);
  const r = await resolveHubRepo({
    repo: 'org/tiny',
    repoType: 'model',
    env: envOf(cache),
    ...quick,
  });
  assert.ok(existsSync(join(r.dir, 'config.json')));
  const heads = hub.requests.filter((q) => q.method === 'HEAD' && q.url.endsWith('/config.json'));
  assert.ok(heads.length >= 3);
});

test('a dataset fetches its data files and card from the /datasets/ routes', async () => {
  const cache = tmp();
  const dir = await resolveHubDataset('org/data', { env: envOf(cache), ...quick });
  assert.is(dir, join(cache, 'datasets--org--data', 'snapshots', hub.commitOf('org/data')));
  assert.is(readFileSync(join(dir, 'main/train-00000-of-00001.parquet'), 'utf8'), 'PAR1');
  assert.ok(existsSync(join(dir, 'README.md')));
  assert.not.ok(existsSync(join(dir, 'load.py')));
  assert.ok(hub.requests.some((q) => q.url.startsWith('/api/datasets/org/data/revision/main')));
});

test('the progress line on a terminal shows bytes, rate and time left', async () => {
  const cache = tmp();
  const drawn: string[] = [];
  await resolveHubRepo({
    repo: 'org/tiny',
    repoType: 'model',
    env: envOf(cache),
    ...quick,
    log: { tty: true, write: (t) => void drawn.push(t) },
  });
  const last = drawn.filter((t) => t.startsWith('\r')).at(-1) ?? '';
  assert.match(last, /org\/tiny@\w{8}: 5\/5 files, 1\.6 MiB \/ 1\.6 MiB, .*\/s, .* left/);
  assert.is(drawn.at(-1), '\n');
});

test.run();
