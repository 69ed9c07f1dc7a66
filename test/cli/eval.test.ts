import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { Sandbox } from './helpers.ts';

// `rtjob eval` as a package user runs it: a real `rtjob` process, in a project of their own (no
// rtjob sources beside it), with a TypeScript agent file that plain Node cannot import.
const project = mkdtempSync(join(tmpdir(), 'rtjob-eval-'));
const sb = new Sandbox({ RTJOB_QUIET_BACKEND: '1' });
let model = '';

// Types, an interface and a non-null assertion: only a TypeScript loader runs this. One completion
// per episode (so the model generates), and right on the even-numbered problems.
const agentSource = `
interface Env { baseURL: string; apiKey: string; model: string; signal: AbortSignal }
export async function agent(sample: { index: number; prompt: string }, env: Env) {
  const res = await fetch(env.baseURL + '/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + env.apiKey },
    body: JSON.stringify({ model: env.model, messages: [{ role: 'user', content: sample.prompt }], max_tokens: 4 }),
    signal: env.signal,
  });
  const body = (await res.json()) as { choices: { message: { content: string } }[] };
  const answered: number = body.choices[0]!.message.content.length >= 0 ? 1 : 0;
  return { reward: sample.index % 2 === 0 ? 1 : 0, extraInfo: { answered } };
}
`;

test.before(async () => {
  model = await writeTinyModel(project);
  // A project as the README sets one up (`npm pkg set type=module`).
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'myagent', type: 'module' }));
  writeFileSync(join(project, 'agent.ts'), agentSource);
  // Where train_ppo saves a job's policy by default: ./ckpt/<job id>.
  cpSync(model, join(project, 'ckpt', 'my-job'), { recursive: true });
});
test.after(async () => {
  rmSync(project, { recursive: true, force: true });
  await sb.cleanup();
});

test("rtjob eval scores a saved policy with a TypeScript agent, printed as train_ppo's eval", async () => {
  const r = await sb.run(['eval', 'my-job', '--agent-func', './agent.ts', '--prompts', '6'], {
    cwd: project,
    timeoutMs: 180_000,
  });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^held-out accuracy 50\.0% \(6 prompts, greedy\)$/m);
  assert.match(r.stdout, /mean .*answered 1\.000/);
});

test('rtjob eval --json reports each episode', async () => {
  const r = await sb.run(
    ['eval', model, '--agent-func', join(project, 'agent.ts'), '--prompts', '4', '--json'],
    {
      cwd: project,
      timeoutMs: 180_000,
    },
  );
  assert.is(r.code, 0, r.stderr);
  const report = JSON.parse(r.stdout) as {
    greedy: {
      correct: number;
      total: number;
      failed: number;
      episodes: { index: number; reward: number }[];
    };
  };
  assert.equal(
    { correct: report.greedy.correct, total: report.greedy.total, failed: report.greedy.failed },
    { correct: 2, total: 4, failed: 0 },
  );
  assert.equal(
    report.greedy.episodes.map((e) => [e.index, e.reward]),
    [
      [0, 1],
      [1, 0],
      [2, 1],
      [3, 0],
    ],
  );
});

test('rtjob eval --eval-dataset reads a JSONL of its own fields, as train_ppo does', async () => {
  // The first agent, right when the label it is handed is "yes" and the prompt is the record's `q`.
  writeFileSync(
    join(project, 'label-agent.ts'),
    agentSource.replace(
      'sample.index % 2 === 0',
      "sample.prompt.startsWith('Q: ') && (sample as { label?: string }).label === 'yes'",
    ),
  );
  writeFileSync(
    join(project, 'qa.jsonl'),
    ['yes', 'no', 'yes', 'yes']
      .map((a, i) => JSON.stringify({ q: `Q: item ${i}`, a, other: i }))
      .join('\n'),
  );
  const args = ['eval', 'my-job', '--agent-func', './label-agent.ts', '--eval-dataset', 'qa.jsonl'];
  const r = await sb.run([...args, '--input-key', 'q', '--label-key', 'a'], {
    cwd: project,
    timeoutMs: 180_000,
  });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^held-out accuracy 75\.0% \(4 prompts, greedy\)$/m);
  // The default keys are train_ppo's (prompt, solution): refused before any model loads.
  const wrongKey = await sb.run(args, { cwd: project });
  assert.is(wrongKey.code, 2);
  assert.equal(wrongKey.stderr.trim().split('\n'), [
    "rtjob eval: --input-key 'prompt' is neither a string field nor chat messages of --eval-dataset records (fields: q, a, other)",
  ]);
});

test('a missing checkpoint or agent file: one line naming it, exit 2', async () => {
  const noModel = await sb.run(['eval', 'no-such-job', '--agent-func', './agent.ts'], {
    cwd: project,
  });
  assert.is(noModel.code, 2);
  assert.equal(noModel.stderr.trim().split('\n'), [
    'rtjob eval: no model directory at no-such-job (the policy train_ppo saved, e.g. ./ckpt/JOB; shipped: rtjob-tiny-math, rtjob-tiny-tool)',
  ]);
  const noAgent = await sb.run(['eval', 'my-job', '--agent-func', './agnt.ts'], { cwd: project });
  assert.is(noAgent.code, 2);
  assert.equal(noAgent.stderr.trim().split('\n'), [
    'rtjob eval: --agent-func: no such file ./agnt.ts (did you mean ./agent.ts?)',
  ]);
});

test.run();
