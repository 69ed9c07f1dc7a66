// `rtjob ledger JOB` reads a finished train_ppo job's episode ledger from its session database:
// the verdict the run printed, counts by status and reason, and with --json every episode (id,
// status, step, reason) for a user's own audit, which this test does.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { Sandbox } from './helpers.ts';

const flaky = fileURLToPath(new URL('../fixtures/agents/flaky-step.ts', import.meta.url));
const sb = new Sandbox();
test.after(() => sb.cleanup());

interface Entry {
  id: string;
  status: string;
  step?: number;
  reason?: string;
  key: string;
}

test('a run with agent errors: the ledger balances, every episode trained or dropped with its reason', async () => {
  const model = await writeTinyModel(sb.home);
  const args = tinyRunArgs(model, join(sb.home, 'out'), {
    'in-process': true,
    'max-steps': 3,
    'agent-func': flaky,
    'agent-error-budget': 0.9,
  });
  const r = await sb.run(['submit', '--job-id', 'led1', '--', 'train_ppo', ...args], {
    timeoutMs: 300_000,
  });
  assert.is(r.code, 0, r.stderr);
  const line =
    /episodes: sampled 24 = trained (\d+) \+ dropped (\d+) \(agent error \d+\) \+ in flight 0; prompts: each trained exactly 2 times; conservation ok/;
  assert.match(r.stdout + r.stderr, line);
  const text = await sb.run(['ledger', 'led1']);
  assert.is(text.code, 0, text.stderr);
  assert.match(text.stdout, /^job led1: episodes: sampled 24 = /m);
  assert.match(text.stdout, /dropped: agent error/);
  const json = JSON.parse((await sb.run(['ledger', 'led1', '--json'])).stdout) as {
    ok: boolean;
    verdict: string;
    episodes: Entry[];
  };
  assert.ok(json.ok, json.verdict);
  const eps = json.episodes;
  assert.is(eps.length, 24);
  assert.is(new Set(eps.map((e) => e.id)).size, 24, 'ids are unique');
  assert.ok(eps.every((e) => e.status === 'trained' || e.status === 'dropped'));
  const trained = eps.filter((e) => e.status === 'trained');
  assert.ok(trained.length > 0 && trained.every((e) => e.step! >= 1 && e.step! <= 3));
  assert.ok(eps.filter((e) => e.status === 'dropped').every((e) => e.reason === 'agent error'));
  // Each prompt that trained did so with all of its samples, once.
  const perGroup = new Map<string, number>();
  for (const e of trained) perGroup.set(e.key, (perGroup.get(e.key) ?? 0) + 1);
  assert.ok(
    [...perGroup.values()].every((n) => n === 2),
    JSON.stringify([...perGroup]),
  );
});

test.run();
