import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { infoMetrics } from '../../algorithms/trajectory.ts';

test('numbers and booleans are averaged over the trajectories that carry them; strings are skipped', () => {
  const m = infoMetrics([
    { info: { used_tool: 1, turns: 2, ok: true, note: 'x' } },
    { info: { used_tool: 0, ok: false } },
    { info: { used_tool: 1 } },
    {},
  ]);
  assert.equal(m, { 'info/used_tool': 2 / 3, 'info/turns': 2, 'info/ok': 0.5 });
});

test('no info, no metrics', () => {
  assert.equal(infoMetrics([{}, { info: {} }]), {});
});

test.run();
