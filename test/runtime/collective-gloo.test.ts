/**
 * The `gloo` collective backend against torch.distributed itself: this process is rank 0 (its
 * tensors Float32Arrays and torch backend tensors), a real Python process with Debian's
 * python3-torch (the same libtorch 1.13) is rank 1, both joined over `tcp://127.0.0.1:PORT`.
 * Results are checked exactly; a peer that is killed or stalls fails this rank's operation with
 * `CollectiveError` within the timeout while the event loop keeps running.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTorchBackend } from '../../model/backends/torch/index.ts';
import { initCollectiveGroup } from '../../runtime/collective/group.ts';
import type { RtjobError } from '../../runtime/errors.ts';
import { rejection } from './helpers.ts';

const peerScript = fileURLToPath(
  new URL('../fixtures/runtime/torch_dist_peer.py', import.meta.url),
);
const children: ChildProcess[] = [];

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as { port: number };
  await new Promise((r) => srv.close(r));
  return port;
}

/** A Python rank; `line()` resolves with its next stdout line (rejects if it exits first). */
function peer(port: number, mode: string) {
  const child = spawn('/usr/bin/python3', [peerScript, String(port), '1', '2', mode], {
    // Gloo binds the loopback interface, as this rank does.
    env: { ...process.env, GLOO_SOCKET_IFNAME: 'lo' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  let err = '';
  const waiting: ((l: string | Error) => void)[] = [];
  const lines: string[] = [];
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    for (let i = out.indexOf('\n'); i >= 0; i = out.indexOf('\n')) {
      const l = out.slice(0, i);
      out = out.slice(i + 1);
      const w = waiting.shift();
      if (w) w(l);
      else lines.push(l);
    }
  });
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  child.on('exit', (code) => {
    for (const w of waiting.splice(0))
      w(new Error(`python peer exited (${code}): ${err.slice(-600)}`));
  });
  return {
    child,
    line: (): Promise<string> =>
      lines.length
        ? Promise.resolve(lines.shift()!)
        : new Promise((resolve, reject) =>
            waiting.push((l) => (l instanceof Error ? reject(l) : resolve(l))),
          ),
  };
}

const seq = (n: number, base: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => base + i + 0.25);
const add = (a: Float32Array, b: Float32Array): number[] =>
  Array.from(a, (v, i) => Math.fround(v + b[i]!));

test.after(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});

test('a TS rank and a torch.distributed rank compute every collective exactly', async () => {
  await startTorchBackend();
  const port = await freePort();
  const py = peer(port, 'ops');
  const g = await initCollectiveGroup({
    name: 'gloo-ops',
    backend: 'gloo',
    initMethod: `tcp://127.0.0.1:${port}`,
    rank: 0,
    worldSize: 2,
    timeoutMs: 20_000,
    joinTimeoutMs: 30_000,
  });
  assert.is(g.backend, 'gloo');
  const sum = await g.allreduce(seq(8, 0));
  const mean = await g.allreduce(seq(8, 0.5), { op: 'mean' });
  const bcast = await g.broadcast(seq(6, 0), { root: 1 });
  const gathered = await g.allGather(new Float32Array(6), seq(3, 0.5));
  const scattered = await g.reduceScatter(new Float32Array(4), seq(8, 0));
  // Named: visited in sorted order, so `a` then `b` meet the peer's one tensor of 8.
  const named = { b: seq(8, 0).slice(5), a: seq(8, 0).slice(0, 5) };
  await g.allreduce(named);
  const device = tf.tensor1d(seq(4, 0));
  await g.allreduce(device);
  await g.barrier();
  const theirs = JSON.parse(await py.line()) as Record<string, number[]>;

  const expected = {
    sum: add(seq(8, 0), seq(8, 10)),
    mean: add(seq(8, 0.5), seq(8, 10.5)).map((v) => Math.fround(v / 2)),
    broadcast: Array.from(seq(6, 100)),
    allGather: [...seq(3, 0.5), ...seq(3, 1.5)],
    reduceScatter: add(seq(8, 0), seq(8, 7)).slice(0, 4),
    named: add(seq(8, 0), seq(8, 3)),
    device: add(seq(4, 0), seq(4, 5)),
  };
  assert.equal(Array.from(sum), expected.sum);
  assert.equal(Array.from(mean), expected.mean);
  assert.equal(Array.from(bcast), expected.broadcast);
  assert.equal(Array.from(gathered), expected.allGather);
  assert.equal(Array.from(scattered), expected.reduceScatter);
  assert.equal([...named.a, ...named.b], expected.named);
  assert.equal(Array.from(device.dataSync()), expected.device);
  // The peer holds the same bits (its reduce-scatter chunk is rank 1's).
  assert.equal(theirs, {
    ...expected,
    reduceScatter: add(seq(8, 0), seq(8, 7)).slice(4),
  });
  device.dispose();
  g.destroy();
});

