import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Rollout } from '../../roles/rollout.ts';
import { Reference } from '../../roles/reference.ts';
import { Trainer } from '../../roles/trainer.ts';
import { makeExperience } from '../../algorithms/experience.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

// Sync train_ppo takes the engine's behaviour logprobs as PPO's old logprobs instead of
// recomputing them; that is sound only if they match the trainer's own forward pass. The
// reference of the same checkpoint, before any update, answers the trainer's rows exactly.
process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-lp-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

for (const temperature of [1, 0.7]) {
  test(`engine behaviour logprobs match the trainer's recompute within 1e-4 (temperature ${temperature}, multi-turn)`, async () => {
    const rollout = new Rollout({
      pretrain: model,
      agentFunc: fileURLToPath(new URL('../fixtures/agents/multi-turn-step.ts', import.meta.url)),
      temperature,
      generateMaxLen: 8,
      promptMaxLen: 32,
      nSamplesPerPrompt: 4,
      seed: 5,
    });
    const trainer = new Trainer({
      pretrain: model,
      learningRate: 1e-3,
      trainBatchSize: 4,
      microTrainBatchSize: 4,
      temperature,
    });
    const reference = new Reference({ pretrain: model, temperature });
    try {
      await Promise.all([rollout.ready(), trainer.ready(), reference.ready()]);
      const items = [0, 1, 2].map((i) => ({
        index: i,
        prompt: `What is ${i}+2?`,
        label: 'zzz',
        groupId: `g${i}`,
      }));
      const groups = await rollout.runGroups(items);
      const samples = makeExperience(
        groups.flatMap((g) => g.trajectories),
        { maxNewTokens: 8 },
      );
      const recomputed = await trainer.logprobs(samples.map((s) => Array.from(s.inputIds)));
      let checked = 0;
      let worst = 0;
      samples.forEach((s, k) => {
        for (let i = 0; i < s.actionMask.length; i++) {
          if (!s.actionMask[i]) continue;
          worst = Math.max(worst, Math.abs(s.behaviourLogprobs[i]! - recomputed[k]![i]!));
          checked++;
        }
      });
      assert.ok(checked > 50, `compared ${checked} tokens`);
      assert.ok(worst < 1e-4, `max |engine − trainer| = ${worst}`);
      const seqs = samples.map((s) => Array.from(s.inputIds));
      assert.equal(await reference.logprobs(seqs), recomputed, 'rows of L−1, as the trainer');
      assert.is(recomputed[0]!.length, seqs[0]!.length - 1);
    } finally {
      await rollout.close();
      trainer.dispose();
      reference.dispose();
    }
  });
}

test.run();
