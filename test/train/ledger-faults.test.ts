// The episode ledger under the chaos suite's faults, on real clusters: a rollout worker killed
// mid-episode (SIGKILL, as a crash would) in the sync and the async loop. The books still balance,
// the episodes lost with the engine are dropped `engine death`, their groups are trained once on
// the restarted engine, and no episode id is trained twice.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { trainPpo } from '../../train/ppo/main.ts';
import type { LedgerEntry } from '../../train/ppo/ledger.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
delete process.env.RTJOB_ADDRESS;
const root = mkdtempSync(join(tmpdir(), 'rtjob-ledger-faults-'));
process.env.HOME = root;
const agent = fileURLToPath(new URL('../fixtures/agents/crash-once-step.ts', import.meta.url));
let model = '';

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

/** A run whose rollout dies on prompt 5; returns its ledger (last state of each entry) and lines. */
async function runWithCrash(name: string, extra: Record<string, string | number | boolean>) {
  const marker = join(root, `${name}-crashed`);
  const data = join(root, `${name}.jsonl`);
  writeFileSync(
    data,
    Array.from({ length: 12 }, (_, i) =>
      JSON.stringify({
        prompt: `What is ${i}+1?`,
        solution: `#### ${i + 1}`,
        ...(i === 5 ? { crashMarker: marker } : {}),
      }),
    ).join('\n'),
  );
  const entries = new Map<string, LedgerEntry>();
  const lines: string[] = [];
  const log = {
    line: (t: string) => void lines.push(t),
    metric: () => undefined,
    ledger: (es: LedgerEntry[]) => {
      for (const e of es) entries.set(e.id, e);
    },
  };
  const args = tinyRunArgs(model, join(root, name), {
    'rollout-num-engines': 2,
    'prompt-data': data,
    'max-steps': -1,
    'agent-func': agent,
    ...extra,
  });
  await trainPpo(args, {}, { log });
  return { entries: [...entries.values()], lines };
}

function checkBooks(entries: LedgerEntry[], lines: string[]): void {
  const verdict = lines.find((l) => l.startsWith('episodes: ')) ?? '';
  console.log(`  ${verdict}`);
  assert.match(
    verdict,
    /^episodes: sampled (\d+) = trained 24 \+ dropped \d+ \(.*engine death \d+.*\) \+ in flight 0; prompts: each trained exactly 2 times; conservation ok$/,
    lines.join('\n'),
  );
  const trained = entries.filter((e) => e.status === 'trained');
  assert.is(trained.length, 24, 'every episode of the 12 prompts x 2 samples trained');
  assert.is(new Set(trained.map((e) => e.id)).size, 24, 'no episode id trained twice');
  const dead = entries.filter((e) => e.reason === 'engine death');
  assert.ok(dead.length >= 2, 'the episodes lost with the engine');
  assert.ok(dead.every((e) => e.prompt === 5 || e.engine === dead[0]!.engine));
  // The crashed prompt's group ran again, on the restarted engine, and trained there.
  const again = trained.filter((e) => e.prompt === 5);
  assert.is(again.length, 2);
  assert.ok(
    again.every((e) => !e.engine.endsWith('#0')),
    JSON.stringify(again),
  );
  assert.ok(entries.every((e) => e.status === 'trained' || e.status === 'dropped'));
}

test('sync: a rollout killed mid-episode; the ledger balances with engine death', async () => {
  const r = await runWithCrash('sync', {});
  checkBooks(r.entries, r.lines);
});

test('async: a rollout killed mid-episode; the ledger balances with engine death', async () => {
  const r = await runWithCrash('async', { 'async-train': true, 'async-queue-size': 2 });
  checkBooks(r.entries, r.lines);
});

test.run();
