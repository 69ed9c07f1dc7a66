/**
 * The rollout-correction flags reach the trainer, and a run with a sequence preset logs the
 * mismatch diagnostics (`is_ratio_p*`, `is_*_outside`, `is_rejected_*`) beside the loss.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-rollout-corr-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('--is-correction presets and --is-seq-threshold map onto the trainer loss', () => {
  const loss = (argv: string[]) =>
    roleInits(compileRunConfig(parseTrainPpoFlags(argv), 10)).trainer.loss;
  const l = loss(['--is-correction', 'seq-mis', '--is-seq-threshold', '0.8', '1.25']);
  assert.equal([l.isCorrection, l.isSeqThreshold], ['seq-mis', [0.8, 1.25]]);
  assert.equal(
    loss(['--is-correction', 'geo-rs']).isSeqThreshold,
    [0.999, 1.001],
    'unset: the preset default, resolved once in the driver',
  );
  assert.throws(
    () => parseTrainPpoFlags(['--is-correction', 'geo-rs', '--is-seq-threshold', '2', '1']),
    /--is-seq-threshold: needs 0 < low <= high/,
  );
  assert.throws(() => parseTrainPpoFlags(['--is-correction', 'seq-is']), /--is-correction/);
});

test('a run with --is-correction seq-mis logs the diagnostics of its correction', async () => {
  const rows: Record<string, number>[] = [];
  const agent = fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url));
  const s = await trainPpo(
    [
      '--in-process',
      '--pretrain',
      model,
      '--agent-func',
      agent,
      '--rollout-batch-size',
      '4',
      '--n-samples-per-prompt',
      '2',
      '--train-batch-size',
      '8',
      '--micro-train-batch-size',
      '4',
      '--generate-max-len',
      '8',
      '--max-steps',
      '2',
      '--eval-dataset',
      '',
      '--overwrite',
      '--save-path',
      join(root, 'out'),
      '--ckpt-path',
      join(root, 'ckpt'),
      '--is-correction',
      'seq-mis',
    ],
    {},
    {
      log: { line: () => {}, metric: (_s: number, v: Record<string, number>) => void rows.push(v) },
    },
  );
  assert.is(s.steps, 2);
  const steps = rows.filter((r) => r.policy_loss !== undefined);
  assert.ok(steps.length >= 1);
  for (const r of steps) {
    const q = [r.is_ratio_min, r.is_ratio_p05, r.is_ratio_p50, r.is_ratio_p95, r.is_ratio_max];
    assert.ok(
      q.every((v, i) => v !== undefined && (i === 0 || v >= q[i - 1]!)),
      `quantiles ordered: ${JSON.stringify(r)}`,
    );
    assert.ok(r.is_seq_outside! >= 0 && r.is_seq_outside! <= 1, JSON.stringify(r));
    assert.ok(r.is_rejected_seqs! >= 0 && r.is_rejected_tokens! >= r.is_rejected_seqs!);
    assert.ok(Number.isFinite(r.policy_loss!));
  }
});

test.run();
