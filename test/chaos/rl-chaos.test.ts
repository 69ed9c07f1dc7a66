/**
 * The bounded RL subset of the chaos suite that runs in `npm test`: kill -9 of rollout workers and
 * of an engine server at random moments under a real tiny `train_ppo` run, with the trained-prompt
 * ledger checked (no prompt lost, none duplicated, none out of order, no hang). `npm run chaos`
 * runs longer runs, the async loop, and the trainer kill with its resume.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { report, violations } from './harness.ts';
import { engineServerKills, rolloutKills } from './rl.ts';

test('rollout kill -9 under train_ppo', async () => {
  const r = await rolloutKills(6, 2);
  console.log(report([r]));
  assert.ok(r.faults >= 1, `faults: ${r.faults}`);
  assert.is(r.calls, 24);
  assert.equal(violations(r), []);
});

test('engine server kill -9 under train_ppo --engine sglang', async () => {
  const r = await engineServerKills(5, 1);
  console.log(report([r]));
  assert.is(r.faults, 1);
  assert.equal(violations(r), []);
});

test.run();
