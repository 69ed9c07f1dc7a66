/**
 * `RTJOB_TF_BACKEND=webgpu rtjob submit -- train_ppo` as a user runs it: the real CLI, a local
 * cluster it starts, one worker process per role, on SwiftShader (the software Vulkan driver of
 * Debian's chromium package, which `.ci/run` installs). The README's command on the shipped
 * model, cut to 2 steps of 2 prompts x 2 samples: the trainer, the critic (GAE) and the
 * reference (KL) all train or compute on webgpu, reading every tensor asynchronously, and their
 * workers stay alive through the first passes' shader compilation (`compileKernelsAhead`).
 *
 * 268 s on the 2-core machine at load average ~9 (SwiftShader executes every kernel on the CPU).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { swiftShaderEnv } from '../../model/backends/webgpu/dawn.ts';
import { readSafetensorsFile } from '../../model/safetensors.ts';
import { Sandbox } from '../cli/helpers.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const shipped = join(root, 'model', 'pretrained', 'rtjob-tiny-math');
const swiftShader = swiftShaderEnv();
const dir = mkdtempSync(join(tmpdir(), 'rtjob-webgpu-run-'));
const sb = new Sandbox({ RTJOB_TF_BACKEND: 'webgpu' });
test.after(async () => {
  await sb.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** The README's command, small: 2 steps of 2 prompts x 2 samples. */
function trainPpo(jobId: string, savePath: string, extra: string[] = []): string[] {
  return [
    'submit',
    '--job-id',
    jobId,
    '--',
    'train_ppo',
    '--agent-func',
    './examples/agent.ts',
    '--max-steps',
    '2',
    '--rollout-batch-size',
    '2',
    '--n-samples-per-prompt',
    '2',
    '--train-batch-size',
    '4',
    '--micro-train-batch-size',
    '2',
    '--eval-dataset',
    '',
    '--save-path',
    savePath,
    ...extra,
  ];
}

test('webgpu named where Dawn finds no adapter: the job fails at once with one line saying how to get one', async () => {
  // Without SwiftShader's environment there is no Vulkan driver on this machine.
  const r = await sb.run(trainPpo('none', join(dir, 'none')), {
    cwd: root,
    env: { VK_ICD_FILENAMES: '/nonexistent.json' },
    timeoutMs: 120_000,
  });
  assert.is(r.code, 1, r.stderr);
  // The driver's lines stream to stdout, the CLI's own to stderr.
  assert.match(
    r.stdout + r.stderr,
    /^train_ppo: \w+: TF\.js backend 'webgpu': Dawn found no GPU adapter \(.*SwiftShader: VK_ICD_FILENAMES=\S+ LD_LIBRARY_PATH=\S+\)$/m,
  );
  assert.match(r.stderr, /job none FAILED in/);
});

test('on SwiftShader: rtjob submit -- train_ppo trains on webgpu (trainer, critic, reference), logs rewards, its weights move', async () => {
  assert.ok(swiftShader, 'no SwiftShader: install Debian chromium (apt-get install chromium)');
  const out = join(dir, 'out');
  const r = await sb.run(
    trainPpo('wg', out, ['--advantage-estimator', 'gae', '--init-kl-coef', '0.01']),
    { cwd: root, env: swiftShader, timeoutMs: 600_000 },
  );
  assert.is(r.code, 0, `${r.stderr}\n${r.stdout}`);
  assert.match(r.stderr, /job wg SUCCEEDED in/);
  const sw = 'webgpu \\(SwiftShader[^)]*\\), software\\)';
  const roles = /^\[train_ppo\] roles: (.*)$/m.exec(r.stdout)?.[1] ?? r.stdout;
  for (const role of ['trainer', 'critic', 'reference', 'rollout-0 builtin engine on'])
    assert.match(roles, new RegExp(`(^|; )${role} ${sw}(;|$)`), `${role} in: ${roles}`);
  assert.match(r.stdout, /^\[train_ppo\] step 2\/2 {2}reward -?\d\.\d{3} /m);
  assert.match(r.stdout, /^\[train_ppo\] done {2}2 steps in /m);

  const csv = await sb.run(['metrics', 'wg', '--csv'], { cwd: root });
  assert.is(csv.code, 0, csv.stderr);
  const [head, ...rows] = csv.stdout.trim().split('\n');
  const cols = head!.split(',');
  assert.is(rows.length, 2, csv.stdout);
  for (const row of rows) {
    const v = Object.fromEntries(row.split(',').map((x, i) => [cols[i], Number(x)]));
    for (const k of ['reward_mean', 'reward_std', 'policy_loss', 'value_loss', 'kl'])
      assert.ok(Number.isFinite(v[k]), `${k} = ${v[k]} in ${row}`);
  }
  // A step whose samples all scored alike may carry no gradient; the run as a whole does.
  const norms = rows.map((row) => Number(row.split(',')[cols.indexOf('grad_norm')]));
  assert.ok(Math.max(...norms) > 0, `grad_norm ${norms.join(', ')}`);

  // The saved policy (written from the webgpu trainer's weights) is not the shipped one.
  const before = readSafetensorsFile(join(shipped, 'model.safetensors')).tensors;
  const after = readSafetensorsFile(join(out, 'model.safetensors')).tensors;
  const moved = Object.keys(before).map((n) => maxAbsDiff(before[n]!.data, after[n]!.data));
  assert.ok(Math.max(...moved) > 1e-5, `largest weight change ${Math.max(...moved)}`);
});

test.run();
