/**
 * `--zero_stage` (OpenRLHF's DeepSpeed flag, in its snake and kebab forms) reaches the trainer
 * and the critic ranks; stage 3 fails at the parse, naming the flag; other drivers say where it
 * is taken.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseTrainPpoFlags, trainPpoDefaults, trainPpoHelp } from '../../train/ppo/flags.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';
import { foreignFlagNote } from '../../train/foreign-flags.ts';

test('--zero_stage reaches the trainer and the critic', () => {
  assert.is(trainPpoDefaults.zeroStage, 0);
  const o = parseTrainPpoFlags(['--zero_stage', '2', '--actor-num-replicas', '2']);
  assert.is(parseTrainPpoFlags(['--zero-stage=1']).zeroStage, 1);
  const init = roleInits(compileRunConfig(o, 1));
  assert.is(init.trainer.zeroStage, 2);
  assert.is(init.critic.zeroStage, 2);
  assert.match(trainPpoHelp(), /--zero-stage.*DeepSpeed ZeRO stage/);
});

test('--zero_stage 3 fails at the parse, naming the flag', () => {
  let err: (Error & { flag?: string }) | undefined;
  try {
    parseTrainPpoFlags(['--zero_stage', '3']);
  } catch (e) {
    err = e as Error & { flag?: string };
  }
  assert.match(err?.message ?? '', /--zero_stage 3: stage 3 .* is not implemented; use 1 or 2/);
  // The flag as typed (`--zero_stage`), as every parse error quotes it.
  assert.is(err?.flag, '--zero_stage');
});

test('drivers without it point to train_ppo', () => {
  assert.match(foreignFlagNote('zero-stage') ?? '', /^train_ppo takes it/);
});

test.run();
