import { connect } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type ActorHandle,
  defineActor,
  get,
  init,
  initCollectiveGroup,
  kill,
  shutdown,
} from '../../runtime/index.ts';
import { currentRuntime } from '../../runtime/client/runtime.ts';
import type { Member } from '../fixtures/runtime/collective-member.ts';
import { fixture, rejection, until } from './helpers.ts';

const MemberActor = defineActor<typeof Member>(fixture('collective-member.ts'), 'Member');

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

let groups = 0;
/** Starts `n` member actors and joins them into a fresh group. */
async function group(n: number, timeoutMs?: number): Promise<ActorHandle<Member>[]> {
  const name = `g${groups++}`;
  const members = Array.from({ length: n }, (_, r) => MemberActor.remote(name, r, n));
  assert.equal(await get(members.map((m) => m.join.remote(timeoutMs))), [...Array(n).keys()]);
  return members;
}

async function stop(members: ActorHandle<Member>[]): Promise<void> {
  await Promise.all(members.map((m) => kill(m)));
}

/** Deterministic values of mixed magnitudes, so that the order of additions shows in the bits. */
function values(seed: number, n: number): Float32Array {
  let s = seed * 2654435761 + 1;
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) % 2147483648;
    a[i] = (s / 2147483648 - 0.5) * 10 ** ((i % 7) - 3);
  }
  return a;
}

const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** `got` within float32 rounding of `want`, whose terms summed to `scale` in absolute value. */
function assertClose(
  got: Float32Array,
  want: Float64Array,
  scale: Float64Array,
  what: string,
): void {
  assert.is(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const tol = 4 * 2 ** -23 * scale[i]! + 1e-30;
    if (Math.abs(got[i]! - want[i]!) > tol)
      assert.unreachable(`${what}: element ${i} is ${got[i]}, want ${want[i]}`);
  }
}

for (const n of [2, 3, 4]) {
  test(`all-reduce, broadcast and barrier over ${n} members: right values, same bits on every rank`, async () => {
    const members = await group(n);
    // Odd sizes, sizes smaller than the world, and one large enough to take many socket reads.
    for (const size of [1, n - 1, 7, 1001, 300_007]) {
      const inputs = members.map((_, r) => values(r + size, size));
      const want = new Float64Array(size);
      const scale = new Float64Array(size);
      for (const x of inputs) {
        for (let i = 0; i < size; i++) {
          want[i]! += x[i]!;
          scale[i]! += Math.abs(x[i]!);
        }
      }
      const sums = await get(members.map((m, r) => m.allreduce.remote(inputs[r]!, 'sum')));
      for (const s of sums)
        assert.ok(bits(s).equals(bits(sums[0]!)), `sum of ${size}: identical bits on every rank`);
      assertClose(sums[0]!, want, scale, `sum of ${size}`);
      const again = await get(members.map((m, r) => m.allreduce.remote(inputs[r]!, 'sum')));
      assert.ok(
        bits(again[n - 1]!).equals(bits(sums[0]!)),
        `sum of ${size}: the same bits when repeated`,
      );
      const means = await get(members.map((m, r) => m.allreduce.remote(inputs[r]!, 'mean')));
      for (const s of means)
        assert.ok(bits(s).equals(bits(means[0]!)), `mean of ${size}: identical bits`);
      assertClose(
        means[0]!,
        want.map((v) => v / n),
        scale.map((v) => v / n),
        `mean of ${size}`,
      );
    }

    // Named tensors (gradients by parameter name), in any key order.
    const named = members.map((_, r) =>
      r % 2 ? { w: values(r, 33), b: values(r + 9, 5) } : { b: values(r + 9, 5), w: values(r, 33) },
    );
    const reduced = await get(members.map((m, r) => m.allreduceNamed.remote(named[r]!, 'mean')));
    for (const key of ['w', 'b'] as const) {
      const want = new Float64Array(named[0]![key].length);
      const scale = new Float64Array(want.length);
      for (const t of named) {
        for (let i = 0; i < want.length; i++) {
          want[i]! += t[key][i]! / n;
          scale[i]! += Math.abs(t[key][i]!) / n;
        }
      }
      for (const t of reduced)
        assert.ok(bits(t[key]!).equals(bits(reduced[0]![key]!)), `${key}: identical bits`);
      assertClose(reduced[0]![key]!, want, scale, `named ${key}`);
    }

    const root = n - 1;
    const sent = values(42, 100_003);
    const got = await get(
      members.map((m, r) =>
        m.broadcast.remote(r === root ? sent : new Float32Array(100_003), root),
      ),
    );
    for (const g of got) assert.ok(bits(g).equals(bits(sent)), 'every rank has the root’s values');

    const times = await get(members.map((m) => m.barrier.remote()));
    assert.is(times.length, n);
    await stop(members);
  });
}

