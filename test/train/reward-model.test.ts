/**
 * `train_rm` on the tiny model: the built-in preference pairs differ only in the result, the
 * Bradley–Terry loss falls, held-out pairwise accuracy rises above chance, and the saved directory
 * loads back with its value head, scoring as it did when trained; `train_ppo --reward-pretrain`
 * uses its scores as the rewards.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../../model/checkpoint.ts';
import { RewardModel } from '../../roles/reward-model.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { arithPreferencePairs, encodeAnswer, trainRm } from '../../train/rm.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { fileURLToPath } from 'node:url';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-rm-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('built-in pairs: the same worked answer with a wrong result', () => {
  const pairs = arithPreferencePairs('arith', 50, 1);
  assert.ok(pairs.length >= 45, `most records make a pair (${pairs.length})`);
  for (const p of pairs) {
    assert.is.not(p.chosen, p.rejected);
    assert.is(p.chosen.length - p.rejected.length <= 2, true, `${p.chosen} / ${p.rejected}`);
  }
});

test('training on a file lowers the loss, beats chance on its held-out pairs, and reloads', async () => {
  // A preference the tiny random model can learn: a worked answer over a refusal.
  const path = join(root, 'prefs.jsonl');
  writeFileSync(
    path,
    arithPreferencePairs('arith', 200, 7)
      .map((p) =>
        JSON.stringify({ prompt: p.prompt, chosen: p.chosen, rejected: 'I do not know.' }),
      )
      .join('\n'),
  );
  const out = join(root, 'rm');
  const r = await trainRm({
    pretrain: model,
    savePath: out,
    dataset: path,
    evalSize: 40,
    maxSteps: 20,
    lr: 3e-3,
    verbose: false,
  });
  assert.ok(r.finalLoss < 0.5, `loss well below ln 2 (chance): ${r.finalLoss}`);
  // What the starting LM's likelihood prefers, reported beside the head's accuracy.
  assert.ok(r.lmAccuracy >= 0 && r.lmAccuracy <= 1, `LM preference ${r.lmAccuracy}`);
  assert.ok(
    r.evalAccuracy > 0.9,
    `held-out accuracy ${r.evalAccuracy} (before ${r.evalAccuracyBefore})`,
  );
  const { tokenizer } = await loadModel(out);
  const rm = new RewardModel({ pretrain: out });
  await rm.ready();
  const p = arithPreferencePairs('arith:test', 5, 43)[0]!;
  const s = await rm.scores([
    encodeAnswer(tokenizer!, p.prompt, p.chosen),
    encodeAnswer(tokenizer!, p.prompt, 'I do not know.'),
  ]);
  assert.ok(s[0]! > s[1]!, `the saved head scores as trained: ${s[0]} > ${s[1]}`);
  rm.dispose();
});

test('a JSONL preference file with a bad record fails naming it and its fields', async () => {
  const path = join(root, 'bad.jsonl');
  writeFileSync(path, '{"prompt":"a","chosen":"b","rejected":"c"}\n{"prompt":"a"}\n');
  try {
    await trainRm({ pretrain: model, savePath: join(root, 'x'), dataset: path, verbose: false });
    assert.unreachable('should fail');
  } catch (e) {
    assert.match(
      (e as Error).message,
      /record 2 needs string prompt, chosen and rejected \(fields: prompt\)$/,
    );
  }
});

test('train_ppo --reward-pretrain: the reward model score replaces the agent reward', async () => {
  assert.equal(
    roleInits(compileRunConfig(parseTrainPpoFlags(['--reward-pretrain', '/rm']), 1)).rewardModel,
    {
      pretrain: '/rm',
    },
  );
  // The reward model trained above scores every episode; those scores are the rewards.
  const rows: Record<string, number>[] = [];
  const agent = fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url));
  await trainPpo(
    [
      '--in-process',
      '--agent-func',
      agent,
      ...tinyRunArgs(model, join(root, 'ppo-rm'), {
        'ckpt-path': join(root, 'ppo-rm-ckpt'),
        'max-steps': 1,
        'reward-pretrain': join(root, 'rm'),
      }),
    ],
    {},
    {
      log: { line: () => {}, metric: (_s: number, v: Record<string, number>) => void rows.push(v) },
    },
  );
  const step = rows.find((r) => r.rm_score_mean !== undefined);
  assert.ok(step, JSON.stringify(rows));
  assert.ok(step.rm_score_mean !== 0, 'a trained head scores');
  assert.ok(Math.abs(step.reward_mean! - step.rm_score_mean!) < 1e-6, JSON.stringify(step));
});

test.run();
