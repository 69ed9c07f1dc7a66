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

for (const dtype of ['f32', 'bf16'] as const) {
  test(`train_ppo --engine llamacpp --rollout-dtype ${dtype} trains, syncs weights each step and logs the mismatch`, async () => {
    const missing = await llamaCppMissing();
    if (missing) assert.unreachable(`node-llama-cpp does not load (${missing})`);
    const model = await writeTinyModel(join(root, dtype));
    const rows: Record<string, number>[] = [];
    const lines: string[] = [];
    const s = await trainPpo(
      [
        '--in-process',
        '--engine',
        'llamacpp',
        '--rollout-dtype',
        dtype,
        ...tinyRunArgs(model, join(root, `out-${dtype}`), {
          'generate-max-len': 8,
          'max-steps': 3,
          'is-correction': 'tis',
          'ckpt-path': join(root, `ckpt-${dtype}`),
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
    console.log(
      `  ${dtype}: logprob_gap ${steps.map((r) => r.logprob_gap!.toExponential(1)).join(' ')}`,
    );
    // Measured: f32 1.3e-7–1.7e-7 (the trainer's own logprobs), bf16 2.4e-4 (rounded weights).
    const bound = dtype === 'f32' ? 1e-5 : 1e-2;
    for (const r of steps) {
      assert.ok(r.logprob_gap! < bound, `logprob_gap ${r.logprob_gap}`);
      assert.ok(Math.abs(r.is_ratio_mean! - 1) < bound, `is_ratio_mean ${r.is_ratio_mean}`);
    }
  });
}

test.run();
