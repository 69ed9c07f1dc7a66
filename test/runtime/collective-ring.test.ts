/**
 * The ring's byte stream in one process: N members whose sockets are replaced by queues, bytes
 * delivered in pieces of random, unaligned sizes (1, 2, 3 bytes, odd offsets). The real-process
 * suite is test/runtime/collective.test.ts; this one reaches the cut-float paths that loopback
 * reads seldom produce.
 */
import type { Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RingOp, chunkRange, opKind } from '../../runtime/collective/ring.ts';

/** A right-hand socket that queues writes for the neighbour and completes them at once. */
class Pipe {
  queue: Buffer[] = [];
  write(b: Buffer, cb: (err?: Error) => void): boolean {
    // A copy, as the kernel takes one: the writer may overwrite its buffer after the callback.
    this.queue.push(Buffer.from(b));
    queueMicrotask(() => cb());
    return true;
  }
}

let seed = 7;
function rand(): number {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
}

/** Runs one operation across `n` in-process members, delivering bytes in random pieces. */
async function run(
  n: number,
  inputs: Float32Array[],
  plan: (op: RingOp, rank: number) => RingOp,
  kind: number,
): Promise<Float32Array[]> {
  const pipes = inputs.map(() => new Pipe());
  const done: Promise<void>[] = [];
  const ops = inputs.map((data, rank) => {
    let resolve!: () => void;
    let reject!: (e: Error) => void;
    done.push(new Promise<void>((res, rej) => ((resolve = res), (reject = rej))));
    const op = new RingOp(
      data,
      pipes[rank] as unknown as Socket,
      { seq: 0, kind, count: data.length },
      (e) => (e ? reject(e) : resolve()),
    );
    return plan(op, rank);
  });
  let settled = false;
  void Promise.all(done).then(
    () => (settled = true),
    () => (settled = true),
  );
  while (!settled) {
    let moved = false;
    for (let r = 0; r < n; r++) {
      const q = pipes[(r - 1 + n) % n]!.queue;
      const b = q.shift();
      if (!b) continue;
      moved = true;
      // Cut into pieces of 1..7 bytes or larger, each copied to an odd offset of a fresh buffer.
      let at = 0;
      while (at < b.length) {
        const len = Math.min(
          b.length - at,
          rand() < 0.5 ? 1 + Math.floor(rand() * 7) : 1 + Math.floor(rand() * 4096),
        );
        const host = Buffer.alloc(len + 1);
        b.copy(host, 1, at, at + len);
        const rest = ops[r]!.feed(host.subarray(1));
        assert.is(rest, undefined, 'no bytes beyond the operation');
        at += len;
      }
    }
    await new Promise((r) => setImmediate(r));
    if (!moved && pipes.every((p) => p.queue.length === 0))
      await Promise.race([Promise.all(done), new Promise((r) => setTimeout(r, 10))]);
  }
  await Promise.all(done);
  return inputs;
}

for (const n of [2, 3, 5]) {
  test(`all-reduce of ${n} members through cut, unaligned pieces: exact ring-order sum on every rank`, async () => {
    for (const size of [1, 3, 10, 4099]) {
      const inputs = Array.from({ length: n }, (_, r) =>
        Float32Array.from({ length: size }, () => (rand() - 0.5) * 10 ** (r - 1)),
      );
      const orig = inputs.map((a) => a.slice());
      await run(n, inputs, (op, rank) => RingOp.allreduce(op, rank, n, true), opKind.mean);
      // The owner of chunk c is rank c-1; it adds c, c+1, ..., c-1 (mod n) in ring order, then divides.
      const want = new Float32Array(size);
      for (let c = 0; c < n; c++) {
        const [s, e] = chunkRange(size, n, c);
        for (let i = s; i < e; i++) {
          let acc = Math.fround(orig[c % n]![i]! + orig[(c + 1) % n]![i]!);
          for (let k = 2; k < n; k++) acc = Math.fround(acc + orig[(c + k) % n]![i]!);
          want[i] = Math.fround(acc / n);
        }
      }
      for (const got of inputs) assert.equal([...got], [...want], `size ${size}`);
    }
  });
}

test('broadcast through cut pieces reaches every member unchanged', async () => {
  const n = 4;
  const src = Float32Array.from({ length: 1001 }, () => rand());
  const inputs = Array.from({ length: n }, (_, r) =>
    r === 2 ? src.slice() : new Float32Array(1001),
  );
  await run(n, inputs, (op, rank) => RingOp.broadcast(op, rank, n, 2), opKind.broadcast | (2 << 8));
  for (const got of inputs) assert.equal([...got], [...src]);
});

test.run();
