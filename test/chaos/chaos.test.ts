/**
 * The bounded subset of the chaos suite that runs in `npm test`: worker kill -9 and a head
 * restart under sequence-checked load, with no loss, hang, zombie execution or reordering, and
 * no duplicate of an at-most-once call. `npm run chaos` runs the full suite (node agent kills, a
 * link cut in a network namespace, longer runs).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { headRestarts, report, violations, workerKills } from './harness.ts';

test('worker kill -9 under load', async () => {
  const r = await workerKills(12, 1500, 4);
  console.log(report([r]));
  assert.ok(r.faults >= 4, `faults: ${r.faults}`);
  assert.ok(r.calls > 100, `calls: ${r.calls}`);
  assert.equal(violations(r), []);
});

test('head restart under load', async () => {
  const r = await headRestarts(10, 4000);
  console.log(report([r]));
  assert.ok(r.faults >= 1);
  assert.equal(violations(r), []);
  assert.is(r.failed, 0, 'a head restart is invisible to calls');
});

test.run();
