/**
 * What `rtjob stop-job` prints after a training job stops: the last step it finished, its
 * checkpoint and the exact command that resumes it (G20); nothing for a job that logs no steps.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { stopAdvice } from '../../runtime/format.ts';

const entrypoint = ['train_ppo', '--agent-func', './agent.ts', '--save-steps', '3'];

test('a stopped run with a checkpoint: the step, what is lost, and the command', () => {
  assert.equal(
    stopAdvice({
      entrypoint,
      progress: { step: 4 },
      report: { checkpoint: { step: 3, resumeFlags: '--ckpt-path /c --load-checkpoint' } },
    }),
    [
      'last finished step 4; the last checkpoint is at step 3 (step 4 is lost): run the same command with --ckpt-path /c --load-checkpoint to resume from it',
      "resume (with the job's submit options): rtjob submit -- train_ppo --agent-func ./agent.ts --save-steps 3 --ckpt-path /c --load-checkpoint",
    ],
  );
});

test('without a checkpoint the steps done are lost; a job with no steps gets no advice', () => {
  assert.equal(stopAdvice({ entrypoint, progress: { step: 2 }, report: {} }), [
    'last finished step 2; no checkpoint: the 2 steps done are lost',
  ]);
  assert.equal(
    stopAdvice({ entrypoint: ['sleep', '9'], progress: { step: null }, report: {} }),
    [],
  );
});

test.run();
