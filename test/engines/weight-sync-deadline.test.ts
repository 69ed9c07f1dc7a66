// A weight sync never hangs: a server that stops answering its reload route (while its health
// route still answers) fails the update within `weightSyncTimeoutMs` with a typed error that names
// the server and the phase, or, when other servers took the update, is taken out of routing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import {
  closedAfterEach,
  prompt,
  tempDir,
  testGenerator,
  writeFakeCheckpoint,
} from './fake-fixtures.ts';
import { withDeadline } from '../../train/ppo/health.ts';

const dir = tempDir();
test.after(() => dir.cleanup());
const own = closedAfterEach(test);

/** `p`'s outcome, or a failure once `ms` pass: a hang must fail the test, not stall the suite. */
const within = <T>(p: Promise<T>, ms: number): Promise<T | Error> =>
  withDeadline(p, ms, () => new Error(`still waiting after ${ms} ms`)).catch(
    (e: unknown) => e as Error,
  );

test('a reload that never answers fails the update with a timeout naming the server and the phase', async () => {
  const a = own(await FakeSglangServer.start({ generator: testGenerator(0) }));
  const engine = own(
    new SglangEngine({ urls: [a.url], weightSyncTimeoutMs: 400, healthIntervalMs: 100 }),
  );
  a.injectFault('/update_weights_from_disk', { kind: 'hang' });
  const err = await within(
    engine.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 1) }, 1),
    15_000,
  );
  assert.ok(isEngineError(err), String(err));
  assert.is(err.code, 'TIMEOUT');
  assert.is((err as { phase?: string }).phase, 'reload');
  assert.match(err.message, /weight update to version 1/);
  assert.match(err.message, new RegExp(`reload on ${a.url} timed out after 400 ms`));
  assert.is(engine.getVersion(), 0, 'the version stays');
  // The abandoned reload may still land: the server is out until a probe has reloaded it with
  // known weights, then serves the old version again.
  assert.is(engine.servers()[0]!.state, 'down');
  const r = await engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } });
  assert.is(r.outputVersions.length, 2);
});

test('a server whose reload hangs while another reloads is taken out of routing; the update succeeds', async () => {
  const a = own(await FakeSglangServer.start({ generator: testGenerator(0) }));
  const b = own(await FakeSglangServer.start({ generator: testGenerator(0) }));
  const engine = own(
    new SglangEngine({ urls: [a.url, b.url], weightSyncTimeoutMs: 400, healthIntervalMs: 60_000 }),
  );
  a.injectFault('/update_weights_from_disk', { kind: 'hang' });
  const out = await within(
    engine.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 2) }, 2),
    15_000,
  );
  assert.is(out, undefined, String(out));
  assert.is(engine.getVersion(), 2);
  const states = Object.fromEntries(engine.servers().map((s) => [s.url, s.state]));
  assert.equal(states, { [a.url]: 'down', [b.url]: 'up' });
  const before = a.stats.generateRequests;
  await Promise.all(
    Array.from({ length: 4 }, () =>
      engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } }),
    ),
  );
  assert.is(a.stats.generateRequests, before, 'nothing is routed to the server out of service');
});

test.run();
