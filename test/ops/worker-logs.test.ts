// Reading an actor's logs: stdout and stderr of every incarnation as one stream, resumable with a
// cursor, whole lines only while the incarnation runs; shipped pieces land at their offsets.
import {
  appendFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { OpsStore } from '../../ops/jobs/ops-store.ts';
import {
  indexWorkerLogs,
  readActorLogs,
  shippedLogDir,
  workerLogPaths,
  writeShippedLog,
} from '../../ops/logs/worker-logs.ts';

const dir = mkdtempSync(join(tmpdir(), 'rtjob-wlogs-'));
const store = new OpsStore(join(dir, 'ops.db'));
mkdirSync(join(dir, 'logs'));
test.after(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

const subject = (incarnation: number) => ({
  actorId: 'actor_a1',
  incarnation,
  nodeId: 'node_1',
  jobId: 'job1',
  pid: 100 + incarnation,
});

test('one stream per actor, followed with a cursor; partial lines wait while it runs', () => {
  indexWorkerLogs(store, subject(1), dir);
  const p1 = workerLogPaths(dir, 'actor_a1', 1);
  writeFileSync(p1.stdout, 'hello\npart');
  writeFileSync(p1.stderr, 'warn 1\n');
  const files = () => store.findLogFiles({ actorId: 'actor_a1' });
  assert.is(files().length, 2);
  assert.ok(files().every((f) => f.jobId === 'job1' && f.kind === 'worker'));

  const a = readActorLogs(files(), undefined, { liveIncarnation: 1 });
  assert.is(a.logs, 'hello\nwarn 1\n');
  appendFileSync(p1.stdout, 'ial line\n');
  const b = readActorLogs(files(), a.cursor, { liveIncarnation: 1 });
  assert.is(b.logs, 'partial line\n');
  const idle = readActorLogs(files(), b.cursor, { liveIncarnation: 1 });
  assert.is(idle.logs, '');
  assert.is(idle.cursor, b.cursor);

  // A restart adds files after the old ones; the old cursor still lines up.
  appendFileSync(p1.stdout, 'last words without newline');
  indexWorkerLogs(store, subject(2), dir);
  const p2 = workerLogPaths(dir, 'actor_a1', 2);
  writeFileSync(p2.stdout, 'second life\n');
  writeFileSync(p2.stderr, '');
  const c = readActorLogs(files(), idle.cursor, { liveIncarnation: 2 });
  assert.is(c.logs, 'last words without newline--- restart 1 (incarnation 2) ---\nsecond life\n');
  assert.equal(
    c.files.map((f) => [f.incarnation, f.stream]),
    [
      [1, 'stdout'],
      [1, 'stderr'],
      [2, 'stdout'],
      [2, 'stderr'],
    ],
  );
  // From the start, everything in order.
  const all = readActorLogs(files(), undefined, {});
  assert.is(
    all.logs,
    'hello\npartial line\nlast words without newline' +
      'warn 1\n' +
      '--- restart 1 (incarnation 2) ---\nsecond life\n',
  );
});

test('shipped pieces are written at their offsets, idempotently; bad ones are dropped', () => {
  const piece = (offset: number, text: string) => ({
    nodeId: 'node_r',
    actorId: 'actor_b',
    incarnation: 1,
    stream: 'stdout' as const,
    offset,
    data: Buffer.from(text),
  });
  assert.ok(writeShippedLog(dir, piece(0, 'abc\n')));
  assert.ok(writeShippedLog(dir, piece(4, 'def\n')));
  assert.ok(writeShippedLog(dir, piece(4, 'def\n'))); // re-sent after a reconnect
  const path = workerLogPaths(shippedLogDir(dir, 'node_r'), 'actor_b', 1).stdout;
  assert.is(readFileSync(path, 'utf8'), 'abc\ndef\n');
  assert.not.ok(writeShippedLog(dir, { ...piece(0, 'x'), actorId: '../../etc/passwd' }));
  assert.not.ok(writeShippedLog(dir, { ...piece(0, 'x'), nodeId: 'a/b' }));
  assert.not.ok(writeShippedLog(dir, { ...piece(-1, 'x') }));
});

test.run();
