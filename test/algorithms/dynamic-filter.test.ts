import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { dynamicFilter } from '../../algorithms/dynamic-filter.ts';
import { throwsCode } from './helpers.ts';

const item = (groupId: string, reward: number) => ({ groupId, reward });

test('groups with mean strictly inside the range are kept; pass rate reported', () => {
  const items = [
    item('all-right', 1),
    item('all-right', 1),
    item('mixed', 1),
    item('mixed', 0),
    item('all-wrong', 0),
    item('all-wrong', 0),
  ];
  const r = dynamicFilter(items);
  assert.equal(r.kept, [item('mixed', 1), item('mixed', 0)]);
  assert.equal(r.rejectedGroups, ['all-right', 'all-wrong']);
  assert.is(r.passRate, 1 / 3);
  assert.is(r.groups, 3);
});

test('custom range, rounding at the edges, and empty input', () => {
  const third = [item('g', 0.1), item('g', 0.1), item('g', 0.1)];
  assert.is(dynamicFilter(third, { rewardRange: [0.3, 1] }).passRate, 0);
  assert.is(dynamicFilter([item('g', 0.3 + 1e-7)], { rewardRange: [0.3, 1] }).passRate, 0);
  assert.is(dynamicFilter([item('g', 0.5)], { rewardRange: [0.3, 1] }).passRate, 1);
  assert.equal(dynamicFilter([]), { kept: [], rejectedGroups: [], passRate: 1, groups: 0 });
});

test('bad range and non-finite rewards are rejected', () => {
  throwsCode(
    () => dynamicFilter([item('g', 0)], { rewardRange: [1, 0] }),
    'INVALID_OPTION',
    '--dynamic-filtering-reward-range',
  );
  throwsCode(() => dynamicFilter([item('g', NaN)]), 'NON_FINITE_INPUT', 'rewards[0]');
});

test.run();
