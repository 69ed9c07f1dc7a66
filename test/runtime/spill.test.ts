import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
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
import { ShmValue } from '../../runtime/client/shm.ts';
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
/** Until this process's store has no spill write under way (they finish on libuv's pool). */
const spillsDone = () =>
  until(async () => (await objectStats()).spillsInFlight === 0, 10_000, 'the spill writes');

test('puts past the cap spill to disk; memory stays under the cap; every object comes back exact', async () => {
  gc();
  const arraysBefore = process.memoryUsage().arrayBuffers;
  // 40 × 4 MiB = 160 MiB put against a 16 MiB cap; only the refs are kept.
  const refs = Array.from({ length: 40 }, (_, i) => put(make(i)));
  // The puts returned with writes under way, at most a cap's worth (the rest were written
  // before their put returned): memory is bounded by about twice the cap meanwhile.
  const during = await objectStats();
  assert.ok(during.spillsInFlight > 0, 'writes go on after the puts return');
  assert.ok(during.memoryBytes <= 2 * cap + 4 * MiB, `${during.memoryBytes} bytes in memory`);
  await spillsDone();
  const s = await objectStats();
  assert.is(s.memoryCapBytes, cap);
  assert.ok(s.memoryBytes <= cap, `${s.memoryBytes} bytes in memory`);
  assert.ok(s.spilledObjects >= 36, `${s.spilledObjects} spilled`);
  assert.ok(existsSync(`${spillDir}/${fileOf(refs[0]!)}`), 'the oldest object is on disk');
  // A finished write's file-handle callbacks hold its value for a few more turns of the event
  // loop: collect until they let go (bounded), then the bound must hold.
  const held = () => (gc(), process.memoryUsage().arrayBuffers - arraysBefore);
  await until(() => held() < cap + 8 * MiB, 5000, 'the written values to be collected').catch(
    () => undefined,
  );
  assert.ok(held() < cap + 8 * MiB, `${(held() / MiB).toFixed(0)} MiB of array buffers held`);

  // Every object restores with its bytes, locally; restores spill others to stay under the cap.
  for (let i = 0; i < refs.length; i++) assert.ok(isMade(await get(refs[i]!), i), `object ${i}`);
  await spillsDone();
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
  await spillsDone();
  assert.ok(existsSync(`${spillDir}/${fileOf(first)}`), 'spilled');
  let sum = 0;
  for (let k = 0; k < MiB; k++) sum += 3 + (k % 7);
  assert.equal(await c.describe.remote(first), { w: ['Float32Array', sum], step: ['number', 1] });
  await spillsDone(); // the restore spilled another object
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
    await store.spillsSettled();
    s = store.stats();
    assert.is(s.spills, 1);
    assert.is(s.memoryBytes, 16 * MiB);
    assert.ok(kept[0]!._spilled, 'the oldest live object was spilled');
    assert.ok(isMade(await kept[0]!, 10), 'and reads back exact');
    // A ref to a spilled object that comes back to its owner (decoded from a message) reads it too.
    await store.spillsSettled(); // the restore spilled the next least recently used
    assert.ok(kept[1]!._spilled);
    const back = store.adopt('kept1', '127.0.0.1:1') as ObjectRef<Float32Array>;
    assert.ok(isMade(await back, 11), 'a returning ref restores the value');
    store.release(back);
    for (const r of [...kept, more]) store.release(r);
  } finally {
    store.close();
  }
});

test('a spill is written off the put: the value stays in memory, and a get returns it, until its file is complete', async () => {
  const store = new ObjectStore('127.0.0.1:1', () => {}, { memoryBytes: cap });
  try {
    const refs = Array.from({ length: 5 }, (_, i) => store.put(`w${i}`, make(i)));
    let s = store.stats();
    assert.is(s.spillsInFlight, 1, 'the oldest is being written');
    assert.is(s.spills, 0);
    assert.is(s.memoryBytes, 20 * MiB, 'and is still in memory');
    assert.not.ok(refs[0]!._spilled);
    assert.ok(isMade(await refs[0]!, 0), 'a get during the spill is served from memory');
    await store.spillsSettled();
    s = store.stats();
    assert.equal([s.spills, s.spillsInFlight, s.memoryBytes], [1, 0, 16 * MiB]);
    assert.ok(refs[0]!._spilled, 'dropped from memory once written');
    assert.ok(isMade(await refs[0]!, 0), 'and reads back exact');
    for (const r of refs) store.release(r);
  } finally {
    store.close();
  }
});

