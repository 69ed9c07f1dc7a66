/**
 * `rtjob logs JOB --actor NAME` finds the actor by the name the dashboard shows (the job's prefix
 * off), its full name or its id, as Ray's state API filters by name (G19).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { pickActor } from '../../cli/commands/jobs.ts';

const actors = [
  { actorId: 'actor_a1', name: 'run7/trainer', startedAt: 1 },
  { actorId: 'actor_b1', name: 'run7/rollout-0', startedAt: 2 },
  { actorId: 'actor_b2', name: 'run7/rollout-0', startedAt: 5 },
  { actorId: 'actor_c1', name: null, startedAt: 3 },
];

test('by the shown name, the full name or the id; the newest of one name', () => {
  assert.is(pickActor(actors, 'run7', 'trainer'), 'actor_a1');
  assert.is(pickActor(actors, 'run7', 'run7/trainer'), 'actor_a1');
  assert.is(pickActor(actors, 'run7', 'actor_c1'), 'actor_c1');
  assert.is(pickActor(actors, 'run7', 'rollout-0'), 'actor_b2', 'the restarted one');
});

test('an unknown name fails listing the actors there are', () => {
  assert.throws(
    () => pickActor(actors, 'run7', 'critic'),
    (e: Error) =>
      /job run7 has no actor 'critic'; its actors: actor_c1, rollout-0, trainer/.test(e.message),
  );
  assert.throws(
    () => pickActor([], 'sleep1', 'x'),
    (e: Error) => /job sleep1 has no actors/.test(e.message),
  );
});

test.run();
