/**
 * Checkpoint and dataset flags take Hub ids: `train_ppo --pretrain org/name` fetches the snapshot
 * from the stand-in Hub on the driver and trains from it, and a second run with `HF_HUB_OFFLINE=1`
 * and the Hub down trains from the cache; a local path stays as given; a failure names its flag.
 * The README's GSM8K recipe (`--prompt_data org/gsm8k@main --input_key question --label_key
 * answer`, the dataset's parquet files in its `main` config) runs the same way.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { tinyMathModelDir } from '../../model/index.ts';
import { isHubError } from '../../model/hub/index.ts';
import { ppoCheckpointFlags, resolveCheckpointFlags } from '../../train/checkpoint-flags.ts';
import { resolveDatasetSpecs } from '../../train/data/hub-data.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { datasetProblem } from '../../train/ppo/paths.ts';
import { filesOf, startFakeHub, type FakeHub } from '../fakes/hub-server.ts';
import { writeGsm8kDir } from '../fixtures/data/datasets.ts';

const agent = fileURLToPath(new URL('../../examples/agent.ts', import.meta.url));

let hub: FakeHub;
const dir = mkdtempSync(join(tmpdir(), 'rtjob-hub-ppo-'));
test.before(async () => {
  const data = writeGsm8kDir(join(dir, 'gsm8k-src'), { configs: ['main', 'socratic'] });
  hub = await startFakeHub({
    'org/tiny-math': { files: filesOf(tinyMathModelDir) },
    'org/gsm8k': { type: 'dataset', files: filesOf(data) },
  });
});
test.after(async () => {
  await hub.close();
  rmSync(dir, { recursive: true, force: true });
});

const quiet = { log: { tty: false, write: () => {} } };

test('checkpoint flags: a Hub id becomes its pinned snapshot, a local path stays', async () => {
  const env = { HF_HUB_CACHE: join(dir, 'flags'), HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: '/x' };
  const o = await resolveCheckpointFlags(
    { pretrain: 'org/tiny-math@main', rewardPretrain: tinyMathModelDir, loadLora: undefined },
    ppoCheckpointFlags,
    { env, ...quiet },
  );
  const commit = hub.commitOf('org/tiny-math');
  assert.is(o.pretrain, join(dir, 'flags', 'models--org--tiny-math', 'snapshots', commit));
  assert.is(o.rewardPretrain, tinyMathModelDir);
  assert.is(o.loadLora, undefined);
  const e = await resolveCheckpointFlags({ teacherPretrain: 'org/missing' }, ppoCheckpointFlags, {
    env,
    ...quiet,
  }).catch((x: unknown) => x);
  assert.ok(isHubError(e, 'HUB_REPO_NOT_FOUND'));
  assert.match((e as Error).message, /^--teacher-pretrain: no model repo org\/missing on /);
});

const run = (name: string, env: Record<string, string>, extra: string[] = []) =>
  trainPpo(
    [
      ...extra,
      '--in-process',
      '--pretrain',
      'org/tiny-math',
      '--max-steps',
      '1',
      '--rollout-batch-size',
      '2',
      '--n-samples-per-prompt',
      '2',
      '--train-batch-size',
      '4',
      '--micro-train-batch-size',
      '4',
      '--generate-max-len',
      '8',
      '--eval-dataset',
      '',
      '--save-path',
      join(dir, name),
      '--log-samples',
      '0',
    ],
    { ...process.env, ...env },
    { log: { metric: () => {}, samples: () => {}, report: () => {}, line: () => {} } },
  );

/** The README's GSM8K recipe, on the shipped tiny model (its `--pretrain` comes after). */
const recipe = [
  '--prompt_data',
  'org/gsm8k@main',
  '--input_key',
  'question',
  '--label_key',
  'answer',
  '--agent-func',
  agent,
];

test('a Hub dataset id is fetched once into the Hub cache and read as its snapshot@config', async () => {
  const env = { HF_HUB_CACHE: join(dir, 'c1'), HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: '/x' };
  const quiet = { env, cwd: dir };
  const spec = await resolveDatasetSpecs('org/gsm8k@socratic,arith', '--prompt-data', quiet);
  const commit = hub.commitOf('org/gsm8k');
  const snap = join(dir, 'c1', 'datasets--org--gsm8k', 'snapshots', commit);
  assert.is(spec, `${snap}@socratic,arith`);
  assert.ok(existsSync(join(snap, 'socratic', 'train-00000-of-00001.parquet')));
  assert.equal(readdirSync(snap).sort(), ['README.md', 'main', 'socratic']);
  const asked = hub.requests.length;
  assert.is(await resolveDatasetSpecs('org/gsm8k@main', '--prompt-data', quiet), `${snap}@main`);
  assert.is(hub.requests.length, asked, 'a cached dataset makes no request');
  // Offline and not cached: one line naming the flag, before anything starts.
  const offline = { HF_HUB_OFFLINE: '1', HF_HUB_CACHE: join(dir, 'empty') };
  assert.match(
    datasetProblem('org/gsm8k@main', '--prompt-data', dir, 'train', offline) ?? '',
    /^--prompt-data: org\/gsm8k@main is not in the Hub cache \(.*\) and HF_HUB_OFFLINE=1 forbids fetching it: run once online, or hf download --repo-type dataset org\/gsm8k$/,
  );
});

test('train_ppo --pretrain org/name with the GSM8K recipe trains from the Hub, then offline from the cache with the Hub down', async () => {
  const env = { HF_HUB_CACHE: join(dir, 'c2'), HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: '/x' };
  const first = await run('gsm8k-online', env, recipe);
  assert.is(first.steps, 1);
  assert.ok(hub.requests.some((q) => q.url.startsWith('/api/models/org/tiny-math/revision/main')));
  assert.ok(hub.requests.some((q) => q.url.startsWith('/api/datasets/org/gsm8k/revision/main')));
  await hub.close();
  const offline = await run(
    'gsm8k-offline',
    { ...env, HF_HUB_OFFLINE: '1', HF_ENDPOINT: 'http://127.0.0.1:1' },
    recipe,
  );
  assert.is(offline.steps, 1);
});

test.run();
