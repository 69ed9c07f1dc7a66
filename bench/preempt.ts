/**
 * `npm run bench -- preempt [-- --runs N]`: N preemptions (default 10) of a real `train_ppo`
 * driver process, each a SIGTERM or SIGUSR1 at a random moment after its first step (while it
 * generates, trains, publishes weights or writes a `--save-steps` checkpoint), each resumed with
 * `RTJOB_AUTO_RESUME=1`. Per preemption: when the notice came, the step saved, how long the save
 * took against `--preempt-save-s`, and whether the resume continued exactly (the prompts in the
 * sampler's order, every step, each prompt trained n_samples times, the ledger balanced). Prints
 * the table and writes bench/results/preempt.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { PromptSampler } from '../train/ppo/data.ts';
import { checkpointState, startDriver, until } from '../test/fixtures/agents/driver-process.ts';
import { tinyRunArgs, writeTinyModel } from '../test/fixtures/agents/tiny-model.ts';

const runsAt = process.argv.indexOf('--runs');
const runs = runsAt > 0 ? Number(process.argv[runsAt + 1]) : 10;
const steps = 40;
const batch = 4;
const nSamples = 2;
const deadlineS = 25;
const root = mkdtempSync(join(tmpdir(), 'rtjob-bench-preempt-'));
const records = Array.from({ length: 16 }, (_, i) => ({
  prompt: `What is ${i}+1?`,
  solution: `#### ${i + 1}`,
}));
const data = join(root, 'data.jsonl');
writeFileSync(data, records.map((r) => JSON.stringify(r)).join('\n'));
const sampler = new PromptSampler(records, { input: 'prompt', label: 'solution' }, 42);
const order = Array.from({ length: steps }, () => sampler.next(batch).map((x) => x.index)).flat();
const agent = fileURLToPath(new URL('../examples/agent.ts', import.meta.url));

interface Row {
  run: number;
  signal: string;
  mode: string;
  atStep: number;
  afterMs: number;
  savedStep: number | null;
  saveS: string | null;
  inTime: boolean;
  resumedExact: boolean;
  ledger: string;
}

async function once(model: string, k: number): Promise<Row> {
  const dir = join(root, `run-${k}`);
  mkdirSync(dir, { recursive: true });
  const signal = k % 3 === 2 ? 'SIGUSR1' : 'SIGTERM';
  const mode = k % 2 === 0 ? 'sync' : 'async';
  const args = tinyRunArgs(model, join(dir, 'out'), {
    'in-process': true,
    'rollout-batch-size': batch,
    'n-samples-per-prompt': nSamples,
    'prompt-data': data,
    'max-steps': steps,
    'agent-func': agent,
    'ckpt-path': join(dir, 'ckpt'),
    'save-steps': 3,
    'preempt-save-s': deadlineS,
    seed: 42,
    ...(mode === 'async' ? { 'async-train': true, 'async-queue-size': 1 } : {}),
  });
  const env = { HOME: root };
  const first = startDriver(args, env);
  // A random moment inside the run: after a random step's line, a random while later (the
  // next step's generation, training, weight sync or a --save-steps save).
  const atStep = 2 + Math.floor(Math.random() * (steps - 10));
  const line = new RegExp(`step ${atStep}/${steps} `);
  await until(first, `step ${atStep}`, () => line.test(first.out()));
  const afterMs = Math.round(Math.random() * 300);
  await new Promise((r) => setTimeout(r, afterMs));
  first.child.kill(signal);
  await first.exited;
  const out = first.out();
  const saved = /stop {2}checkpoint of step (\d+) in .* saved ([\d.]+)s after the notice/.exec(out);
  const second = startDriver(args, { ...env, RTJOB_AUTO_RESUME: '1' });
  const done = await second.exited;
  const out2 = second.out();
  const last = done.code === 0 ? checkpointState(join(dir, 'ckpt')) : undefined;
  const l = last?.ledger;
  const dropped = l ? Object.values(l.dropped).reduce((a, n) => a + (n ?? 0), 0) : 0;
  const exact =
    !!last &&
    last.step === steps &&
    JSON.stringify(last.trainedPrompts) === JSON.stringify(order) &&
    l!.sampled === l!.trained + dropped &&
    l!.trained === steps * batch * nSamples &&
    Object.values(l!.trainedGroups).every((n) => n === nSamples) &&
    /conservation ok/.test(out2);
  if (!exact || !saved) process.stderr.write(`run ${k}:\n${out}\n--- resume:\n${out2}\n`);
  return {
    run: k + 1,
    signal,
    mode,
    atStep,
    afterMs,
    savedStep: saved ? Number(saved[1]) : null,
    saveS: saved ? saved[2]! : null,
    inTime: !!saved && Number(saved[2]) < deadlineS,
    resumedExact: exact,
    ledger: /episodes: .*/.exec(out2)?.[0] ?? '-',
  };
}

const model = await writeTinyModel(root);
const rows: Row[] = [];
for (let k = 0; k < runs; k++) rows.push(await once(model, k));
rmSync(root, { recursive: true, force: true });
console.log('| run | mode | signal | notice | saved step | save (s) | in time | resumed exactly |');
console.log('|---|---|---|---|---|---|---|---|');
for (const r of rows)
  console.log(
    `| ${r.run} | ${r.mode} | ${r.signal} | step ${r.atStep} + ${r.afterMs} ms | ${r.savedStep ?? '-'} | ${r.saveS ?? '-'} | ${r.inTime ? 'yes' : 'NO'} | ${r.resumedExact ? 'yes' : 'NO'} |`,
  );
const inTime = rows.filter((r) => r.inTime).length;
const exact = rows.filter((r) => r.resumedExact).length;
console.log(
  `\n${inTime} of ${rows.length} saved within ${deadlineS}s; ${exact} of ${rows.length} resumed exactly`,
);
mkdirSync(fileURLToPath(new URL('./results/', import.meta.url)), { recursive: true });
writeFileSync(
  fileURLToPath(new URL('./results/preempt.json', import.meta.url)),
  JSON.stringify({ runs: rows, inTime, exact }, null, 2) + '\n',
);
if (inTime < rows.length || exact < rows.length) process.exitCode = 1;
