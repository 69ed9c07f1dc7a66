// train_ppo with --engine llamacpp: rollouts generate on llama.cpp from the GGUF of the policy,
// weights reach it after every step (in place), and with an f32 GGUF the trainer's recomputed
// logprobs agree with the engine's (the train–inference mismatch is logged as for any engine).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainPpo } from '../../train/ppo/main.ts';
import { llamaCppMissing } from '../engines/llamacpp-fixture.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-llamacpp-run-'));
test.after(() => rmSync(root, { recursive: true, force: true }));

test('train_ppo --engine llamacpp trains, syncs weights each step and logs a near-zero mismatch', async () => {
  const missing = await llamaCppMissing();
  if (missing) return console.log(`  skipped: node-llama-cpp does not load (${missing})`);
  const model = await writeTinyModel(root);
  const rows: Record<string, number>[] = [];
  const lines: string[] = [];
  const s = await trainPpo(
    [
      '--in-process',
      '--engine',
      'llamacpp',
      ...tinyRunArgs(model, join(root, 'out'), {
        'generate-max-len': 8,
        'max-steps': 3,
        'is-correction': 'tis',
        'ckpt-path': join(root, 'ckpt'),
      }),
    ],
    {},
    {
      log: {
        line: (t) => void lines.push(t),
        metric: (_s, v) => void rows.push(v),
      },
    },
  );
  assert.is(s.steps, 3);
  const steps = rows.filter((r) => r.policy_loss !== undefined);
  assert.ok(steps.length >= 2, JSON.stringify(rows));
  for (const r of steps) {
    assert.ok(r.logprob_gap! < 1e-3, `logprob_gap ${r.logprob_gap}`);
    assert.ok(Math.abs(r.is_ratio_mean! - 1) < 1e-3, `is_ratio_mean ${r.is_ratio_mean}`);
  }
});

test.run();
