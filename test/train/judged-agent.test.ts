/**
 * `examples/judged-agent.ts` trains on an LLM judge's grades: train_ppo runs the example against a
 * judge behind OpenAI's chat completions route (a protocol-faithful fake: a served tiny model
 * cannot write grades, see test/rewards/judge.test.ts), each episode's reward is the grade the
 * judge gave it / 10, and a prompt the judge answers without a grade has its episodes counted as
 * failed and its group dropped, not crashing the run.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { startFakeJudge, type JudgeRequest } from '../fakes/judge-server.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-judged-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const example = fileURLToPath(new URL('../../examples/judged-agent.ts', import.meta.url));

test('the example trains on the judge’s grades; a reply without a grade fails its episodes', async () => {
  let garbled: string | undefined;
  const given: { r: JudgeRequest; grade?: number }[] = [];
  const judge = await startFakeJudge((r) => {
    const question = /Question:\n([\s\S]*?)\n\nReference/.exec(r.user)![1]!;
    garbled ??= question;
    if (question === garbled) {
      given.push({ r });
      return 'I would rather not say.';
    }
    // A grade that depends on the response, so rewards differ within a group.
    const response = /Response to grade:\n([\s\S]*)$/.exec(r.user)![1]!;
    const grade = response.length % 11;
    given.push({ r, grade });
    return `The reasoning is ${grade > 5 ? 'sound' : 'weak'}.\nScore: ${grade}`;
  });
  Object.assign(process.env, {
    JUDGE_BASE_URL: judge.baseURL,
    JUDGE_API_KEY: judge.apiKey,
    JUDGE_MODEL: 'judge',
  });
  const rows: { step: number; values: Record<string, number> }[] = [];
  try {
    const s = await trainPpo(
      tinyRunArgs(model, join(root, 'out'), {
        'in-process': true,
        'max-steps': 2,
        'agent-func': example,
        'agent-error-budget': 0.5,
      }),
      {},
      { log: { line: () => {}, metric: (step, values) => void rows.push({ step, values }) } },
    );
    assert.is(s.steps, 2);
    // 2 steps × 4 prompts × 2 samples, one grade each.
    assert.is(given.length, 16);
    assert.ok(
      given.every((g) => /must solve the arithmetic/.test(g.r.system)),
      'the example’s rubric',
    );
    const step1 = rows.find((r) => r.step === 1 && r.values.reward_mean !== undefined)!.values;
    assert.is(step1.episodes_failed, 2, "the garbled prompt's two episodes");
    assert.is(step1.groups_dropped, 1);
    // Step 1's episodes are the first 8 grades (sync: step 1 ends before step 2 starts).
    const graded = given.slice(0, 8).filter((g) => g.grade !== undefined);
    assert.is(graded.length, 6);
    const want = graded.reduce((a, g) => a + g.grade! / 10, 0) / graded.length;
    assert.ok(
      Math.abs(step1.reward_mean! - want) < 1e-9,
      `reward_mean ${step1.reward_mean} is the judge's mean grade / 10 (${want})`,
    );
    assert.ok(
      Math.abs(step1['info/judge_grade']! - want * 10) < 1e-9,
      `info/judge_grade ${step1['info/judge_grade']}`,
    );
  } finally {
    for (const k of ['JUDGE_BASE_URL', 'JUDGE_API_KEY', 'JUDGE_MODEL']) delete process.env[k];
    await judge.close();
  }
});

test.run();
