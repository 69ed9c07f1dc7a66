import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  OutOfMemoryError,
  actorInfo,
  actorReady,
  defineActor,
  init,
  shutdown,
} from '../../runtime/index.ts';
import { MemoryMonitor, readMemory } from '../../runtime/node/memory-monitor.ts';
import type { Hog } from '../fixtures/runtime/hog.ts';
import { readFileSync } from 'node:fs';
import { rssOfStatus } from '../../runtime/node/usage.ts';
import { fixture, rejection } from './helpers.ts';

function rssOf(pid: number): number {
  try {
    return rssOfStatus(readFileSync(`/proc/${pid}/status`, 'utf8')) ?? 0;
  } catch {
    return 0;
  }
}

const HogActor = defineActor<typeof Hog>(fixture('hog.ts'), 'Hog');

test('readMemory reads the memory in use', () => {
  const r = readMemory();
  assert.ok(r.totalBytes > 0);
  assert.ok(r.usedBytes > 0 && r.usedBytes <= r.totalBytes);
});

test('the monitor asks for one kill at a time, and only past the threshold', async () => {
  let used = 50;
  const kills: number[] = [];
  let finishKill: (() => void) | undefined;
  const m = new MemoryMonitor({
    threshold: 0.9,
    intervalMs: 0,
    read: () => ({ usedBytes: used, totalBytes: 100, source: 'machine' }),
    onOverThreshold: (r) => {
      kills.push(r.usedBytes);
      return new Promise((resolve) => (finishKill = () => resolve(true)));
    },
  });
  m.check();
  assert.equal(kills, []);
  used = 95;
  m.check();
  m.check(); // the first kill is still under way
  assert.equal(kills, [95]);
  finishKill!();
  await Promise.resolve();
  await Promise.resolve();
  m.check();
  assert.equal(kills, [95, 95]);
});

test('a worker that allocates past the threshold is killed with OutOfMemoryError; older ones live', async () => {
  // Memory in use is the hog's own resident memory out of 1 GiB, so the hog crosses the
  // threshold (half) by itself, whatever the rest of this shared machine does: nothing else
  // needs to allocate and the machine is never exhausted.
  let hogPid: number | undefined;
  const totalBytes = 2 ** 30;
  const threshold = 0.5;
  await init({
    address: 'local',
    local: {
      node: {
        numCpus: 4,
        memoryUsageThreshold: threshold,
        memoryMonitorIntervalMs: 50,
        readMemory: () => ({
          usedBytes: hogPid === undefined ? 0 : rssOf(hogPid),
          totalBytes,
          source: 'machine',
        }),
      },
    },
  });
  try {
    const older = HogActor.remote();
    await actorReady(older);
    const hog = HogActor.remote();
    await actorReady(hog);
    hogPid = (await actorInfo(hog)).pid;
    const e = await rejection(hog.allocate.remote(64, 4096));
    assert.ok(e instanceof OutOfMemoryError, `${e.name}: ${e.message}`);
    assert.is(e.code, 'OUT_OF_MEMORY');
    assert.is(e.context?.reason, 'out-of-memory');
    assert.type(e.context?.nodeId, 'string');
    assert.ok((e.context?.usedBytes as number) >= threshold * (e.context?.totalBytes as number));
    assert.is(e.context?.pid, hogPid);
    assert.ok((e.context?.rssBytes as number) >= totalBytes * threshold);
    assert.match(e.message, /memory monitor of node .* killed the worker/);
    // It is DEAD (no restarts): later calls fail fast with the same error.
    assert.is((await rejection(hog.ping.remote())).code, 'OUT_OF_MEMORY');
    assert.is(await older.ping.remote(), 'pong');
  } finally {
    await shutdown();
  }
});

test.run();
