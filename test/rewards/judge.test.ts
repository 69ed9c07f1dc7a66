/**
 * LLM judges (`rewards/judge.ts`): grades read from replies written many ways and refused when
 * absent or out of range; the judge's requests bounded, retried and timed out by the `openai`
 * client; against a real `rtjob serve` process (a tiny random model, which cannot write a grade),
 * the request goes through and the missing grade fails clearly with `JUDGE`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Judge, judge, parseGrade } from '../../rewards/index.ts';
import { startFakeJudge } from '../fakes/judge-server.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-judge-'));
test.after(() => rmSync(root, { recursive: true, force: true }));

const input = { prompt: 'What is 2+3?', response: 'The answer is 5', reference: '#### 5' };

async function judgeFails(p: Promise<unknown>, re: RegExp): Promise<void> {
  try {
    await p;
    assert.unreachable('the judge graded');
  } catch (e) {
    assert.is((e as { code?: string }).code, 'JUDGE', String(e));
    assert.match((e as Error).message, re, (e as Error).message);
  }
}

test('grades are read from the usual ways of writing them, the last mark winning', () => {
  const cases: [string, number | undefined][] = [
    ['Correct and clear.\nScore: 9', 9],
    ['**Score:** 7', 7],
    ['score = 4', 4],
    ['Rating: 6/10', 6],
    ['I first thought Score: 3 but on reflection Score: 8', 8],
    ['It deserves 7/10.', 7],
    ['\\boxed{10}', 10],
    ['{"reason": "ok", "score": 2}', 2],
    ['5', 5],
    ['<think>Score: 1 maybe</think>Final. Score: 6', 6],
    ['Score: 11', undefined], // out of range
    ['Score: -1', undefined],
    ['The response is fine.', undefined],
    ['', undefined],
  ];
  for (const [reply, want] of cases) assert.is(parseGrade(reply, 10), want, reply);
  assert.is(parseGrade('4/5', 5), 4);
  assert.is(parseGrade('Score: 4.5', 5), 4.5);
});

test('the judge is sent the rubric, question, reference and response; reward = grade / scale', async () => {
  const fake = await startFakeJudge(() => 'Right answer. Score: 8');
  try {
    const j = new Judge({
      baseURL: fake.baseURL,
      apiKey: fake.apiKey,
      model: 'judge',
      rubric: 'RUBRIC-X',
    });
    const v = await j.grade(input);
    assert.equal(v, { reward: 0.8, grade: 8, reply: 'Right answer. Score: 8' });
    const r = fake.requests[0]!;
    assert.match(r.system, /RUBRIC-X/);
    assert.match(r.system, /Score: N.*0.*10/);
    assert.match(r.user, /What is 2\+3\?[\s\S]*#### 5[\s\S]*The answer is 5/);
  } finally {
    await fake.close();
  }
});

test('at most maxConcurrency grades are in flight; judge() shares one bound per endpoint', async () => {
  const fake = await startFakeJudge(() => 'Score: 5');
  try {
    fake.holdUntil(3, 10);
    const o = { baseURL: fake.baseURL, apiKey: fake.apiKey, model: 'judge', maxConcurrency: 3 };
    const verdicts = await Promise.all(Array.from({ length: 10 }, () => judge(input, o)));
    assert.ok(verdicts.every((v) => v.reward === 0.5));
    assert.is(fake.requests.length, 10);
    assert.is(fake.maxInFlight, 3);
  } finally {
    await fake.close();
  }
});

test('a 503 is retried; a hung request times out; an exhausted judge fails with JUDGE', async () => {
  let calls = 0;
  const fake = await startFakeJudge(() => (++calls === 1 ? { status: 503 } : 'Score: 10'));
  const o = { baseURL: fake.baseURL, apiKey: fake.apiKey, model: 'judge' };
  try {
    const v = await new Judge({ ...o, maxRetries: 1 }).grade(input);
    assert.is(v.grade, 10);
    assert.equal(
      fake.requests.map((r) => r.retry),
      [0, 1],
      'the second try is the client retrying',
    );
    calls = 0;
    await judgeFails(
      new Judge({ ...o, maxRetries: 0 }).grade(input),
      /judge judge at .* failed: 503/,
    );
  } finally {
    await fake.close();
  }
  const hung = await startFakeJudge(() => 'hang');
  try {
    await judgeFails(
      new Judge({ ...o, baseURL: hung.baseURL, timeoutMs: 300, maxRetries: 1 }).grade(input),
      /timed out/i,
    );
    assert.is(hung.requests.length, 2, 'the timed-out request was tried again');
  } finally {
    await hung.close();
  }
  const wrongKey = await startFakeJudge(() => 'Score: 1');
  try {
    await judgeFails(
      new Judge({ ...o, baseURL: wrongKey.baseURL, apiKey: 'nope-nope' }).grade(input),
      /401/,
    );
  } finally {
    await wrongKey.close();
  }
});

test('against a real rtjob serve: the request is answered, and a reply with no grade fails as JUDGE', async () => {
  // Room for the judge's prompt (the built-in tiny context is 256 tokens).
  const model = await writeTinyModel(root, { max_position_embeddings: 1024 });
  const bin = fileURLToPath(new URL('../../cli/bin.js', import.meta.url));
  const child = spawn(
    process.execPath,
    [
      bin,
      'serve',
      '--pretrain',
      model,
      '--port',
      '0',
      '--max-tokens',
      '8',
      '--api-key',
      'judge-key-1',
    ],
    {
      env: { ...process.env, RTJOB_HOME: join(root, '.rtjob') },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  try {
    const baseURL = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d) => {
        out += d;
        const m = /at (http:\/\/\S+\/v1)\n/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.stderr!.on('data', (d) => (out += d));
      child.once('exit', (c) => reject(new Error(`serve exited ${c}: ${out}`)));
    });
    const j = new Judge({ baseURL, apiKey: 'judge-key-1', model: 'model', maxRetries: 0 });
    // The random model's greedy reply holds no grade: a clear JUDGE error quoting it.
    await judgeFails(j.grade(input), /judge model gave no grade 0-10: ".*"/);
  } finally {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
});

test.run();