/** Joins with a peer in `mode`, waits for its `ready`, then runs `act` and the all-reduce. */
async function failing(mode: 'die' | 'stall', timeoutMs: number) {
  const port = await freePort();
  const py = peer(port, mode);
  const g = await initCollectiveGroup({
    name: `gloo-${mode}`,
    backend: 'gloo',
    initMethod: `tcp://127.0.0.1:${port}`,
    rank: 0,
    worldSize: 2,
    timeoutMs,
    joinTimeoutMs: 30_000,
  });
  if (mode === 'die') await g.allreduce(new Float32Array(4));
  assert.is(await py.line(), 'ready');
  if (mode === 'die') py.child.kill('SIGKILL');
  let ticks = 0;
  const ticker = setInterval(() => ticks++, 20);
  const started = Date.now();
  const err = await g.allreduce(new Float32Array(1 << 16).fill(1)).then(
    (): never => {
      throw new Error('the all-reduce succeeded without its peer');
    },
    (e: unknown) => e as RtjobError,
  );
  const tookMs = Date.now() - started;
  clearInterval(ticker);
  py.child.stdin.end();
  return { g, err, tookMs, ticks };
}

test('a killed torch.distributed rank fails this rank with CollectiveError, not a hang', async () => {
  const { g, err, tookMs, ticks } = await failing('die', 5000);
  assert.is(err.code, 'COLLECTIVE');
  assert.is(err.name, 'CollectiveError');
  assert.is(err.context['reason'], 'member-left');
  assert.ok(tookMs < 5000, `failed after ${tookMs} ms`);
  // The operation waited off the JS thread: timers kept firing.
  assert.ok(ticks > 0 || tookMs < 40, `${ticks} ticks in ${tookMs} ms`);
  // A failed group stays failed.
  assert.is((await rejection(g.barrier())).code, 'COLLECTIVE');
  g.destroy();
});

test('a stalled rank fails this rank with reason timeout within the timeout', async () => {
  const { g, err, tookMs, ticks } = await failing('stall', 1500);
  assert.is(err.code, 'COLLECTIVE');
  assert.is(err.context['reason'], 'timeout');
  assert.ok(tookMs >= 1400 && tookMs < 1500 + 2500, `failed after ${tookMs} ms`);
  assert.ok(ticks >= 20, `the event loop ran ${ticks} timer ticks in ${tookMs} ms`);
  g.destroy();
});

test('a c10d group checks its options, and ring refuses initMethod', async () => {
  const e1 = await rejection(
    initCollectiveGroup({
      name: 'x',
      backend: 'gloo',
      initMethod: 'http://nope',
      rank: 0,
      worldSize: 2,
    }),
  );
  assert.is(e1.code, 'COLLECTIVE');
  assert.match(e1.message, /tcp:\/\/host:port/);
  const e2 = await rejection(
    initCollectiveGroup({
      name: 'x',
      initMethod: 'tcp://127.0.0.1:1',
      rank: 0,
      worldSize: 2,
    }),
  );
  assert.is(e2.code, 'INVALID_ARGUMENT');
});

test.run();
