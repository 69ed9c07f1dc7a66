// The episode ledger's books, by hand: every episode sampled ends trained or dropped with a
// reason, a group run again after its engine died counts once, a checkpoint's counts carry into
// the resumed run, and an episode trained twice or a prompt trained short fails the verdict.
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { EpisodeLedger } from '../../train/ppo/ledger.ts';

test('a step of four groups: two trained, one filtered, one agent error; the books balance', () => {
  const l = new EpisodeLedger(2);
  const a = ['e0-p1', 'e0-p2', 'e0-p3', 'e0-p4'].map((k, i) => l.dispatch(k, i, 'rollout-0#0'));
  assert.is(l.counts().inFlight, 8);
  l.returned(a[0]!, { status: 'ok', versionMin: 0, versionMax: 0 });
  l.returned(a[1]!, { status: 'ok' });
  l.returned(a[2]!, { status: 'ok' });
  l.returned(a[3]!, { status: 'failed' });
  l.settle(['e0-p1', 'e0-p2', 'e0-p3', 'e0-p4'], new Set(['e0-p1', 'e0-p2']), 1);
  const c = l.counts();
  assert.equal(
    { sampled: c.sampled, trained: c.trained, dropped: c.dropped, inFlight: c.inFlight },
    { sampled: 8, trained: 4, dropped: { filtered: 2, 'agent error': 2 }, inFlight: 0 },
  );
  const v = l.verdict();
  assert.ok(v.ok, v.line);
  assert.is(
    v.line,
    'episodes: sampled 8 = trained 4 + dropped 4 (filtered 2, agent error 2) + in flight 0; prompts: each trained exactly 2 times; conservation ok',
  );
  const changed = l.takeChanged();
  assert.is(changed.length, 8);
  const first = changed.find((e) => e.id === `${a[0]}.0`)!;
  assert.equal(
    { status: first.status, step: first.step, versionMin: first.versionMin, prompt: first.prompt },
    { status: 'trained', step: 1, versionMin: 0, prompt: 0 },
  );
  assert.is(l.takeChanged().length, 0, 'only what changed since');
});

test('an engine that dies under a group: its attempt is dropped, the rerun is trained', () => {
  const l = new EpisodeLedger(2);
  const first = l.dispatch('e0-p7', 7, 'rollout-1#0');
  l.lost(first, 'engine death');
  const again = l.dispatch('e0-p7', 7, 'rollout-1#1');
  l.returned(again, { status: 'ok' });
  // A batch lost after the rollout answered: the group runs a third time.
  const third = l.dispatch('e0-p7', 7, 'rollout-1#2');
  l.returned(third, { status: 'ok' });
  l.settle(['e0-p7'], new Set(['e0-p7']), 3);
  const v = l.verdict();
  assert.ok(v.ok, v.line);
  assert.match(v.line, /sampled 6 = trained 2 \+ dropped 4 \(engine death 4\)/);
});

test('a stop drops what is in flight; the checkpoint carries it, the resume goes on from it', () => {
  const l = new EpisodeLedger(2);
  l.returned(l.dispatch('e0-p1', 1, 'rollout-0#0'), { status: 'ok' });
  l.settle(['e0-p1'], new Set(['e0-p1']), 1);
  l.dispatch('e0-p2', 2, 'rollout-0#0');
  const saved = l.snapshot();
  assert.equal(saved.dropped, { stopped: 2 }, 'in flight at the checkpoint counts as stopped');
  l.stopAll();
  assert.ok(l.verdict().ok, l.verdict().line);
  const resumed = new EpisodeLedger(2, saved);
  const again = resumed.dispatch('e0-p2', 2, 'rollout-0#0');
  assert.match(again, /\.r2a1$/, 'the second run has ids of its own');
  resumed.returned(again, { status: 'ok' });
  resumed.settle(['e0-p2'], new Set(['e0-p2']), 2);
  const v = resumed.verdict();
  assert.ok(v.ok, v.line);
  assert.match(v.line, /sampled 6 = trained 4 \+ dropped 2 \(stopped 2\) \+ in flight 0/);
});

test('an episode trained twice or a prompt trained short fails the verdict', () => {
  const l = new EpisodeLedger(2);
  const a = l.dispatch('e0-p1', 1, 'rollout-0#0');
  l.returned(a, { status: 'ok' });
  l.settle(['e0-p1'], new Set(['e0-p1']), 1);
  // The same group again in another step, as a bug that re-trains a batch would book it.
  const b = l.dispatch('e0-p1', 1, 'rollout-0#0');
  l.returned(b, { status: 'ok' });
  l.settle(['e0-p1'], new Set(['e0-p1']), 2);
  const v = l.verdict();
  assert.not.ok(v.ok);
  assert.match(v.line, /1 trained other than 2 times \(e0-p1: 4\)/);
  const inFlight = new EpisodeLedger(1);
  inFlight.dispatch('e0-p9', 9, 'rollout-0#0');
  assert.match(inFlight.verdict().line, /in flight 1; .*conservation FAILED: 1 in flight/);
});

test.run();
