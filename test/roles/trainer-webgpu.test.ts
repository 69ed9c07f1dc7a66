/**
 * The Trainer role's optimizer steps on the webgpu backend (SwiftShader, `.ci/run` installs it)
 * against the cpu backend, the test oracle: same PPO statistics, weights and logprobs within
 * float32 noise. Both run in one child process, started with SwiftShader's environment.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { swiftShaderEnv } from '../../model/backends/webgpu/dawn.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const swiftShader = swiftShaderEnv();
const dir = mkdtempSync(join(tmpdir(), 'rtjob-trainer-webgpu-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

test("on SwiftShader: two trainer steps on webgpu give the cpu backend's statistics, weights and logprobs", async () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const model = await writeTinyModel(dir);
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'test/fixtures/roles/trainer-parity.ts', model, 'cpu', 'webgpu'],
    {
      cwd: root,
      env: {
        ...process.env,
        ...swiftShader,
        RTJOB_TF_BACKEND: undefined,
        RTJOB_QUIET_BACKEND: '1',
      },
      encoding: 'utf8',
      timeout: 300_000,
    },
  );
  assert.is(r.status, 0, r.stderr);
  type Stats = Record<string, number>;
  const p = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    stats: [Stats[], Stats[]];
    weights: number;
    logprobs: number;
    version: [number, number];
  };
  const msg = JSON.stringify(p);
  assert.equal(p.version, [2, 2]);
  const [cpu, gpu] = p.stats;
  for (let s = 0; s < 2; s++) {
    // float32 on both sides, summed in different orders: 1e-5 relative (measured ~1e-7).
    for (const k of ['policyLoss', 'approxKl', 'entropy', 'gradNorm'])
      assert.ok(
        Math.abs(cpu[s]![k]! - gpu[s]![k]!) <= 1e-5 * Math.abs(cpu[s]![k]!),
        `step ${s + 1} ${k}: ${msg}`,
      );
    for (const k of ['clipFraction', 'tokens', 'optimizerSteps'])
      assert.is(gpu[s]![k], cpu[s]![k], `step ${s + 1} ${k}`);
  }
  // Two AdamW steps at lr 1e-3 move a weight by up to 2e-3; their difference between backends is
  // held to 1e-4 (measured ~7e-7), the logprobs after them to 1e-4 (measured ~1e-6).
  assert.ok(p.weights < 1e-4, msg);
  assert.ok(p.logprobs < 1e-4, msg);
});

test.run();
