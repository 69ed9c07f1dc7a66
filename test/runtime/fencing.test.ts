/**
 * Fencing (D8): a node cut off from the head is declared dead and its actor restarted elsewhere;
 * callers fail over when the head says so (not when their socket times out), and the replaced
 * incarnation, when it comes back, runs none of the calls that reached it meanwhile — it exits.
 *
 * The cut is a freeze (SIGSTOP of the node agent and its worker): both sides' packets wait, as on
 * a cut link. `npm run chaos` cuts a real link in a network namespace.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { writeDaemonOptions } from '../../cli/daemon-options.ts';
import { type Head, startHead } from '../../runtime/head/head.ts';
import { actorInfo, defineActor, init, shutdown } from '../../runtime/index.ts';
import { setLogSink } from '../../runtime/log.ts';
import { type NodeAgent, startNodeAgent } from '../../runtime/node/agent.ts';
import type { Ledger } from '../fixtures/runtime/ledger.ts';
import { alive, fixture, until } from './helpers.ts';

const LedgerActor = defineActor<typeof Ledger>(fixture('ledger.ts'), 'Ledger');
const nodeTimeoutMs = 1500;
let dir: string;
let head: Head;
let nodeB: NodeAgent;
let nodeA: ChildProcess;
const token = 'fencing-token';

test.before(async () => {
  setLogSink(() => {});
  dir = mkdtempSync(join(tmpdir(), 'rtjob-fence-'));
  head = await startHead({
    port: 0,
    token,
    sessionDir: dir,
    nodeHeartbeatTimeoutMs: nodeTimeoutMs,
    heartbeatIntervalMs: 200,
  });
  const opts = {
    headAddress: head.address,
    token,
    sessionDir: join(dir, 'a'),
    numCpus: 2,
    warmWorkers: 0,
  };
  mkdirSync(opts.sessionDir, { recursive: true });
  nodeA = spawn(
    process.execPath,
    ['--import', 'tsx', 'cli/node-daemon.ts', writeDaemonOptions(opts.sessionDir, opts)],
    { stdio: 'ignore' },
  );
  await until(() => existsSync(join(dir, 'a', 'node.json')), 20_000, 'node A');
  nodeB = await startNodeAgent({
    headAddress: head.address,
    token,
    sessionDir: join(dir, 'b'),
    numCpus: 2,
  });
  await init({ address: head.address, token });
});
test.after(async () => {
  await shutdown();
  if (nodeA.exitCode === null) {
    nodeA.kill('SIGCONT');
    nodeA.kill('SIGKILL');
  }
  await nodeB.close();
  await head.close();
  rmSync(dir, { recursive: true, force: true });
});

test('a replaced incarnation runs no call after its replacement exists; callers fail over at once', async () => {
  const file = join(dir, 'ledger.txt');
  const aId = JSON.parse(readFileSync(join(dir, 'a', 'node.json'), 'utf8')).nodeId as string;
  const l = LedgerActor.options({
    maxRestarts: 1,
    maxTaskRetries: 1,
    schedulingStrategy: { nodeId: aId, soft: true },
  }).remote(file);
  const oldPid = await l.record.remote('before');
  assert.is((await actorInfo(l)).nodeId, aId);

  // Cut node A off: its agent and its worker stop answering; packets to them wait.
  nodeA.kill('SIGSTOP');
  process.kill(oldPid, 'SIGSTOP');
  const t0 = Date.now();
  const during = l.record.remote('during');
  const newPid = await during;
  const failoverMs = Date.now() - t0;
  assert.is.not(newPid, oldPid, 'ran on the new incarnation');
  assert.ok(
    failoverMs < nodeTimeoutMs + 8000,
    `failed over in ${failoverMs} ms (socket timeout is 30 s)`,
  );

  // The link comes back: the old worker reads what was sent to it, and must run none of it.
  process.kill(oldPid, 'SIGCONT');
  nodeA.kill('SIGCONT');
  await until(() => !alive(oldPid), 15_000, 'the replaced worker to exit');
  const runs = readFileSync(file, 'utf8').trim().split('\n');
  assert.equal(
    runs,
    [`${oldPid} before`, `${newPid} during`],
    'each call ran exactly once, none on the old incarnation after the cut',
  );
  assert.is(await l.record.remote('after'), newPid);
});

test.run();
