/**
 * Checkpoints as OpenRLHF users expect them: `--max-ckpt-num` keeps the newest N, `--save-hf-ckpt`
 * writes an HF policy beside each, and a run stopped part way logs which step its checkpoint holds
 * and the exact command that resumes it, with no metrics row for the step it did not finish.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resumeCommand } from '../../runtime/format.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-ckpt-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const quiet = { line: () => {}, metric: () => {} };

/** Words of a command line as a POSIX shell splits it (unquoted words and '…' quotes). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  for (const m of line.matchAll(/(?:[^\s']+|'[^']*')+/g))
    words.push(m[0].replace(/'([^']*)'/g, '$1'));
  return words;
}

test('--max-ckpt-num keeps the newest checkpoints; --save-hf-ckpt writes an HF policy at each save', async () => {
  const ckpt = join(root, 'rotate');
  await trainPpo(
    tinyRunArgs(model, join(root, 'rotate-out'), {
      'in-process': true,
      'max-steps': 4,
      'save-steps': 1,
      'max-ckpt-num': 2,
      'save-hf-ckpt': true,
      'ckpt-path': ckpt,
    }),
    {},
    { log: quiet },
  );
  const dirs = readdirSync(ckpt).filter((d) => d.startsWith('global_step_'));
  assert.equal(dirs.sort(), [
    'global_step_1_hf',
    'global_step_2_hf',
    'global_step_3',
    'global_step_3_hf',
    'global_step_4',
    'global_step_4_hf',
  ]);
  assert.is(readFileSync(join(ckpt, 'latest'), 'utf8').trim(), 'global_step_4');
  for (const step of [1, 4]) {
    for (const f of ['config.json', 'model.safetensors', 'tokenizer.json'])
      assert.ok(existsSync(join(ckpt, `global_step_${step}_hf`, f)), `step ${step} HF ${f}`);
    assert.not.ok(existsSync(join(ckpt, `global_step_${step}_hf`, 'optimizer.safetensors')));
  }
});

test('a stopped run logs its checkpoint and the command that resumes it; that command does', async () => {
  const ckpt = join(root, 'stop');
  const argv = tinyRunArgs(model, join(root, 'stop-out'), {
    'in-process': true,
    'max-steps': 3,
    'save-steps': 1,
    'ckpt-path': ckpt,
  });
  const stop = new AbortController();
  const lines: string[] = [];
  const steps: number[] = [];
  const err = await trainPpo(
    argv,
    {},
    {
      signal: stop.signal,
      log: {
        line: (t) => void lines.push(t),
        metric: (step) => {
          // Step 2 is done training but not checkpointed when the stop (a SIGTERM) lands.
          if (step === 2) {
            stop.abort();
            throw new Error('killed');
          }
          steps.push(step);
        },
      },
    },
  ).catch((e: Error) => e);
  assert.match(String(err), /killed/);
  assert.ok(
    steps.every((s) => s <= 1),
    `no metrics row for the unfinished step: ${steps}`,
  );
  const resume = `train_ppo ${resumeCommand(argv, `--ckpt-path ${ckpt} --load-checkpoint`)}`;
  assert.ok(
    lines.includes(
      // The stop names the last finished step (step 2's row never completed), as the job page does.
      `stopped at step 1; the last checkpoint is at step 1: run the same command with --ckpt-path ${ckpt} --load-checkpoint to resume from it`,
    ),
    lines.join('\n'),
  );
  assert.ok(lines.includes(`resume: ${resume}`), lines.join('\n'));

  const again = shellWords(resume).slice(1);
  assert.ok(again.includes(''), "--eval-dataset '' survives the quoting");
  assert.is(again.filter((a) => a === '--ckpt-path').length, 1, 'the folder named once');
  const s = await trainPpo(again, {}, { log: quiet });
  assert.is(s.steps, 3);
  assert.is(s.trainedPrompts.length, 12, 'steps 2 and 3 ran after the resume');
});

test('train_ppo as a driver process: a SIGTERM after a checkpoint logs it and the resume command, exit 143', async () => {
  const ckpt = join(root, 'sigterm');
  const argv = tinyRunArgs(model, join(root, 'sigterm-out'), {
    'in-process': true,
    'max-steps': 200,
    'save-steps': 1,
    'ckpt-path': ckpt,
  });
  const main = fileURLToPath(new URL('../../train/ppo/main.ts', import.meta.url));
  const child = spawn(
    process.execPath,
    ['--conditions=rtjob-source', '--import', 'tsx', main, ...argv],
    { env: { ...process.env, HOME: root, RTJOB_ADDRESS: '' }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  let err = '';
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  // The stop lands once the first checkpoint is written.
  await new Promise<void>((resolve) => {
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes(`ckpt  step 1 -> `)) resolve();
    });
    void exited.then(() => resolve()); // an early exit fails below instead of hanging
  });
  child.kill('SIGTERM');
  assert.is(await exited, 143, err);
  const stopped = /stopped at step (\d+); the last checkpoint is at step (\d+)/.exec(out);
  assert.ok(stopped, out);
  assert.ok(Number(stopped![2]) >= 1 && Number(stopped![2]) <= Number(stopped![1]), out);
  assert.ok(
    out.includes(
      `[train_ppo] resume: train_ppo ${resumeCommand(argv, `--ckpt-path ${ckpt} --load-checkpoint`)}`,
    ),
    out,
  );
});

test('the resume command drops the flags it replaces and quotes what a shell would split', () => {
  assert.is(
    resumeCommand(
      ['train_ppo', '--ckpt_path=/old', '--load-checkpoint', '--ckpt-path', '/old', '--x', "a b's"],
      '--ckpt-path /new --load-checkpoint',
    ),
    `train_ppo --x 'a b'\\''s' --ckpt-path /new --load-checkpoint`,
  );
});

test.run();
