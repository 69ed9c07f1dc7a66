import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type ObjectRef,
  actorInfo,
  defineActor,
  get,
  init,
  kill,
  objectStats,
  put,
  release,
  shutdown,
} from '../../runtime/index.ts';
import { ShmValue, readShm } from '../../runtime/client/shm.ts';
import { mapFile, mapUnavailableReason } from '../../runtime/client/shm-map.ts';
import type { Consumer } from '../fixtures/runtime/weights.ts';
import { fixture, rejection, until } from './helpers.ts';

const ConsumerActor = defineActor<typeof Consumer>(fixture('weights.ts'), 'Consumer');
/** A consumer that reads shared-memory files into a buffer instead of mapping them. */
const CopyingConsumer = ConsumerActor.options({ env: { RTJOB_OBJECT_MMAP: '0' } });
const shmDir = `/dev/shm/rtjob-${process.getuid!()}`;
/** Shared-memory files written by process `pid`. */
const filesOf = (pid: number) => readdirSync(shmDir).filter((n) => n.startsWith(`${pid}-`));
/** Fetches this process has served to `node`, as its object store counts them. */
const servedTo = async (node: string) =>
  (await objectStats()).fetchesServed.find((s) => s.node === node) ?? {
    node,
    socket: 0,
    sharedMemory: 0,
  };

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } }, objectTransferHoldMs: 200 });
});
test.after(async () => {
  await shutdown();
});

const n = 1 << 20; // 4 MiB of float32: above the 1 MiB shared-memory threshold
const weights = {
  w: Float32Array.from({ length: n }, (_, i) => i % 3),
  bytes: Buffer.alloc(200_000, 1),
  b: new Float32Array([1, 2, 3]),
  version: 5,
};
const want: Record<string, [string, number]> = {
  w: ['Float32Array', 0],
  bytes: ['Buffer', 200_000],
  b: ['Float32Array', 6],
  version: ['number', 5],
};

let sum = 0;
for (let i = 0; i < n; i++) sum += i % 3;
want.w = ['Float32Array', sum];

// The mapper is built with the machine's gcc at first use; CI has gcc (for the torch addon too),
// so a machine where it does not build fails here instead of silently testing the fallback.
test('this machine maps shared-memory files (the mapper builds)', () => {
  assert.is(mapUnavailableReason(), '');
});

test('the mapper refuses a file shorter than asked; a reader refuses a name outside its directory', async () => {
  const path = `${shmDir}/${process.pid}-short_test`;
  writeFileSync(path, Buffer.alloc(100, 1), { mode: 0o600 });
  try {
    assert.throws(() => mapFile(path, 4096), /shorter than the object/);
    assert.equal([...mapFile(path, 100)!], Array(100).fill(1));
  } finally {
    unlinkSync(path);
  }
  const e = await rejection(readShm(new ShmValue('../../etc/passwd', 10, false)));
  assert.is(e.code, 'PROTOCOL', e.message);
});

test('a large put reaches the first consumer of a node over the socket; the others map one shared-memory file, byte for byte', async () => {
  const before = filesOf(process.pid).length;
  const ref = put(weights);
  const consumers = Array.from({ length: 3 }, () => ConsumerActor.remote());
  const node = (await actorInfo(consumers[0]!)).nodeId!;
  const served = await servedTo(node);
  const reads = await get(consumers.map((c) => c.shmReads.remote()));
  for (const c of consumers) assert.equal(await c.describe.remote(ref), want);
  assert.is(filesOf(process.pid).length, before + 1, 'written once for the later two readers');
  assert.equal(await servedTo(node), {
    ...served,
    socket: served.socket + 1,
    sharedMemory: served.sharedMemory + 2,
  });
  const after = await get(consumers.map((c) => c.shmReads.remote()));
  assert.equal(
    after.map((r, i) => [r.mapped - reads[i]!.mapped, r.copied - reads[i]!.copied]),
    [
      [0, 0],
      [1, 0],
      [1, 0],
    ],
    'the first over the socket, the others mapped',
  );
  release(ref);
  await Promise.all(consumers.map((c) => kill(c)));
});

