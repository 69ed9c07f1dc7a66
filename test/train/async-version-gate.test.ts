import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { VersionGate } from '../../train/ppo/async-loop.ts';

/** Settles pending promise callbacks without timers. */
const flush = async (): Promise<void> => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

test('readers share the gate; the writer waits for all of them', async () => {
  const g = new VersionGate();
  await g.read();
  await g.read();
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
  g.done();
});

test('a waiting writer goes before readers that come after it, and they then run together', async () => {
  const g = new VersionGate();
  await g.read();
  const order: string[] = [];
  const w = g.write().then(() => order.push('write'));
  const r1 = g.read().then(() => order.push('read1'));
  const r2 = g.read().then(() => order.push('read2'));
  await flush();
  assert.equal(order, [], 'the next batch queues behind the publish');
  g.done();
  await w;
  await flush();
  assert.equal(order, ['write'], 'readers wait until the publish is done');
  g.done();
  await Promise.all([r1, r2]);
  assert.equal(order, ['write', 'read1', 'read2']);
  let wrote = false;
  const w2 = g.write().then(() => void (wrote = true));
  g.done();
  await flush();
  assert.not.ok(wrote, 'both queued readers hold the gate');
  g.done();
  await w2;
  g.done();
});

test('with nobody holding it, read and write are granted at once', async () => {
  const g = new VersionGate();
  await g.write();
  g.done();
  await g.read();
  g.done();
  await g.write();
  g.done();
});

test.run();
