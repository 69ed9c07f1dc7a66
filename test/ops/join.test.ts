// Two nodes on loopback: `rtjob start --head` here, `rtjob start --address --token` in another
// HOME joins it; an actor that needs the second node's resource runs there, its logs are readable
// from the head, and `rtjob stop` on the second machine takes its node out cleanly.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, pidAlive, Sandbox, until } from '../cli/helpers.ts';

const driver = fileURLToPath(new URL('./fixtures/actor-driver.ts', import.meta.url));
const head = new Sandbox();
const second = new Sandbox();

interface NodeRow {
  nodeId: string;
  state: string;
  isHead: boolean;
  resourcesTotal: Record<string, number>;
}

test.after(async () => {
  await second.cleanup();
  await head.cleanup();
});

test('a node joins with --address and --token and runs the actors that need it', async () => {
  await head.startHead(['--resources', '{"head_only": 1}']);
  const { address, token } = head.clusterFile();

  const refused = await second.run([
    'start',
    '--address',
    address,
    '--token',
    'wrong-token',
    '--num-cpus',
    '1',
  ]);
  assert.is(refused.code, 1);
  assert.match(refused.stderr, /refused the token/);

  const joined = await second.run([
    'start',
    '--address',
    address,
    '--token',
    token,
    '--num-cpus',
    '1',
    '--resources',
    '{"second": 1}',
  ]);
  assert.is(joined.code, 0, joined.stderr);
  assert.match(joined.stdout, /joined/);
  const nodeFile = JSON.parse(
    readFileSync(join(second.home, '.rtjob', 'node-session', 'node.json'), 'utf8'),
  ) as { nodeId: string; pid: number };

  const { body } = await apiCall<{ nodes: NodeRow[] }>(head, 'GET', '/api/nodes');
  const alive = body.nodes.filter((n) => n.state === 'ALIVE');
  assert.is(alive.length, 2);
  const joinedNode = alive.find((n) => n.nodeId === nodeFile.nodeId)!;
  assert.ok(joinedNode, 'the joined node is listed');
  assert.is(joinedNode.isHead, false);
  assert.is(joinedNode.resourcesTotal.second, 1);
  assert.is(joinedNode.resourcesTotal.CPU, 1);

  const r = await head.run([
    'submit',
    '--job-id',
    'placed',
    '--env',
    'MODE=placed',
    '--env',
    'RESOURCE=second',
    '--',
    driver,
  ]);
  assert.is(r.code, 0, r.stderr + r.stdout);
  const [, actorId, nodeId] = /placed (\S+) on (\S+)/.exec(r.stdout)!;
  assert.is(nodeId, nodeFile.nodeId);
  // The joined node ships its workers' logs; the head serves its own copy.
  const shipped = await until('the shipped log', async () => {
    const logs = await head.run(['logs', 'placed', '--actor', actorId!]);
    return /out: hello from the placed actor\n[\s\S]*err: hello from the placed actor/.test(
      logs.stdout,
    )
      ? logs.stdout
      : undefined;
  });
  assert.ok(
    existsSync(
      join(
        head.clusterFile().sessionDir,
        'nodes',
        nodeFile.nodeId,
        'logs',
        `worker-${actorId}-1.out`,
      ),
    ),
  );

  // A job's working dir reaches the node that runs its actor: the module and relative files come
  // from that node's own copy of the package (fetched from the head, kept by content hash).
  const wd = fileURLToPath(new URL('./fixtures/wd/', import.meta.url));
  const w = await head.run([
    'submit',
    '--job-id',
    'wd',
    '--working-dir',
    wd,
    '--env',
    'MODE=wd-remote',
    '--env',
    'RESOURCE=second',
    '--',
    driver,
  ]);
  assert.is(w.code, 0, w.stderr + w.stdout);
  const [, text, modulePath, cwd, wdNode] =
    /wd read (.+) at (\S+) cwd (\S+) on (\S+)/.exec(w.stdout) ?? [];
  assert.is(text, 'the working dir travelled');
  assert.is(wdNode, nodeFile.nodeId);
  const nodePackages = join(second.home, '.rtjob', 'node-session', 'packages');
  assert.ok(
    modulePath?.startsWith(nodePackages),
    `module loaded from the node's copy: ${modulePath}`,
  );
  assert.ok(cwd?.startsWith(nodePackages), `runs in the node's copy: ${cwd}`);

  // Leaving: `rtjob stop` on the second machine stops its agent; the head marks the node dead.
  const stop = await second.run(['stop']);
  assert.is(stop.code, 0, stop.stderr);
  assert.not.ok(pidAlive(nodeFile.pid));
  await until('the node to be marked dead', async () => {
    const n = await apiCall<{ nodes: NodeRow[] }>(head, 'GET', '/api/nodes');
    return n.body.nodes.find((x) => x.nodeId === nodeFile.nodeId)?.state === 'DEAD'
      ? true
      : undefined;
  });
  // Its logs outlive the node and its disk.
  rmSync(join(second.home, '.rtjob', 'node-session'), { recursive: true, force: true });
  const after = await head.run(['logs', 'placed', '--actor', actorId!]);
  assert.is(after.stdout, shipped);
});

test.run();
