import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type ObjectRef,
  defineActor,
  get,
  init,
  kill,
  objectStats,
  put,
  release,
  shutdown,
} from '../../runtime/index.ts';
import { ObjectStore } from '../../runtime/client/object-store.ts';
import { spillDirPath } from '../../runtime/client/spill.ts';
import type { Consumer } from '../fixtures/runtime/weights.ts';
import { fixture, until } from './helpers.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const ConsumerActor = defineActor<typeof Consumer>(fixture('weights.ts'), 'Consumer');
const MiB = 1 << 20;
const cap = 16 * MiB;
const spillDir = spillDirPath();
/** Spill files written by process `pid`. */
const filesOf = (pid: number) =>
  existsSync(spillDir) ? readdirSync(spillDir).filter((n) => n.startsWith(`${pid}-`)) : [];
const fileOf = (ref: ObjectRef<unknown>) => `${process.pid}-${ref.id.replace(/\W/g, '_')}`;

test.before(async () => {
  await init({
    address: 'local',
    local: { node: { numCpus: 4 } },
    objectTransferHoldMs: 200,
    objectStoreMemoryBytes: cap,
  });
});
test.after(async () => {
  await shutdown();
});

/** 4 MiB of float32, every element `i` plus its index modulo 7 (so each object differs). */
const make = (i: number) => Float32Array.from({ length: MiB }, (_, k) => i + (k % 7));
/** Whether `a` is what `make(i)` made. */
const isMade = (a: Float32Array, i: number) =>
  a.length === MiB && a.every((x, k) => x === i + (k % 7));

test('puts past the cap spill to disk; memory stays under the cap; every object comes back exact', async () => {
  gc();
  const arraysBefore = process.memoryUsage().arrayBuffers;
  // 40 × 4 MiB = 160 MiB put against a 16 MiB cap; only the refs are kept.
  const refs = Array.from({ length: 40 }, (_, i) => put(make(i)));
  const s = await objectStats();
  assert.is(s.memoryCapBytes, cap);
  assert.ok(s.memoryBytes <= cap, `${s.memoryBytes} bytes in memory`);
  assert.ok(s.spilledObjects >= 36, `${s.spilledObjects} spilled`);
  assert.ok(existsSync(`${spillDir}/${fileOf(refs[0]!)}`), 'the oldest object is on disk');
  gc();
  const held = process.memoryUsage().arrayBuffers - arraysBefore;
  assert.ok(held < cap + 8 * MiB, `${(held / MiB).toFixed(0)} MiB of array buffers held`);

  // Every object restores with its bytes, locally; restores spill others to stay under the cap.
  for (let i = 0; i < refs.length; i++) assert.ok(isMade(await get(refs[i]!), i), `object ${i}`);
  const after = await objectStats();
  assert.ok(after.restores >= 36, `${after.restores} restores`);
  assert.ok(after.memoryBytes <= cap, `${after.memoryBytes} bytes in memory after the gets`);

  // Freed objects take their files with them.
  for (const r of refs) release(r);
  assert.is((await objectStats()).spilledObjects, 0);
  await until(() => filesOf(process.pid).length === 0, 5000, 'the spill files to be removed');
});

test('a spilled object is fetched by an actor with the right bytes', async () => {
  const c = ConsumerActor.remote();
  const first = put({ w: make(3), step: 1 });
  // Push the first object out with newer ones.
  const later = Array.from({ length: 5 }, (_, i) => put(make(10 + i)));
  assert.ok(existsSync(`${spillDir}/${fileOf(first)}`), 'spilled');
  let sum = 0;
  for (let k = 0; k < MiB; k++) sum += 3 + (k % 7);
  assert.equal(await c.describe.remote(first), { w: ['Float32Array', sum], step: ['number', 1] });
  const s = await objectStats();
  assert.ok(s.memoryBytes <= cap, `${s.memoryBytes} bytes in memory`);
  for (const r of [first, ...later]) release(r);
  await kill(c);
  // The actor's borrow ended with it; the object goes once the transfer hold (200 ms) passed.
  await until(() => filesOf(process.pid).length === 0, 5000, 'the spill files to be removed');
});

