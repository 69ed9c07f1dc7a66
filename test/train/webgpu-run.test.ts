/**
 * train_ppo on the webgpu backend, over SwiftShader (the software Vulkan driver of Debian's
 * chromium package, which `.ci/run` installs): a few optimizer steps of a tiny model with the
 * trainer, the critic (GAE) and the reference (KL) all on webgpu, which read every tensor
 * asynchronously. Roles run in one process (`--in-process`), started with SwiftShader's
 * environment, since the Vulkan loader's path must be set when a process starts.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { swiftShaderEnv } from '../../model/backends/webgpu/dawn.ts';
import { readSafetensorsFile } from '../../model/safetensors.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const swiftShader = swiftShaderEnv();
const dir = mkdtempSync(join(tmpdir(), 'rtjob-webgpu-run-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

test('on SwiftShader: train_ppo trains on webgpu (trainer, critic, reference), its weights move', async () => {
  if (!swiftShader) return console.log('  skipped: no SwiftShader (apt-get install chromium)');
  const model = await writeTinyModel(dir);
  const out = join(dir, 'out');
  const args = tinyRunArgs(model, out, {
    'in-process': true,
    'max-steps': 2,
    'rollout-batch-size': 2,
    'train-batch-size': 4,
    'micro-train-batch-size': 2,
    'advantage-estimator': 'gae',
    'init-kl-coef': 0.01,
  });
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'test/fixtures/train/ppo-run.ts', ...args],
    {
      cwd: root,
      env: { ...process.env, ...swiftShader, RTJOB_TF_BACKEND: 'webgpu', RTJOB_QUIET_BACKEND: '1' },
      encoding: 'utf8',
      timeout: 300_000,
    },
  );
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stderr, /roles: trainer webgpu \(SwiftShader.*software\); reference webgpu/);
  assert.match(r.stderr, /critic webgpu/);
  const rows = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { step: number; values: Record<string, number> })
    .filter((x) => x.values.policy_loss !== undefined);
  assert.equal(
    rows.map((x) => x.values.version),
    [1, 2],
  );
  for (const { values: v } of rows) {
    for (const k of ['policy_loss', 'grad_norm', 'value_loss', 'kl'])
      assert.ok(Number.isFinite(v[k]), `${k} = ${v[k]}`);
    assert.ok(v.grad_norm! > 0, `grad_norm ${v.grad_norm}`);
  }
  // The saved policy (written from the webgpu trainer's weights) is not the initial one.
  const before = readSafetensorsFile(join(model, 'model.safetensors')).tensors;
  const after = readSafetensorsFile(join(out, 'model.safetensors')).tensors;
  const moved = Object.keys(before).map((n) => maxAbsDiff(before[n]!.data, after[n]!.data));
  assert.ok(Math.max(...moved) > 1e-4, `largest weight change ${Math.max(...moved)}`);
});

test.run();