/** `ref` fetched once on the node (over the socket), so that later fetches go through its file. */
async function shared(ref: ObjectRef<Record<string, unknown>>): Promise<void> {
  const first = ConsumerActor.remote();
  assert.equal(await first.describe.remote(ref), want);
  await kill(first);
}

test('a reader writing to a mapped value changes neither another reader’s value nor the owner’s', async () => {
  const ref = put(weights);
  await shared(ref);
  const [a, b] = [ConsumerActor.remote(), ConsumerActor.remote()];
  const mapped = (await a.shmReads.remote()).mapped;
  const scribbled = await a.scribble.remote(ref);
  assert.is((await a.shmReads.remote()).mapped, mapped + 1, 'the writer mapped it');
  assert.equal(scribbled.w, ['Float32Array', sum + n], 'the writer sees its own writes');
  assert.equal(await b.describe.remote(ref), want, 'another reader of the same file does not');
  assert.equal(await a.describe.remote(ref), want, 'nor does the writer’s next fetch');
  assert.is(weights.w[n - 1], (n - 1) % 3, 'nor the owner');
  release(ref);
  await Promise.all([kill(a), kill(b)]);
});

test('a mapped value stays intact when its file is removed (as freeing the object does)', async () => {
  const ref = put(weights);
  await shared(ref);
  const a = ConsumerActor.remote();
  assert.equal(await a.hold.remote(ref), want);
  assert.ok((await a.shmReads.remote()).mapped > 0, 'mapped');
  const file = filesOf(process.pid).find((f) => f.includes(ref.id.replace(/\W/g, '_')));
  assert.ok(file, 'the object has a file');
  unlinkSync(`${shmDir}/${file}`);
  assert.equal(await a.describeHeld.remote(), want, 'the mapping keeps the file’s pages');
  // A later reader finds no file: it falls back to the socket and still gets the value.
  const b = ConsumerActor.remote();
  assert.equal(await b.describe.remote(ref), want);
  release(ref);
  await Promise.all([kill(a), kill(b)]);
});

test('a large put reaches the first copying consumer of a node over the socket, the others through one shared-memory file', async () => {
  const before = filesOf(process.pid).length;
  const ref = put(weights);
  const consumers = Array.from({ length: 3 }, () => CopyingConsumer.remote());
  const node = (await actorInfo(consumers[0]!)).nodeId!;
  const served = await servedTo(node);
  const seen = await get(consumers.map((c) => c.describe.remote(ref)));
  for (const s of seen) assert.equal(s, want);
  assert.is(filesOf(process.pid).length, before + 1, 'written once for the later two readers');
  assert.equal(await servedTo(node), {
    ...served,
    socket: served.socket + 1,
    sharedMemory: served.sharedMemory + 2,
  });
  const reads = await get(consumers.map((c) => c.shmReads.remote()));
  assert.equal(
    reads.map((r) => r.mapped),
    [0, 0, 0],
  );
  assert.is(reads[0]!.copied + reads[1]!.copied + reads[2]!.copied, 2, 'copied, not mapped');
  release(ref);
  await Promise.all(consumers.map((c) => kill(c)));
});

test('a large call result comes back through shared memory, mapped and removed by its reader', async () => {
  const c = ConsumerActor.remote();
  const pid = await c.pid.remote();
  const mapped = (await objectStats()).sharedMemoryReads.mapped;
  const got = await c.makeWeights.remote(n);
  assert.is(got.step, 7);
  assert.ok(got.w instanceof Float32Array);
  assert.is(got.w.length, n);
  assert.is(got.w[n - 1], n - 1);
  assert.is((await objectStats()).sharedMemoryReads.mapped, mapped + 1, 'this process mapped it');
  assert.is(filesOf(pid).length, 0, 'a mapped file is never reused: its reader removed it');
  await kill(c);
});

test('an object a killed worker owned leaves no file (its node agent removes it)', async () => {
  const c = ConsumerActor.remote();
  const pid = await c.pid.remote();
  const box = await c.putWeights.remote(n);
  // Two readers on a node: the second fetch makes the worker write the object's file.
  const readers = [ConsumerActor.remote(), ConsumerActor.remote()];
  for (const r of readers) {
    const got = await r.describe.remote(box.ref);
    assert.equal(got.step, ['number', 7]);
  }
  assert.is(filesOf(pid).length, 1, 'the worker keeps its object’s file while the object lives');
  await Promise.all(readers.map((r) => kill(r)));
  await kill(c);
  await until(
    () => filesOf(pid).length === 0,
    10_000,
    'the node agent to remove the killed worker’s files',
  );
});