test('an object freed while it is being spilled leaves no file', async () => {
  const store = new ObjectStore('127.0.0.1:1', () => {}, { memoryBytes: cap, transferHoldMs: 0 });
  try {
    const refs = Array.from({ length: 5 }, (_, i) => store.put(`f${i}`, make(i)));
    assert.is(store.stats().spillsInFlight, 1);
    store.release(refs[0]!);
    await store.spillsSettled();
    assert.not.ok(existsSync(`${spillDir}/${process.pid}-f0`), 'removed once written');
    assert.is(store.stats().spilledObjects, 0);
    for (const r of refs.slice(1)) store.release(r);
  } finally {
    store.close();
  }
});

test('spilling an object removes its shared-memory file too (tmpfs is memory)', async () => {
  const store = new ObjectStore('127.0.0.1:1', () => {}, { memoryBytes: cap });
  try {
    const first = store.put('s0', make(0));
    await store.serve('s0', 'n1', true, true); // a node's first fetch goes over the socket
    const v = (await store.serve('s0', 'n1', true, true)) as ShmValue;
    assert.ok(v instanceof ShmValue, 'the second through shared memory');
    const file = `/dev/shm/rtjob-${process.getuid!()}/${v.name}`;
    assert.ok(existsSync(file));
    const more = Array.from({ length: 4 }, (_, i) => store.put(`s${i + 1}`, make(i + 1)));
    await store.spillsSettled();
    assert.ok(first._spilled, 'the oldest went to disk');
    await until(() => !existsSync(file), 5000, 'its shared-memory file to go');
    for (const r of [first, ...more]) store.release(r);
  } finally {
    store.close();
  }
});

test('a failed spill write leaves the value in memory, readable, with a warning', async () => {
  // A file already at the path the spill would create: the write fails (EEXIST).
  const blocker = `${spillDir}/${process.pid}-e0`;
  writeFileSync(blocker, 'x', { mode: 0o600 });
  const store = new ObjectStore('127.0.0.1:1', () => {}, { memoryBytes: cap });
  try {
    const refs = Array.from({ length: 5 }, (_, i) => store.put(`e${i}`, make(i)));
    await store.spillsSettled();
    const s = store.stats();
    assert.is(s.spills, 0, 'nothing written');
    assert.not.ok(refs[0]!._spilled, 'kept in memory');
    assert.ok(isMade(await refs[0]!, 0), 'and still exact');
    for (const r of refs) store.release(r);
  } finally {
    store.close();
    unlinkSync(blocker);
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
      `const f = await writeSpill(new Float32Array(1 << 18), 'orphan');` +
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

test("a file left by an earlier process with this process's pid (pids are reused) does not stop its spills", () => {
  // CI saw it: 'cannot spill object e0: EEXIST', a leftover named like this process's first spill.
  const spill = new URL('../../runtime/client/spill.ts', import.meta.url).href;
  const oob = new URL('../../runtime/out-of-band.ts', import.meta.url).href;
  const r = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `const { mkdirSync, utimesSync, writeFileSync } = await import('node:fs');` +
        `const { join } = await import('node:path');` +
        `const { removeSpill, spillDirPath, writeSpill } = await import('${spill}');` +
        `(await import('${oob}')).installOutOfBandCodec();` +
        `mkdirSync(spillDirPath(), { recursive: true, mode: 0o700 });` +
        `const stale = join(spillDirPath(), process.pid + '-e0');` +
        `writeFileSync(stale, 'left by an earlier process'); utimesSync(stale, 0, 0);` +
        `const f = await writeSpill(new Float32Array(1 << 18).fill(3), 'e0');` +
        `console.log(f.path === stale, f.bytes); await removeSpill(f.path);`,
    ],
    { encoding: 'utf8' },
  );
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^true \d+/, r.stdout + r.stderr);
  assert.not.match(r.stderr, /EEXIST/);
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
