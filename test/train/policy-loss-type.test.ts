/**
 * `--policy-loss-type` reaches the trainer: the flag (with verl's `vanilla` spelling and the SAPO
 * temperatures) maps onto the trainer's loss options, gspo and sapo average per sequence unless
 * `--loss-agg-mode` is given, and a short run of each loss trains with finite statistics.
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
const root = mkdtempSync(join(tmpdir(), 'rtjob-loss-type-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('the flag maps onto the trainer loss; gspo/sapo default to seq-mean-token-mean', () => {
  const loss = (argv: string[]) =>
    roleInits(compileRunConfig(parseTrainPpoFlags(argv), 10)).trainer.loss;
  assert.is(loss([]).policyLossType, 'ppo');
  assert.is(loss([]).lossAggMode, 'token-mean');
  assert.is(loss(['--policy-loss-type', 'vanilla']).policyLossType, 'ppo');
  assert.is(loss(['--policy_loss_type', 'gspo']).lossAggMode, 'seq-mean-token-mean');
  assert.is(loss(['--policy-loss-type', 'cispo']).lossAggMode, 'token-mean');
  const sapo = loss(['--policy-loss-type', 'sapo', '--sapo-tau-pos', '0.5', '--sapo-tau-neg', '2']);
  assert.equal(
    [sapo.policyLossType, sapo.sapoTauPos, sapo.sapoTauNeg, sapo.lossAggMode],
    ['sapo', 0.5, 2, 'seq-mean-token-mean'],
  );
  const given = loss(['--policy-loss-type', 'gspo', '--loss-agg-mode', 'token-mean']);
  assert.is(given.lossAggMode, 'token-mean', 'a given mode is kept');
  assert.throws(
    () => parseTrainPpoFlags(['--policy-loss-type', 'cispo', '--dual-clip', '3']),
    /--dual-clip: applies to --policy-loss-type ppo and gspo/,
  );
  assert.throws(() => parseTrainPpoFlags(['--policy-loss-type', 'grpo']), /--policy-loss-type/);
});

const agent = fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url));
for (const type of ['gspo', 'cispo', 'sapo']) {
  test(`a short run with --policy-loss-type ${type} trains`, async () => {
    const rows: Record<string, number>[] = [];
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
        join(root, type, 'out'),
        '--ckpt-path',
        join(root, type, 'ckpt'),
        '--policy-loss-type',
        type,
      ],
      {},
      {
        log: {
          line: () => {},
          metric: (_s: number, v: Record<string, number>) => void rows.push(v),
        },
      },
    );
    assert.is(s.steps, 2);
    const steps = rows.filter((r) => r.policy_loss !== undefined);
    assert.ok(steps.length >= 1);
    for (const r of steps) {
      assert.ok(Number.isFinite(r.policy_loss!), JSON.stringify(r));
      assert.ok(r.clip_fraction! >= 0 && r.clip_fraction! <= 1, JSON.stringify(r));
      assert.ok(r.grad_norm! > 0, `the ${type} loss has a gradient: ${JSON.stringify(r)}`);
    }
  });
}

test.run();
