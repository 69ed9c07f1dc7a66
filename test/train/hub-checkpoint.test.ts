/**
 * Checkpoint flags take Hub ids: `train_ppo --pretrain org/name` fetches the snapshot from the
 * stand-in Hub on the driver and trains from it, and a second run with `HF_HUB_OFFLINE=1` and
 * the Hub down trains from the cache; a local path stays as given; a failure names its flag.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { tinyMathModelDir } from '../../model/index.ts';
import { isHubError } from '../../model/hub/index.ts';
import { ppoCheckpointFlags, resolveCheckpointFlags } from '../../train/checkpoint-flags.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { filesOf, startFakeHub, type FakeHub } from '../fakes/hub-server.ts';

let hub: FakeHub;
const dir = mkdtempSync(join(tmpdir(), 'rtjob-hub-ppo-'));
test.before(async () => {
  hub = await startFakeHub({ 'org/tiny-math': { files: filesOf(tinyMathModelDir) } });
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

const run = (name: string, env: Record<string, string>) =>
  trainPpo(
    [
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

test('train_ppo --pretrain org/name trains from the Hub, then offline from the cache', async () => {
  const cache = join(dir, 'ppo');
  const env = { HF_HUB_CACHE: cache, HF_ENDPOINT: hub.endpoint, HF_TOKEN_PATH: '/x' };
  const first = await run('online', env);
  assert.is(first.steps, 1);
  assert.ok(hub.requests.some((q) => q.url.startsWith('/api/models/org/tiny-math/revision/main')));
  await hub.close();
  const offline = await run('offline', {
    ...env,
    HF_HUB_OFFLINE: '1',
    HF_ENDPOINT: 'http://127.0.0.1:1',
  });
  assert.is(offline.steps, 1);
});

test.run();