test('objects kept only for the hold after a transfer are neither counted nor spilled', async () => {
  const store = new ObjectStore('127.0.0.1:1', () => {}, {
    transferHoldMs: 60_000,
    memoryBytes: cap,
  });
  try {
    // Three objects sent away, then released: kept for the hold, out of the cap.
    for (let i = 0; i < 3; i++) {
      const r = store.put(`sent${i}`, make(i));
      store.onSend(r);
      store.release(r);
    }
    const kept = Array.from({ length: 4 }, (_, i) => store.put(`kept${i}`, make(10 + i)));
    let s = store.stats();
    assert.is(s.owned, 7);
    assert.is(s.heldBytes, 12 * MiB);
    assert.is(s.memoryBytes, 16 * MiB, 'the live objects fill the cap exactly');
    assert.is(s.spills, 0, 'nothing spilled for the held ones');
    // One more live object: the least recently used live one goes to disk, not a held one.
    const more = store.put('more', make(20));
    s = store.stats();
    assert.is(s.spills, 1);
    assert.is(s.memoryBytes, 16 * MiB);
    assert.ok(kept[0]!._spilled, 'the oldest live object was spilled');
    assert.ok(isMade(await kept[0]!, 10), 'and reads back exact');
    // A ref to a spilled object that comes back to its owner (decoded from a message) reads it too.
    assert.ok(kept[1]!._spilled);
    const back = store.adopt('kept1', '127.0.0.1:1') as ObjectRef<Float32Array>;
    assert.ok(isMade(await back, 11), 'a returning ref restores the value');
    store.release(back);
    for (const r of [...kept, more]) store.release(r);
  } finally {
    store.close();
  }
});

test('a worker killed with spilled objects leaves no file behind (its node agent removes them)', async () => {
  const c = ConsumerActor.options({ env: { RTJOB_OBJECT_STORE_MEMORY: String(4 * MiB) } }).remote();
  const pid = await c.pid.remote();
  const s = await c.keep.remote(6, MiB);
  assert.ok(s.memoryBytes <= 4 * MiB, `${s.memoryBytes} bytes in the worker's memory`);
  assert.is(s.spilledObjects, 5);
  assert.is(filesOf(pid).length, 5);
  await kill(c);
  await until(() => filesOf(pid).length === 0, 10_000, 'the node agent to remove the files');
});

test('spill files of a process killed with SIGKILL are removed by the next process to open its object store', () => {
  const spill = new URL('../../runtime/client/spill.ts', import.meta.url).href;
  const oob = new URL('../../runtime/out-of-band.ts', import.meta.url).href;
  const store = new URL('../../runtime/client/object-store.ts', import.meta.url).href;
  const run = (code: string) =>
    spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
    });
  const writer = run(
    `const { writeSpill } = await import('${spill}');` +
      `(await import('${oob}')).installOutOfBandCodec();` +
      `const f = writeSpill(new Float32Array(1 << 18), 'orphan');` +
      `console.log(f.path); process.kill(process.pid, 'SIGKILL');`,
  );
  const path = writer.stdout.trim();
  assert.ok(path.includes(`/${writer.pid}-`), `a file path (${writer.stderr})`);
  assert.ok(existsSync(path), 'left behind by the killed process');
  const sweeper = run(
    `const { ObjectStore } = await import('${store}'); new ObjectStore('x', () => {});`,
  );
  assert.is(sweeper.status, 0, sweeper.stderr);
  assert.not.ok(existsSync(path), 'swept');
});

test('RTJOB_OBJECT_STORE_MEMORY that is not a byte count fails with one line naming it', () => {
  const store = new URL('../../runtime/client/object-store.ts', import.meta.url).href;
  const r = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `const { ObjectStore } = await import('${store}'); new ObjectStore('x', () => {});`,
    ],
    { encoding: 'utf8', env: { ...process.env, RTJOB_OBJECT_STORE_MEMORY: '2GiB' } },
  );
  assert.is(r.status, 1);
  assert.match(r.stderr, /RTJOB_OBJECT_STORE_MEMORY: expected an integer >= 0, got '2GiB'/);
});

test.run();