test('a member killed mid-all-reduce fails the others with a typed error, well within the timeout', async () => {
  const timeoutMs = 30_000;
  const members = await group(3, timeoutMs);
  const size = 4 << 20;
  const t0 = Date.now();
  const r0 = rejection(members[0]!.allreduce.remote(new Float32Array(size)));
  const r1 = rejection(members[1]!.allreduce.remote(new Float32Array(size)));
  void members[2]!.allreduceThenDie.remote(size).catch(() => {});
  const [e0, e1] = await Promise.all([r0, r1]);
  const elapsed = Date.now() - t0;
  for (const e of [e0, e1]) {
    assert.is(e.code, 'COLLECTIVE', e.message);
    assert.is(e.context?.reason, 'member-left', e.message);
  }
  assert.ok(elapsed < timeoutMs / 2, `failed after ${elapsed} ms`);
  // The group stays failed: the next call rejects at once.
  const next = await rejection(members[0]!.barrier.remote());
  assert.is(next.code, 'COLLECTIVE');
  await stop(members.slice(0, 2));
});

test('a member that never calls makes the operation time out; its own next call then fails', async () => {
  const members = await group(2, 300);
  const e = await rejection(members[0]!.barrier.remote());
  assert.is(e.code, 'COLLECTIVE');
  assert.is(e.context?.reason, 'timeout');
  assert.match(e.message, /timed out after 300 ms/);
  const late = await rejection(members[1]!.barrier.remote());
  assert.is(late.code, 'COLLECTIVE');
  assert.is(late.context?.reason, 'member-left');
  await stop(members);
});

test('members that call different sizes or operations get a mismatch error, not garbage', async () => {
  const members = await group(2);
  const [a, b] = await Promise.all([
    rejection(members[0]!.allreduce.remote(new Float32Array(10))),
    rejection(members[1]!.allreduce.remote(new Float32Array(11))),
  ]);
  for (const e of [a, b]) {
    assert.is(e.code, 'COLLECTIVE');
    assert.is(e.context?.reason, 'mismatch', e.message);
    assert.match(e.message, /allreduce\(sum\) #0 on 1[01] elements/);
  }
  await stop(members);
});

test('a link without the cluster token is refused; the real member then joins', async () => {
  const member = MemberActor.remote('guarded', 0, 2);
  const joined = member.join.remote();
  const rt = currentRuntime()!;
  const raw = await until(
    () => rt.head.request({ type: 'kvGet', key: 'collective/guarded/0' }),
    30_000,
    'rank 0 to publish its address',
  );
  const entry = JSON.parse(Buffer.from(raw!).toString()) as { address: string };
  const [host, port] = [
    entry.address.slice(0, entry.address.lastIndexOf(':')),
    Number(entry.address.split(':').pop()),
  ];
  const answer = await new Promise<string>((resolve) => {
    const sock = connect({ host, port }, () => {
      const hello = Buffer.from(
        JSON.stringify({ group: 'guarded', rank: 1, worldSize: 2, proof: 'f'.repeat(64) }),
      );
      const len = Buffer.alloc(4);
      len.writeUInt32LE(hello.length);
      sock.write(Buffer.concat([len, hello]));
    });
    sock.on('data', () => resolve('accepted'));
    sock.on('close', () => resolve('refused'));
    sock.on('error', () => {});
  });
  assert.is(answer, 'refused');
  const group = await initCollectiveGroup({ name: 'guarded', worldSize: 2, rank: 1 });
  assert.is(await joined, 0);
  await Promise.all([group.barrier(), member.barrier.remote()]);
  group.destroy();
  await kill(member);
});

test('bad options and a member that never joins are clear errors', async () => {
  const bad = await rejection(initCollectiveGroup({ name: 'x', worldSize: 2, rank: 2 }));
  assert.is(bad.code, 'INVALID_ARGUMENT');
  assert.match(bad.message, /rank must be 0\.\.1, got 2/);
  assert.is(
    (await rejection(initCollectiveGroup({ name: '', worldSize: 1, rank: 0 }))).code,
    'INVALID_ARGUMENT',
  );
  // The driver joins a group of two whose other member never comes.
  const alone = await rejection(
    initCollectiveGroup({ name: 'alone', worldSize: 2, rank: 0, joinTimeoutMs: 300 }),
  );
  assert.is(alone.code, 'COLLECTIVE');
  assert.is(alone.context?.reason, 'timeout');
  // A world of one needs nobody.
  const solo = await initCollectiveGroup({ name: 'solo', worldSize: 1, rank: 0 });
  const x = new Float32Array([1, 2, 3]);
  assert.equal([...(await solo.allreduce(x, { op: 'mean' }))], [1, 2, 3]);
  solo.destroy();
  assert.is((await rejection(solo.barrier())).context?.reason, 'destroyed');
});

test.run();
