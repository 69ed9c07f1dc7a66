// A weight sync to an HTTP engine never hangs the run and survives what it can: a reload the
// server dropped is sent again; a reload that never answers fails the run, by the deadline, with
// a typed error naming the rollout, its engine and the phase.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainPpo } from '../../train/ppo/main.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { DeterministicGenerator } from '../fakes/token-generator.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { withDeadline } from '../../train/ppo/health.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-weight-sync-'));
let model = '';
let data = '';
let server: FakeSglangServer;

test.before(async () => {
  model = await writeTinyModel(root);
  data = join(root, 'data.jsonl');
  writeFileSync(
    data,
    Array.from({ length: 8 }, (_, i) =>
      JSON.stringify({ prompt: `What is ${i}+1?`, solution: `#### ${i + 1}` }),
    ).join('\n'),
  );
});
test.before.each(async () => {
  server = await FakeSglangServer.start({
    generator: new DeterministicGenerator({ vocabSize: 64 }),
    modelPath: model,
  });
});
test.after.each(() => server.close());
test.after(() => rmSync(root, { recursive: true, force: true }));

const flags = (extra: string[]): string[] => [
  '--in-process',
  '--engine',
  'sglang',
  '--engine-url',
  server.url,
  '--engine-weights-path',
  join(root, 'weights'),
  ...tinyRunArgs(model, join(root, 'out'), {
    'prompt-data': data,
    'rollout-batch-size': 2,
    'train-batch-size': 4,
    'micro-train-batch-size': 4,
    'max-steps': 2,
  }),
  ...extra,
];

/** `p`'s outcome, or a failure once `ms` pass: a hang must fail the test, not stall the suite. */
const within = <T>(p: Promise<T>, ms: number): Promise<T | Error> =>
  withDeadline(p, ms, () => new Error(`still waiting after ${ms} ms`)).catch(
    (e: unknown) => e as Error,
  );

test('a reload the only server dropped is sent again; the run goes on', async () => {
  server.injectFault('/update_weights_from_disk', { kind: 'reset' });
  const lines: string[] = [];
  const s = await trainPpo(
    flags([]),
    {},
    {
      log: { line: (t) => void lines.push(t), metric: () => undefined },
    },
  );
  assert.is(s.steps, 2);
  assert.ok(
    lines.some((l) =>
      /rollout 0: weight update to version 1 failed on every server.*sending version 1 again/.test(
        l,
      ),
    ),
    lines.join('\n'),
  );
  assert.is(server.weightVersion, '2');
});

test('a reload that never answers fails the run by the deadline, naming the rollout, engine and phase', async () => {
  server.injectFault('/update_weights_from_disk', { kind: 'hang' }, 10);
  const err = await within(
    trainPpo(
      flags(['--weight-sync-timeout-ms', '500']),
      {},
      {
        log: { line: () => undefined, metric: () => undefined },
      },
    ),
    60_000,
  );
  assert.instance(err, Error);
  assert.is((err as { code?: string }).code, 'TRAIN_PPO_WEIGHT_SYNC', String(err));
  assert.match(
    (err as Error).message,
    new RegExp(
      `weight sync of version 1 to rollout 0 \\(sglang ${server.url}\\) failed in phase 'reload': .*reload on ${server.url} timed out after 500 ms`,
    ),
  );
});

test.run();
