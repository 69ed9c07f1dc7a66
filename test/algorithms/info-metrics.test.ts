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

test("the gateway's bookkeeping is logged apart from the agent's own extraInfo", () => {
  const m = infoMetrics([
    { info: { tool_calls: 1, gateway_completions: 2, gateway_trajectory_breaks: 0 } },
    { info: { tool_calls: 0, gateway_completions: 4, gateway_trajectory_breaks: 1 } },
  ]);
  assert.equal(m, {
    'info/tool_calls': 0.5,
    'gateway/completions': 3,
    'gateway/trajectory_breaks': 0.5,
  });
});

test('no info, no metrics', () => {
  assert.equal(infoMetrics([{}, { info: {} }]), {});
});

test.run();
