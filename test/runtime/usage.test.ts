// Live utilisation: a node agent samples its machine, itself and each worker from /proc and sends
// it to the head (`nodeStats`), which lists it with the node; a busy worker shows its CPU.
import { spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import {
  type LocalCluster,
  defineActor,
  get,
  init,
  kill,
  shutdown,
  startLocalCluster,
} from '../../runtime/index.ts';
import type { NodeStats } from '../../runtime/protocol.ts';
import {
  ProcessSampler,
  cpuTicksOfStat,
  parseStat,
  rssOfStatus,
} from '../../runtime/node/usage.ts';
import { invalidFields } from '../../runtime/wire-schemas.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');

test('/proc parsing: CPU ticks counted after the last ")", RSS in bytes', () => {
  // A command name with spaces and parentheses; utime 250 and stime 50 are fields 14 and 15.
  const stat = '4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 11 0';
  assert.is(cpuTicksOfStat(stat), 300);
  assert.equal(parseStat(stat), { pgrp: 4242, ticks: 300 });
  assert.is(cpuTicksOfStat('garbage'), undefined);
  assert.is(rssOfStatus('Name:\tnode\nVmRSS:\t  123456 kB\nThreads: 11\n'), 123456 * 1024);
  assert.is(rssOfStatus('Name:\tkthreadd\n'), undefined);
});

test('the wire schema bounds a usage sample', () => {
  const ok: NodeStats = {
    type: 'nodeStats',
    cpuPercent: 12.5,
    cpuCount: 2,
    memoryUsedBytes: 1e9,
    memoryTotalBytes: 4e9,
    agent: { pid: 10, cpuPercent: 3, rssBytes: 8e7 },
    workers: [{ actorId: 'a1', incarnation: 1, pid: 11, cpuPercent: null, rssBytes: null }],
  };
  assert.is(invalidFields(ok), undefined);
  const tooBusy: NodeStats = { ...ok, cpuPercent: 150 };
  assert.match(invalidFields(tooBusy) ?? '', /cpuPercent/);
  const negative: NodeStats = { ...ok, workers: [{ ...ok.workers[0]!, rssBytes: -1 }] };
  assert.match(invalidFields(negative) ?? '', /rssBytes/);
});

test('a process group is sampled as one: CPU and memory summed over its members', async () => {
  // A job driver as the supervisor runs it: a `sh` wrapper leads the group, its child works.
  const busy = 'const end = Date.now() + 30000; while (Date.now() < end);';
  const sh = spawn('/bin/sh', ['-c', `"${process.execPath}" -e "${busy}" & wait`], {
    detached: true,
    stdio: 'ignore',
  });
  const leader = sh.pid!;
  try {
    const sampler = new ProcessSampler();
    assert.is(sampler.sample([leader], [leader]).groups[0]!.cpuPercent, null, 'a rate needs two');
    const s = (await until(
      async () => {
        await new Promise((r) => setTimeout(r, 300));
        const now = sampler.sample([leader], [leader]);
        const g = now.groups[0]!;
        return g.members === 2 && (g.cpuPercent ?? 0) > 5 ? now : undefined;
      },
      15_000,
      'the group to show its child’s CPU',
    ))!;
    const [wrapper] = s.processes;
    assert.ok((wrapper!.cpuPercent ?? 0) < 5, `the wrapper alone idles: ${wrapper!.cpuPercent}%`);
    assert.ok(s.groups[0]!.rssBytes! > wrapper!.rssBytes!, 'memory is summed over the members');
    assert.is(s.self.pid, process.pid);
  } finally {
    process.kill(-leader, 'SIGKILL');
  }
});

let cluster: LocalCluster | undefined;
test('the head lists each node with its machine, agent and workers as sampled', async () => {
  cluster = await startLocalCluster({ node: { numCpus: 2, statsIntervalMs: 200 } });
  await init({ address: cluster.address, token: cluster.token });
  const c = CounterActor.remote();
  const pid = await get(c.pid.remote());
  const spinning = c.spin.remote(4000);
  const head = cluster.head;
  const worker = (await until(
    () => head.listNodes()[0]?.usage?.workers.find((w) => w.pid === pid && (w.cpuPercent ?? 0) > 5),
    10_000,
    'the busy worker to show its CPU',
  ))!;
  assert.ok(worker.cpuPercent! <= 100 * cpus().length, `${worker.cpuPercent}%`);
  assert.ok(worker.rssBytes! > 10 * 2 ** 20, `worker RSS ${worker.rssBytes}`);
  const u = head.listNodes()[0]!.usage!;
  assert.is(u.agent.pid, process.pid, 'the in-process agent reports itself');
  assert.ok(u.agent.rssBytes! > 0);
  assert.ok(u.cpuPercent !== null && u.cpuPercent > 0 && u.cpuPercent <= 100);
  assert.is(u.cpuCount, cpus().length);
  assert.ok(u.memoryUsedBytes > 0 && u.memoryUsedBytes <= u.memoryTotalBytes);
  // A second node reports its own sample (the head keeps one per node).
  const second = await cluster.addNode({ numCpus: 1, statsIntervalMs: 200 });
  const other = (await until(
    () => head.listNodes().find((n) => n.nodeId === second.nodeId)?.usage,
    10_000,
    'the second node to report',
  ))!;
  assert.is(other.workers.length, 0);
  assert.ok(other.memoryTotalBytes > 0);
  await spinning;
  await kill(c);
  await until(
    () => !head.listNodes()[0]?.usage?.workers.some((w) => w.pid === pid),
    10_000,
    'the dead worker to leave the sample',
  );
});

test.after(async () => {
  await shutdown();
  await cluster?.close();
});

test.run();
