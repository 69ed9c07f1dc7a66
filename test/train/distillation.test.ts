/**
 * On-policy distillation in train_ppo: `--teacher-pretrain` starts a teacher role placed like the
 * reference, the flags reach the step, and a run logs the student's reverse KL to the teacher,
 * in process and with the teacher (and a reward model) as actors of a cluster.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { distillOptions } from '../../train/ppo/options.ts';
import { placeRoles } from '../../train/ppo/placement.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-opd-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('the flags reach the teacher role and the distillation weights', () => {
  const o = parseTrainPpoFlags([
    '--teacher-pretrain',
    '/models/teacher',
    '--teacher-kl-coef',
    '0.5',
    '--task-reward-coef',
    '0',
  ]);
  assert.equal(roleInits(compileRunConfig(o, 1)).teacher, {
    pretrain: '/models/teacher',
    temperature: 1,
  });
  assert.equal(distillOptions(o), { teacherKlCoef: 0.5, taskRewardCoef: 0 });
  assert.throws(() => parseTrainPpoFlags(['--teacher-kl-coef', '0.5']), /need --teacher-pretrain/);
});

test('colocated, the teacher shares bundle 0 like the reference, within the bundle', () => {
  const flags = {
    colocateAllModels: true,
    rolloutNumEngines: 1,
    rolloutNumGpusPerEngine: 1,
    actorNumNodes: 1,
    actorNumGpusPerNode: 1,
    refNumGpusPerNode: 1,
    criticNumNodes: 1,
    criticNumGpusPerNode: 1,
    initKlCoef: 0.01,
    advantageEstimator: 'group_norm' as const,
    actorNumReplicas: 1,
    criticNumReplicas: 1,
  };
  const without = placeRoles(flags);
  const p = placeRoles({ ...flags, teacherPretrain: '/models/teacher' });
  const onZero = [p.rollout(0), p.role('trainer'), p.role('reference'), p.role('teacher')];
  assert.ok(onZero.every((r) => r.bundleIndex === 0));
  assert.ok(onZero.reduce((a, r) => a + r.numGpus, 0) <= 1);
  assert.ok(p.role('teacher').numGpus < without.role('reference').numGpus, 'one more share');
  assert.is(placeRoles({ ...flags, colocateAllModels: false }).role('teacher').numGpus, 1);
});

test('a run distilled from a teacher equal to the initial student starts at reverse KL 0', async () => {
  const rows: Record<string, number>[] = [];
  const agent = fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url));
  const s = await trainPpo(
    [
      '--in-process',
      '--agent-func',
      agent,
      ...tinyRunArgs(model, join(root, 'out'), {
        'ckpt-path': join(root, 'ckpt'),
        'max-steps': 2,
        'teacher-pretrain': model,
        'task-reward-coef': 0,
        // A learning rate large enough that the student moves away from its teacher.
        'actor-learning-rate': 0.01,
      }),
    ],
    {},
    {
      log: { line: () => {}, metric: (_s: number, v: Record<string, number>) => void rows.push(v) },
    },
  );
  assert.is(s.steps, 2);
  const kl = rows.filter((r) => r.opd_reverse_kl !== undefined).map((r) => r.opd_reverse_kl!);
  assert.is(kl.length, 2, JSON.stringify(rows));
  assert.ok(Math.abs(kl[0]!) < 1e-4, `same weights: ${kl[0]}`);
  assert.ok(Math.abs(kl[1]!) > 1e-4, `the student moved: ${kl[1]}`);
});

test('on a cluster the teacher and a reward model run as their own actors', async () => {
  // Not in process: the roles are actor processes loaded from roles/reference.ts and
  // roles/reward-model.ts. The tiny model has no value head, so as a reward model it loads with a
  // zero head and every score is exactly 0.
  const rows: Record<string, number>[] = [];
  const agent = fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url));
  const s = await trainPpo(
    [
      '--agent-func',
      agent,
      ...tinyRunArgs(model, join(root, 'cluster-out'), {
        'ckpt-path': join(root, 'cluster-ckpt'),
        'max-steps': 1,
        'teacher-pretrain': model,
        'reward-pretrain': model,
      }),
    ],
    {},
    {
      log: { line: () => {}, metric: (_s: number, v: Record<string, number>) => void rows.push(v) },
    },
  );
  assert.is(s.steps, 1);
  const step = rows.find((r) => r.opd_reverse_kl !== undefined);
  assert.ok(step, JSON.stringify(rows));
  assert.ok(
    Math.abs(step.opd_reverse_kl!) < 1e-4,
    `teacher = initial student: ${step.opd_reverse_kl}`,
  );
  assert.equal([step.rm_score_mean, step.reward_mean], [0, 0]);
});

test.run();