test('RTJOB_OBJECT_SHM=0 sends the same values over the socket', async () => {
  const c = ConsumerActor.options({ env: { RTJOB_OBJECT_SHM: '0' } }).remote();
  const pid = await c.pid.remote();
  const before = filesOf(process.pid).length;
  const node = (await actorInfo(c)).nodeId!;
  const served = await servedTo(node);
  const ref = put(weights);
  assert.equal(await c.describe.remote(ref), want);
  assert.is(filesOf(process.pid).length, before, 'no file for a peer without shared memory');
  assert.equal(await servedTo(node), { ...served, socket: served.socket + 1 }, 'counted per path');
  const got = await c.makeWeights.remote(n);
  assert.is(got.w[n - 1], n - 1);
  assert.is(filesOf(pid).length, 0);
  release(ref);
  await kill(c);
});

test('socket: a 64 MiB result is bit-exact; a worker dying mid-send fails the get (ACTOR_DIED)', async () => {
  const c = ConsumerActor.options({ env: { RTJOB_OBJECT_SHM: '0' }, maxRestarts: 0 }).remote();
  const big = 16 << 20; // 64 MiB of float32
  const got = await c.makeWeights.remote(big);
  let wrong = -1;
  for (let i = 0; i < big && wrong < 0; i++) if (got.w[i] !== i) wrong = i;
  assert.is(wrong, -1, 'every element as sent');
  const e = await rejection(c.makeWeightsAndDie.remote(big));
  assert.is(e.code, 'ACTOR_DIED', e.message);
});

test('a freed object takes its file with it; repeated transfers keep a bounded set of files', async () => {
  const before = filesOf(process.pid).length;
  for (let i = 0; i < 4; i++) {
    // Two consumers on the node (the second fetch writes the file), one copying, one mapping.
    const cs = [CopyingConsumer.remote(), ConsumerActor.remote()];
    const ref = put(weights);
    for (const c of cs) assert.equal(await c.describe.remote(ref), want);
    const mine = () => filesOf(process.pid).filter((f) => f.includes(ref.id.replace(/\W/g, '_')));
    assert.is(mine().length, 1, 'the object has its file while it lives');
    release(ref);
    // The consumers' borrows end with them; the object is freed once the hold after the
    // transfer (200 ms here) has passed.
    await Promise.all(cs.map((c) => kill(c)));
    await until(() => mine().length === 0, 5000, 'the freed object’s file to go');
  }
  // Freed files are kept as spares for the next object (at most two), never accumulated.
  assert.ok(filesOf(process.pid).length <= before + 2, `${filesOf(process.pid).length} files`);
});

test('workers start with large allocations backed by huge pages (glibc tunable)', async () => {
  const c = ConsumerActor.remote();
  assert.match(String(await c.env.remote('GLIBC_TUNABLES')), /glibc\.malloc\.hugetlb=1/);
  await kill(c);
});

test('files of a process killed with SIGKILL are removed by the next process to use the directory', () => {
  const shm = new URL('../../runtime/client/shm.ts', import.meta.url).href;
  const run = (code: string) =>
    spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
    });
  // A process writes an object's file and dies without its exit hook.
  const writer = run(
    `const { writeShm, installShmCodec } = await import('${shm}'); installShmCodec();` +
      `const v = await writeShm(new Float32Array(1 << 18), 'orphan', false);` +
      `console.log(v.name); process.kill(process.pid, 'SIGKILL');`,
  );
  const name = writer.stdout.trim();
  assert.ok(name.startsWith(`${writer.pid}-`), `a file name (${writer.stderr})`);
  assert.ok(existsSync(`${shmDir}/${name}`), 'left behind by the killed process');
  const sweeper = run(`const { machineId } = await import('${shm}'); machineId();`);
  assert.is(sweeper.status, 0, sweeper.stderr);
  assert.not.ok(existsSync(`${shmDir}/${name}`), 'swept');
});

test.run();
