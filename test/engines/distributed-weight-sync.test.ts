/**
 * Full weights into SGLang and vLLM servers in memory: the engine is rank 0 of a Gloo group, a
 * Python fake with torch.distributed (`test/fakes/weight_sync_server.py`) joins it through the
 * server's own route and receives every tensor by broadcast, bucket by bucket. What it holds
 * after each update is the sent weights bit for bit; a transfer that hangs fails within the
 * weight-sync deadline with one line and leaves the server on its old weights.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { weightBuckets } from '../../engines/http/distributed-weights.ts';
import { httpCall } from '../../engines/http/http-call.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import { readSafetensorsFile } from '../../model/safetensors.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { type WeightSyncFake, startWeightSyncFake } from '../fakes/weight-sync-server.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-wsync-'));
let model = '';
let base: NamedTensors = {};
const fakes: WeightSyncFake[] = [];

test.before(async () => {
  model = await writeTinyModel(root);
  base = readSafetensorsFile(join(model, 'model.safetensors')).tensors;
});
test.after(async () => {
  await Promise.all(fakes.map((f) => f.close()));
  rmSync(root, { recursive: true, force: true });
});

const fake = async (o: Parameters<typeof startWeightSyncFake>[0]) => {
  const f = await startWeightSyncFake(o);
  fakes.push(f);
  return f;
};

/** `base` with every value moved by `k` (a new version of the weights). */
const shifted = (k: number): NamedTensors =>
  Object.fromEntries(
    Object.entries(base).map(([n, t]) => [
      n,
      { shape: t.shape, data: t.data.map((v, i) => v + k * 1e-3 * ((i % 7) - 3)) },
    ]),
  );

const digests = (t: NamedTensors) =>
  Object.fromEntries(
    Object.entries(t).map(([n, v]) => [
      n,
      createHash('sha256')
        .update(Buffer.from(v.data.buffer, v.data.byteOffset, v.data.byteLength))
        .digest('hex'),
    ]),
  );

test('buckets keep sorted names, stay under the limit, and put a larger tensor alone', () => {
  const t = (n: number) => ({ shape: [n], data: new Float32Array(n) });
  const b = weightBuckets({ c: t(4), e: t(8), a: t(2), b: t(3), d: t(1) }, 20);
  assert.equal(
    b.map((x) => x.names),
    [['a', 'b'], ['c', 'd'], ['e']],
  );
  assert.equal(b[0]!.shapes, [[2], [3]]);
  assert.equal(b[0]!.dtypes, ['float32', 'float32']);
  assert.equal(
    b.map((x) => x.bytes),
    [20, 20, 32],
  );
});

test('SGLang: two updates in buckets land bit for bit, versioned, and answer get_weights_by_name', async () => {
  const server = await fake({ kind: 'sglang', model });
  const engine = new SglangEngine({
    urls: [server.url],
    weightSync: { backend: 'gloo', bucketBytes: 4096 },
    weightSyncTimeoutMs: 60_000,
  });
  try {
    for (const v of [1, 2]) {
      const w = shifted(v);
      await engine.updateWeights({ kind: 'tensors', tensors: w }, v);
      const s = await server.state();
      assert.is(s.version, String(v));
      assert.is(s.updates, v);
      assert.equal(s.digests, digests(w));
      assert.is(engine.getVersion(), v);
    }
    const name = 'model.embed_tokens.weight';
    const rows = (await httpCall(
      `${server.url}/get_weights_by_name`,
      { name, truncate_size: 2 },
      { timeoutMs: 10_000 },
    )) as number[][];
    const w = shifted(2)[name]!;
    const cols = w.shape[1]!;
    assert.equal(rows, [
      Array.from(w.data.slice(0, cols)),
      Array.from(w.data.slice(cols, 2 * cols)),
    ]);
  } finally {
    await engine.close();
  }
});

test('two servers join as ranks 1 and 2 of one group and both hold every update', async () => {
  const servers = await Promise.all([
    fake({ kind: 'sglang', model }),
    fake({ kind: 'sglang', model }),
  ]);
  const engine = new SglangEngine({
    urls: servers.map((s) => s.url),
    weightSync: { backend: 'gloo', bucketBytes: 16_384 },
  });
  try {
    for (const v of [1, 2]) {
      const w = shifted(v);
      await engine.updateWeights({ kind: 'tensors', tensors: w }, v);
      for (const s of servers) {
        const held = await s.state();
        assert.is(held.version, String(v));
        assert.equal(held.digests, digests(w));
      }
    }
  } finally {
    await engine.close();
  }
});

test('vLLM: start, update in buckets, finish: the weights land bit for bit', async () => {
  const server = await fake({ kind: 'vllm', model });
  const engine = new VllmEngine({
    urls: [server.url],
    weightSync: { backend: 'gloo', bucketBytes: 8192 },
  });
  try {
    const w = shifted(3);
    await engine.updateWeights({ kind: 'tensors', tensors: w }, 3);
    const s = await server.state();
    assert.is(s.updates, 1);
    assert.equal(s.digests, digests(w));
    assert.is(engine.getVersion(), 3);
  } finally {
    await engine.close();
  }
});

test('a server that refuses a tensor fails the update at once, with its reason; it keeps its weights', async () => {
  const server = await fake({ kind: 'sglang', model });
  const engine = new SglangEngine({
    urls: [server.url],
    weightSync: { backend: 'gloo' },
    weightSyncTimeoutMs: 60_000,
  });
  const bad = shifted(1);
  const name = 'model.norm.weight';
  bad[name] = {
    shape: [bad[name]!.shape[0]! + 1],
    data: new Float32Array(bad[name]!.data.length + 1),
  };
  const t0 = Date.now();
  try {
    const err = (await engine.updateWeights({ kind: 'tensors', tensors: bad }, 1).then(
      () => undefined,
      (e: unknown) => e,
    )) as Error;
    assert.ok(err, 'the update failed');
    assert.match(err.message, /model\.norm\.weight: got float32/);
    assert.ok(Date.now() - t0 < 30_000, 'not at the deadline');
    assert.is(engine.getVersion(), 0);
    assert.equal((await server.state()).digests, digests(base));
    // The next update forms a new group and lands.
    const good = shifted(2);
    await engine.updateWeights({ kind: 'tensors', tensors: good }, 2);
    assert.equal((await server.state()).digests, digests(good));
  } finally {
    await engine.close();
  }
});

test('a hung transfer fails within the deadline with one line; the server keeps its weights', async () => {
  const server = await fake({ kind: 'sglang', model, hang: true });
  const before = await server.state();
  const engine = new SglangEngine({
    urls: [server.url],
    weightSync: { backend: 'gloo' },
    weightSyncTimeoutMs: 3000,
  });
  const t0 = Date.now();
  try {
    const err = (await engine.updateWeights({ kind: 'tensors', tensors: shifted(1) }, 1).then(
      () => undefined,
      (e: unknown) => e,
    )) as Error & { code?: string };
    const took = Date.now() - t0;
    assert.ok(err, 'the update failed');
    assert.is(err.code, 'TIMEOUT');
    assert.not.match(err.message, /\n/);
    assert.match(err.message, /version 1/);
    assert.ok(took < 3000 + 3000, `failed after ${took} ms`);
    assert.is(engine.getVersion(), 0);
    const after = await server.state();
    assert.is(after.version, before.version);
    assert.equal(after.digests, before.digests);
    assert.equal(after.digests, digests(base));
  } finally {
    await engine.close();
  }
});

test.run();
