// The one readers–writer gate over an engine's weights (engines/weights-gate.ts), as llama.cpp's
// engine and train_ppo's async loop use it: readers together, a writer alone, served in arrival
// order so that neither side starves the other.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { WeightsGate } from '../../engines/weights-gate.ts';

/** Settles pending promise callbacks without timers. */
const flush = async (): Promise<void> => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

/** Starts `p` and records `name` in `order` when it is granted. */
const track = (order: string[], name: string, p: Promise<void>): Promise<void> =>
  p.then(() => void order.push(name));

test('readers share the gate; the writer waits for all of them', async () => {
  const g = new WeightsGate();
  await g.read();
  await g.read();
  assert.is(g.readers, 2, 'two readers hold the weights at once');
  let wrote = false;
  const w = g.write().then(() => void (wrote = true));
  await flush();
  assert.not.ok(wrote, 'publish waits while a batch or an evaluation holds the weights');
  g.done();
  await flush();
  assert.not.ok(wrote, 'one reader still holds');
  g.done();
  await w;
  assert.ok(wrote);
  assert.ok(g.writing);
  assert.is(g.readers, 0);
  g.done();
  assert.not.ok(g.writing);
});

test('a writer holds the gate alone: readers and other writers wait until it is done', async () => {
  const g = new WeightsGate();
  await g.write();
  const order: string[] = [];
  const r = track(order, 'read', g.read());
  const w = track(order, 'write2', g.write());
  await flush();
  assert.equal(order, [], 'nobody enters while the weights change');
  g.done();
  await r;
  await flush();
  assert.equal(order, ['read'], 'the reader that came first goes first; the second writer waits');
  g.done();
  await w;
  assert.equal(order, ['read', 'write2']);
  g.done();
});

test('a waiting writer goes before readers that come after it, and they then run together', async () => {
  const g = new WeightsGate();
  await g.read();
  const order: string[] = [];
  const w = track(order, 'write', g.write());
  const r1 = track(order, 'read1', g.read());
  const r2 = track(order, 'read2', g.read());
  await flush();
  assert.equal(order, [], 'the next batch queues behind the publish');
  g.done();
  await w;
  await flush();
  assert.equal(order, ['write'], 'readers wait until the publish is done');
  g.done();
  await Promise.all([r1, r2]);
  assert.equal(order, ['write', 'read1', 'read2']);
  assert.is(g.readers, 2, 'the queued readers hold the gate together');
  let wrote = false;
  const w2 = g.write().then(() => void (wrote = true));
  g.done();
  await flush();
  assert.not.ok(wrote, 'both queued readers hold the gate');
  g.done();
  await w2;
  g.done();
});

test('no writer starves: a stream of overlapping readers lets a waiting writer in', async () => {
  const g = new WeightsGate();
  await g.read();
  let wrote = false;
  const w = g.write().then(() => void (wrote = true));
  // Each new reader arrives while another still holds the gate; none may pass the writer.
  const late: Promise<void>[] = [];
  for (let i = 0; i < 10; i++) late.push(g.read());
  g.done();
  await w;
  assert.ok(wrote, 'the writer got the gate as soon as the reader before it left');
  assert.is(g.readers, 0, 'no later reader entered before it');
  g.done();
  await Promise.all(late);
  assert.is(g.readers, 10);
  for (let i = 0; i < 10; i++) g.done();
});

test('no reader starves: writers arriving one after another let an earlier reader in', async () => {
  const g = new WeightsGate();
  await g.write();
  const order: string[] = [];
  const r = track(order, 'read', g.read());
  const ws = [1, 2, 3].map((i) => track(order, `write${i}`, g.write()));
  g.done();
  await r;
  assert.equal(order, ['read']);
  g.done();
  for (const w of ws) {
    await w;
    g.done();
  }
  assert.equal(order, ['read', 'write1', 'write2', 'write3']);
});

test('with nobody holding it, read and write are granted at once; done() on a free gate throws', async () => {
  const g = new WeightsGate();
  await g.write();
  g.done();
  await g.read();
  g.done();
  await g.write();
  g.done();
  assert.throws(
    () => g.done(),
    (e: Error & { code?: string }) => e.code === 'GATE_NOT_HELD',
  );
});

test.run();
